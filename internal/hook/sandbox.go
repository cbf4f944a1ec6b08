package hook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"github.com/moby/sys/reexec"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
)

// The host's ldconfig runs against a container root that the image controls. Run as
// `ldconfig -r <root>` in the container's namespaces before pivot_root, it could leave the
// root: the container's /proc is mounted under the root and /proc/1 is runc init, whose root
// is the host's "/", so an image linking a library directory, ldconfig's aux cache, an
// ld.so.conf entry or a SONAME through /proc/1/root made ldconfig write on the host.
//
// So gpu-hook re-executes itself (SandboxCommand) in new mount and PID namespaces, where the
// child bind-mounts the root's own mount onto the root, not recursively: the container's
// volumes, /proc, /dev, /sys and every other mount under the root are not there for ldconfig.
// It mounts back only the injected libraries (descriptors the parent opened inside the root)
// and a procfs of the new PID namespace (where /proc/1 is ldconfig, in the container root),
// pivots into the root, and executes a sealed in-memory copy of the host's static ldconfig (a
// dynamic one would run the image's loader). ldconfig reads the configuration ReadConfig
// built, as a descriptor, and ignores the image's aux cache (it could be a FIFO); the sandbox
// is killed at the deadline and dies with gpu-hook. ldconfig's output names the image's paths
// and quotes its configuration: it goes to the runtime's log, never into an error message.

// SandboxCommand is the name gpu-hook re-executes itself under (moby/sys/reexec: argv[0]).
const SandboxCommand = "gpu-hook-ldconfig-sandbox"

func init() {
	reexec.Register(SandboxCommand, func() {
		err := Sandbox(os.Args[1:])
		fmt.Fprintln(os.Stderr, "gpu-hook: "+err.Error())
		os.Exit(1)
	})
}

// File descriptors the sandbox receives.
const (
	sandboxConfFD     = 3 // the flattened loader configuration
	sandboxLDConfigFD = 4 // the sealed copy of ldconfig
	sandboxLibraryFD  = 5 // the first injected library; the others follow
)

// maxOutput bounds what is kept of ldconfig's output.
const maxOutput = 16 << 10

// runLDConfig runs the host's ldconfig over the root in the sandbox, before the root's
// deadline (deadline is the update's length, for the message): the SONAME links of the
// libraries in in's directories (and the image's configured ones) and /etc/ld.so.cache. It
// returns ldconfig's output apart from the error (wrapping ldupdate.ErrLDConfig), and
// warnings about the image's loader configuration.
func runLDConfig(root *confined.Root, ldconfig string, in ldupdate.LDConfigInput, deadline time.Duration) (output string, warnings []string, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w: %w", ldupdate.ErrLDConfig, err)
		}
	}()
	bin, err := sealedExecutable(ldconfig)
	if err != nil {
		return "", nil, err
	}
	defer bin.Close()
	conf, err := ldupdate.ReadConfig(root)
	if err != nil {
		return "", conf.Warnings, err
	}
	confFile, err := sealedMemfd("ld.so.conf", bytes.NewReader(conf.Bytes()))
	if err != nil {
		return "", conf.Warnings, err
	}
	defer confFile.Close()
	files := []*os.File{confFile, bin} // sandboxConfFD, sandboxLDConfigFD
	args := []string{SandboxCommand, root.Path()}
	for _, lib := range in.Libraries {
		// Wherever the low-level runtime mounted it: a link in the image at its path resolves,
		// in the root, to the runtime's mount target. One resolving to no file is not there
		// for ldconfig either.
		h, err := root.Lookup(lib)
		if errors.Is(err, confined.ErrBudget) {
			return "", conf.Warnings, err
		}
		if err != nil {
			continue
		}
		defer h.Close()
		if isRegular(h) {
			files = append(files, h)
			args = append(args, lib)
		}
	}
	left := deadline
	if d := root.Deadline(); !d.IsZero() {
		left = time.Until(d)
	}
	// At the deadline the sandbox is killed: PID 1 of its namespace, it takes all in it along.
	ctx, cancel := context.WithTimeout(context.Background(), max(left, 0))
	defer cancel()
	cmd := exec.CommandContext(ctx, reexec.Self()) // reexec.Command, with the deadline
	cmd.Args = append(append(args, "--"), in.Dirs...)
	cmd.Env = ldconfigEnv
	cmd.ExtraFiles = files
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		// The sandbox must not outlive gpu-hook (runc kills a hook at its timeout): the
		// death signal follows the thread that started it, so that thread stays ours.
		Pdeathsig: syscall.SIGKILL,
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return "", conf.Warnings, fmt.Errorf("start the ldconfig sandbox: %w", err)
	}
	err = cmd.Wait()
	switch {
	case err != nil && ctx.Err() != nil:
		err = fmt.Errorf("%s did not finish within %s (hook.timeout): a file in the image blocks it, such as a FIFO among its libraries", ldconfig, deadline)
	case err != nil:
		err = fmt.Errorf("%s in the container root: %w", ldconfig, err)
	}
	return strings.TrimSpace(out.String()), conf.Warnings, err
}

// Sandbox is the child side, in new mount and PID namespaces: its arguments are the container
// root, the injected libraries' container paths (their files are descriptors
// sandboxLibraryFD, ...), "--" and the library directories. It only returns on error.
func Sandbox(args []string) error {
	sep := slices.Index(args, "--")
	if sep < 1 || !filepath.IsAbs(args[0]) {
		return fmt.Errorf("%s: internal command of gpu-hook, not for use by hand", SandboxCommand)
	}
	root, libs, dirs := args[0], args[1:sep], args[sep+1:]
	if os.Getpid() != 1 {
		return fmt.Errorf("%s: not in a new PID namespace", SandboxCommand)
	}
	if err := enterRoot(root, libs); err != nil {
		return err
	}
	argv := append([]string{"ldconfig", "-i", "-f", "/proc/self/fd/" + strconv.Itoa(sandboxConfFD), "-C", "/etc/ld.so.cache"}, dirs...)
	return fmt.Errorf("exec ldconfig: %w", unix.Exec("/proc/self/fd/"+strconv.Itoa(sandboxLDConfigFD), argv, ldconfigEnv))
}

// enterRoot makes the root's own mount the process's "/", with only the injected libraries
// libs mounted back into it and a procfs of the sandbox's own.
func enterRoot(root string, libs []string) error {
	root, err := filepath.EvalSymlinks(root) // the engine's path
	if err != nil {
		return fmt.Errorf("resolve container root: %w", err)
	}
	// Nothing done here may propagate back to the container's or the host's mounts.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The libraries' mounts, as this namespace has them (a mount of another namespace
	// cannot be bound): each must be the file the parent opened.
	mounted, err := openLibraries(root, libs)
	if err != nil {
		return err
	}
	defer func() {
		for _, h := range mounted {
			_ = h.Close()
		}
	}()
	// Not MS_REC: the root's mount alone.
	if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind container root: %w", err)
	}
	rootHandle, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) //nolint:gosec // G703: the container root gpu-hook passed itself, absolute and resolved
	if err != nil {
		return fmt.Errorf("open container root: %w", err)
	}
	defer rootHandle.Close()
	for i, lib := range libs {
		if err := mountLibrary(rootHandle, lib, mounted[i]); err != nil {
			return err
		}
	}
	if err := mountProc(rootHandle); err != nil {
		return err
	}
	if err := unix.Fchdir(int(rootHandle.Fd())); err != nil {
		return fmt.Errorf("enter container root: %w", err)
	}
	// pivot_root(".", ".") stacks the old root over the new one; detaching "." then leaves
	// only the container root (the runc and LXC idiom).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot into container root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// openLibraries opens the injected libraries in the root as this mount namespace has it,
// before anything is mounted over the root, each checked to be the file the parent handed
// over.
func openLibraries(root string, libs []string) ([]*os.File, error) {
	rootHandle, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) //nolint:gosec // G703: the container root gpu-hook passed itself, absolute and resolved
	if err != nil {
		return nil, fmt.Errorf("open container root: %w", err)
	}
	defer rootHandle.Close()
	var out []*os.File
	for i, lib := range libs {
		h, err := pathrs.OpenatInRoot(rootHandle, lib)
		if err != nil {
			return out, fmt.Errorf("injected library %s: %w", lib, err)
		}
		out = append(out, h)
		var have, want unix.Stat_t
		if err := unix.Fstat(int(h.Fd()), &have); err != nil {
			return out, fmt.Errorf("injected library %s: %w", lib, err)
		}
		if err := unix.Fstat(sandboxLibraryFD+i, &want); err != nil {
			return out, fmt.Errorf("injected library %s: its descriptor: %w", lib, err)
		}
		if have.Dev != want.Dev || have.Ino != want.Ino {
			return out, fmt.Errorf("injected library %s changed while the hook ran", lib)
		}
	}
	return out, nil
}

// mountLibrary binds the injected library src over its mount target at lib in the root, the
// empty regular file the low-level runtime made there. The bind copies the source mount's
// flags: read-only, as the runtime mounted it.
func mountLibrary(root *os.File, lib string, src *os.File) error {
	h, err := pathrs.OpenatInRoot(root, lib)
	if err != nil {
		return fmt.Errorf("injected library %s: its mount target: %w", lib, err)
	}
	defer h.Close()
	if !isRegular(h) {
		return fmt.Errorf("injected library %s: its mount target is not a regular file", lib)
	}
	if err := unix.Mount(trustedfile.FDPath(src), trustedfile.FDPath(h), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("injected library %s: mount it: %w", lib, err)
	}
	return nil
}

// mountProc mounts a procfs of the current PID namespace at /proc in the root, created if
// the image has none.
func mountProc(root *os.File) error {
	h, err := pathrs.MkdirAllHandle(root, "/proc", 0o555)
	if err != nil {
		return fmt.Errorf("open /proc in container root: %w", err)
	}
	defer h.Close()
	// Through the handle's magic link: the resolved directory, never a path re-walked.
	if err := unix.Mount("proc", trustedfile.FDPath(h), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount procfs in container root: %w", err)
	}
	return nil
}

// isRegular says whether the handle h is on a regular file.
func isRegular(h *os.File) bool {
	var st unix.Stat_t
	return unix.Fstat(int(h.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// ldconfigEnv is the whole environment ldconfig runs with.
var ldconfigEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// sealedExecutable returns a sealed in-memory copy of the host's static executable p, or
// p.real where p is a wrapper script (Ubuntu's /sbin/ldconfig, around /sbin/ldconfig.real).
func sealedExecutable(p string) (*os.File, error) {
	p, err := ldupdate.StaticLDConfig(p)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return sealedMemfd(filepath.Base(p), f)
}

// sealedMemfd copies r into an anonymous memory file that can no longer change.
func sealedMemfd(name string, r io.Reader) (*os.File, error) {
	fd, err := unix.MemfdCreate("gpu-hook-"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("create memory file: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("copy %s into memory: %w", name, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seal %s: %w", name, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// limitedBuffer keeps the first maxOutput bytes written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

package hook

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/gpu-runtime/gpu-runtime/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// The host's ldconfig runs against a container root that the image controls. Run as
// `ldconfig -r <root>` in the container's namespaces before pivot_root, it could leave the
// root: the container's /proc is mounted under the root and /proc/1 is runc init, whose root
// is the host's "/", so an image linking a library directory, ldconfig's aux cache, an
// ld.so.conf entry or a SONAME through /proc/1/root made ldconfig write on the host.
//
// So ldconfig runs in a sandbox where no path can leave the root: gpu-hook re-executes
// itself (SandboxCommand) in new mount and PID namespaces; the child detaches every procfs
// mounted at or under the root, bind-mounts the root onto itself, mounts a fresh procfs of
// the new PID namespace at <root>/proc (there /proc/1 is ldconfig itself, rooted in the
// container root), pivots into the root and unmounts the old one, then executes a sealed
// in-memory copy of the host's ldconfig (which must be a static executable: a dynamic one
// would run the image's loader). ldconfig reads a loader configuration gpu-hook built from
// confined reads (flattenLDSOConf), passed as a file descriptor, and ignores the image's aux
// cache (it could be a FIFO). Whatever else might block ldconfig (a FIFO among the libraries)
// is bounded: gpu-hook kills the sandbox at its deadline, and the sandbox dies with gpu-hook.

// SandboxCommand is the internal subcommand gpu-hook re-executes itself with.
const SandboxCommand = "__ldconfig-in-root"

// File descriptors the sandbox receives.
const (
	sandboxConfFD     = 3 // the flattened loader configuration
	sandboxLDConfigFD = 4 // the sealed copy of ldconfig
)

// ErrLDConfig marks a failed or timed-out ldconfig run.
var ErrLDConfig = errors.New("update the container's loader cache")

// maxOutput bounds what is kept of ldconfig's output for an error message.
const maxOutput = 16 << 10

// RunLDConfig runs the host's ldconfig over root in the sandbox described above: it creates
// the SONAME links of the libraries in dirs (and every directory the image's configuration
// names) and writes root's /etc/ld.so.cache. deadline bounds the whole run.
func RunLDConfig(root, ldconfig string, dirs []string, deadline time.Duration) ([]string, error) {
	bin, err := sealedExecutable(ldconfig)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLDConfig, err)
	}
	defer bin.Close()
	rootHandle, err := openRoot(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLDConfig, err)
	}
	conf, warnings := flattenLDSOConf(rootHandle)
	_ = rootHandle.Close()
	confFile, err := sealedMemfd("ld.so.conf", bytes.NewReader(conf))
	if err != nil {
		return warnings, fmt.Errorf("%w: %w", ErrLDConfig, err)
	}
	defer confFile.Close()

	cmd := exec.Command("/proc/self/exe", append([]string{SandboxCommand, root, "--"}, dirs...)...)
	cmd.Args[0] = "gpu-hook"
	cmd.Env = LDConfigEnv
	cmd.ExtraFiles = []*os.File{confFile, bin} // sandboxConfFD, sandboxLDConfigFD
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
		return warnings, fmt.Errorf("%w: start the ldconfig sandbox: %w", ErrLDConfig, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case err = <-done:
	case <-timer.C:
		// The sandbox is PID 1 of its namespace: killing it ends everything in it.
		_ = cmd.Process.Kill()
		<-done //nolint:errcheck // the sandbox was killed: its wait error only says so
		return warnings, fmt.Errorf("%w: %s did not finish within %s (hook.timeout): a file in the image blocks it, such as a FIFO among its libraries; output: %s",
			ErrLDConfig, ldconfig, deadline, strings.TrimSpace(out.String()))
	}
	if err != nil {
		return warnings, fmt.Errorf("%w: %s in the container root: %w: %s", ErrLDConfig, ldconfig, err, strings.TrimSpace(out.String()))
	}
	return warnings, nil
}

// Sandbox is the child side: run with the container root and the library directories by
// RunLDConfig, in new mount and PID namespaces. It only returns on error.
func Sandbox(args []string) error {
	if len(args) < 2 || args[1] != "--" || !filepath.IsAbs(args[0]) {
		return fmt.Errorf("%s: internal command of gpu-hook, not for use by hand", SandboxCommand)
	}
	root, dirs := args[0], args[2:]
	if os.Getpid() != 1 {
		return fmt.Errorf("%s: not in a new PID namespace", SandboxCommand)
	}
	if err := enterRoot(root); err != nil {
		return err
	}
	argv := append([]string{"ldconfig", "-i", "-f", "/proc/self/fd/" + strconv.Itoa(sandboxConfFD), "-C", "/etc/ld.so.cache"}, dirs...)
	return fmt.Errorf("exec ldconfig: %w", unix.Exec("/proc/self/fd/"+strconv.Itoa(sandboxLDConfigFD), argv, LDConfigEnv))
}

// enterRoot makes root the process's "/" with no procfs from outside reachable.
func enterRoot(root string) error {
	root, err := filepath.EvalSymlinks(root) // the engine's path, as mountinfo shows it
	if err != nil {
		return fmt.Errorf("resolve container root: %w", err)
	}
	// Nothing done here may propagate back to the container's or the host's mounts.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	procs, err := mountinfo.Under(root, "proc")
	if err != nil {
		return err
	}
	for _, p := range procs {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("detach procfs at %s: %w", p, err)
		}
	}
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind container root: %w", err)
	}
	if err := mountProc(root); err != nil {
		return err
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open container root: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Fchdir(fd); err != nil {
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

// mountProc mounts a procfs of the current PID namespace at <root>/proc, resolved inside
// the root (created if the image has none).
func mountProc(root string) error {
	h, err := securejoin.OpenInRoot(root, "/proc")
	if errors.Is(err, os.ErrNotExist) {
		if err = securejoin.MkdirAll(root, "/proc", 0o555); err == nil {
			h, err = securejoin.OpenInRoot(root, "/proc")
		}
	}
	if err != nil {
		return fmt.Errorf("open /proc in container root: %w", err)
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("mount procfs in container root: /proc is not a directory")
	}
	// Through the handle's magic link: the resolved directory, never a path re-walked.
	target := "/proc/self/fd/" + strconv.Itoa(int(h.Fd()))
	if err := unix.Mount("proc", target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount procfs in container root: %w", err)
	}
	return nil
}

// sealedExecutable returns a sealed in-memory copy of the static executable at p (a file of
// the host, trusted), or of p.real when p is a wrapper script and p.real is static (Ubuntu's
// /sbin/ldconfig is a script around /sbin/ldconfig.real).
func sealedExecutable(p string) (*os.File, error) {
	p, err := StaticLDConfig(p)
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

// StaticLDConfig returns the static executable to run for the configured ldconfig p: p, or
// p.real when p is a wrapper script and p.real is static; otherwise why neither will do.
func StaticLDConfig(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("ldconfig path %q is not absolute", p)
	}
	reason := staticExecutable(p)
	if reason != nil {
		if staticExecutable(p+".real") != nil {
			return "", fmt.Errorf("hook.ldconfig %s %v: ldconfig runs inside the container root, where a dynamic executable would run the image's loader; set hook.ldconfig to glibc's static ldconfig", p, reason) //nolint:errorlint // reason completes the sentence ("is a script"); it is not a cause to unwrap
		}
		p += ".real"
	}
	return p, nil
}

// staticExecutable says why p is not a static ELF executable, or nil.
func staticExecutable(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != elf.ELFMAG {
		if string(magic[:2]) == "#!" {
			return errors.New("is a script")
		}
		return errors.New("is not an ELF executable")
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	ef, err := readELF(f, st.Size())
	var progs []elfProg
	if err == nil {
		progs, err = ef.progs()
	}
	if err != nil {
		return fmt.Errorf("is not a readable ELF file (%w)", err)
	}
	for _, prog := range progs {
		if prog.typ == elf.PT_INTERP {
			return errors.New("is dynamically linked")
		}
	}
	if ef.typ != elf.ET_EXEC && ef.typ != elf.ET_DYN {
		return errors.New("is not an executable")
	}
	return nil
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

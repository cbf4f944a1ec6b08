package hook

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sync"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
)

// A driver that exposes MIG capabilities through /proc (no nvidia-caps device major) grants a
// MIG device by its access files under /proc/driver/nvidia/capabilities, which every procfs
// shows. The runtime refuses spec mounts under /proc, so gpu-hook (createContainer, before
// pivot_root) covers the container's directory with a tmpfs holding read-only bind mounts of
// the granted access files only. mount(2) is given handles' /proc/self/fd paths: it acts on
// the files resolved in the root, never re-walks a path there.

// CapabilitiesDir is where the driver lists its capabilities.
const CapabilitiesDir = "/proc/driver/nvidia/capabilities"

// capName is a MIG capability as mig-minors and the planner name it.
var capName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(mig/(config|monitor)|gpu[0-9]+/mig/gi[0-9]+(/ci[0-9]+)?/access)$`)
})

// ProcCaps makes the MIG capabilities caps (e.g. "gpu0/mig/gi1/access") the only ones the
// container sees: a tmpfs over its CapabilitiesDir (once; a later call adds to it), each
// access file bind-mounted read-only from the host's procRoot, all resolved inside root.
func ProcCaps(root, procRoot string, caps []string) error {
	for _, c := range caps {
		if !capName().MatchString(c) {
			return fmt.Errorf("proc-caps: %q is not a MIG capability", c)
		}
	}
	h, err := pathrs.OpenInRoot(root, CapabilitiesDir)
	if err != nil {
		return fmt.Errorf("open %s in container root: %w (is /proc mounted in the container?)", CapabilitiesDir, err)
	}
	defer h.Close()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(h.Fd()), &fs); err != nil {
		return fmt.Errorf("statfs %s in container root: %w", CapabilitiesDir, err)
	}
	switch fs.Type {
	case unix.PROC_SUPER_MAGIC:
		if err := unix.Mount("tmpfs", trustedfile.FDPath(h), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
			return fmt.Errorf("cover %s in container root: %w", CapabilitiesDir, err)
		}
	case unix.TMPFS_MAGIC: // covered by an earlier call: make it writable again to add to it
		if err := unix.Mount("", trustedfile.FDPath(h), "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
			return fmt.Errorf("remount %s in container root: %w", CapabilitiesDir, err)
		}
	default:
		return fmt.Errorf("%s in container root is not procfs (statfs type %#x)", CapabilitiesDir, fs.Type)
	}
	dir, err := pathrs.OpenInRoot(root, CapabilitiesDir) // the tmpfs now
	if err != nil {
		return fmt.Errorf("open %s in container root: %w", CapabilitiesDir, err)
	}
	defer dir.Close()
	for _, c := range caps {
		if err := bindCap(dir, procRoot, c); err != nil {
			return err
		}
	}
	if err := unix.Mount("", trustedfile.FDPath(dir), "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("make %s read-only in container root: %w", CapabilitiesDir, err)
	}
	return nil
}

// bindCap bind-mounts the host's access file of capability c read-only onto a new empty file
// at the same place under dir (the tmpfs). A capability already there is left as it is.
func bindCap(dir *os.File, procRoot, c string) error {
	parent, err := pathrs.MkdirAllHandle(dir, path.Dir(c), 0o755)
	if err != nil {
		return fmt.Errorf("create %s in the container's capabilities: %w", path.Dir(c), err)
	}
	defer parent.Close()
	fd, err := unix.Openat(int(parent.Fd()), path.Base(c), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s in the container's capabilities: %w", c, err)
	}
	target := os.NewFile(uintptr(fd), c)
	defer target.Close()
	source := filepath.Join(procRoot, CapabilitiesDir, filepath.FromSlash(c))
	if err := unix.Mount(source, trustedfile.FDPath(target), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s into the container: %w", source, err)
	}
	// The handle names the file under the bind mount: open the mount itself to remount it.
	mounted, err := pathrs.OpenatInRoot(parent, path.Base(c))
	if err != nil {
		return fmt.Errorf("open %s in the container's capabilities: %w", c, err)
	}
	defer mounted.Close()
	if err := unix.Mount("", trustedfile.FDPath(mounted), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make %s read-only in the container: %w", c, err)
	}
	return nil
}

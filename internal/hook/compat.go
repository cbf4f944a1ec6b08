package hook

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// CUDA forward compatibility: CUDA images may ship a newer user-space driver (libcuda) in
// CompatDir. When it is newer than the host driver, the container's loader must prefer it;
// this is done with an ld.so.conf.d entry and by listing the directory first for ldconfig.
// Image files are never mounted or executed: they are only read, through handles resolved
// inside the container root.
const (
	CompatDir  = "/usr/local/cuda/compat"
	CompatConf = "/etc/ld.so.conf.d/00-gpu-runtime-cuda-compat.conf"
	compatNote = ".note.cuda.fwd_compatibility"
)

// CompatVersion returns the driver version of the newest libcuda.so.<version> in the
// image's compat directory, or "" when there is none. The version comes from the file
// name; when the library carries a .note.cuda.fwd_compatibility note whose payload is a
// version string, that wins.
func CompatVersion(root string) (string, error) {
	dirHandle, err := securejoin.OpenInRoot(root, CompatDir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("open %s in container root: %w", CompatDir, err)
	}
	defer dirHandle.Close()
	dir, err := securejoin.Reopen(dirHandle, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return "", nil // not a directory: nothing to prefer
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return "", fmt.Errorf("list %s in container root: %w", CompatDir, err)
	}
	best := ""
	for _, name := range names {
		v, ok := strings.CutPrefix(name, "libcuda.so.")
		if !ok || strings.Count(v, ".") < 1 {
			continue // libcuda.so.1 and friends are links to the versioned file
		}
		if _, err := requirements.CompareVersions(v, "0"); err != nil {
			continue
		}
		if nv := noteVersion(dirHandle, name); nv != "" {
			v = nv
		}
		if best == "" {
			best = v
		} else if c, _ := requirements.CompareVersions(v, best); c > 0 {
			best = v
		}
	}
	return best, nil
}

// noteVersion reads the forward-compatibility note of a compat library, if any.
func noteVersion(dir *os.File, name string) string {
	h, err := securejoin.OpenatInRoot(dir, name)
	if err != nil {
		return ""
	}
	defer h.Close()
	f, err := securejoin.Reopen(h, unix.O_RDONLY)
	if err != nil {
		return ""
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	defer ef.Close()
	sec := ef.Section(compatNote)
	if sec == nil || sec.Size > 4096 {
		return ""
	}
	data, err := sec.Data()
	if err != nil || len(data) < 12 {
		return ""
	}
	// ELF note: namesz, descsz, type, name (padded to 4), desc.
	namesz := int(ef.ByteOrder.Uint32(data[0:4]))
	descsz := int(ef.ByteOrder.Uint32(data[4:8]))
	off := 12 + (namesz+3)&^3
	if namesz < 0 || descsz <= 0 || off+descsz > len(data) {
		return ""
	}
	v := string(bytes.TrimRight(data[off:off+descsz], "\x00"))
	if _, err := requirements.CompareVersions(v, "0"); err != nil {
		return ""
	}
	return v
}

// preferCompat writes CompatConf inside root (confined to it) so the loader searches
// CompatDir first.
func preferCompat(root string) error {
	rootHandle, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open container root %s: %w", root, err)
	}
	defer rootHandle.Close()
	confDir, err := securejoin.MkdirAllHandle(rootHandle, path.Dir(CompatConf), 0o755)
	if err != nil {
		return fmt.Errorf("create %s in container root: %w", path.Dir(CompatConf), err)
	}
	defer confDir.Close()
	name := path.Base(CompatConf)
	tmp := "." + name + ".tmp"
	dfd := int(confDir.Fd())
	_ = unix.Unlinkat(dfd, tmp, 0)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s in container root: %w", CompatConf, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.WriteString("# written by gpu-hook: CUDA forward compatibility libraries are newer than the host driver\n" + CompatDir + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %s in container root: %w", CompatConf, err)
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("install %s in container root: %w", CompatConf, err)
	}
	return nil
}

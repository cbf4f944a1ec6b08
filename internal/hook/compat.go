package hook

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
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

// maxCompatCandidates bounds how many compat libraries are opened: an image can hold any
// number of files named libcuda.so.*, and each one opened costs the create.
const maxCompatCandidates = 8

// maxCompatNote bounds the forward-compatibility note read from a compat library.
const maxCompatNote = 4096

// CompatVersion returns the driver version of the newest libcuda.so.<version> in the
// image's compat directory, or "" when there is none. The version comes from the file
// name; when the library carries a .note.cuda.fwd_compatibility note whose payload is a
// version string, that wins. Only regular files are opened (without blocking), at most
// maxCompatCandidates of them, the newest by name: a warning says when more were skipped.
func CompatVersion(root string) (string, []string, error) {
	dirHandle, err := securejoin.OpenInRoot(root, CompatDir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("open %s in container root: %w", CompatDir, err)
	}
	defer dirHandle.Close()
	dir, err := securejoin.Reopen(dirHandle, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return "", nil, nil // not a directory: nothing to prefer
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return "", nil, fmt.Errorf("list %s in container root: %w", CompatDir, err)
	}
	type candidate struct{ name, version string }
	var candidates []candidate
	for _, name := range names {
		v, ok := strings.CutPrefix(name, "libcuda.so.")
		if !ok || strings.Count(v, ".") < 1 {
			continue // libcuda.so.1 and friends are links to the versioned file
		}
		if _, err := requirements.CompareVersions(v, "0"); err != nil {
			continue
		}
		candidates = append(candidates, candidate{name, v})
	}
	sort.Slice(candidates, func(i, j int) bool {
		c, _ := requirements.CompareVersions(candidates[i].version, candidates[j].version)
		return c > 0 || (c == 0 && candidates[i].name < candidates[j].name)
	})
	var warnings []string
	if len(candidates) > maxCompatCandidates {
		warnings = append(warnings, fmt.Sprintf("%s holds %d libcuda.so.<version> files; only the newest %d by name were considered",
			CompatDir, len(candidates), maxCompatCandidates))
		candidates = candidates[:maxCompatCandidates]
	}
	best := ""
	for _, c := range candidates {
		v := c.version
		nv, regular := noteVersion(dirHandle, c.name)
		if !regular {
			warnings = append(warnings, fmt.Sprintf("%s/%s ignored: not a regular file", CompatDir, c.name))
			continue
		}
		if nv != "" {
			v = nv
		}
		if best == "" {
			best = v
		} else if cmp, _ := requirements.CompareVersions(v, best); cmp > 0 {
			best = v
		}
	}
	return best, warnings, nil
}

// noteVersion reads the forward-compatibility note of a compat library, if any; regular is
// false when the name is not a regular file (it is then not opened for reading at all). The
// ELF file comes from the image: it is read with the bounded reader (elf.go), which checks
// the header and the section table's size before reading them, reads at most 64 KiB of
// section names and a note of at most maxCompatNote bytes.
func noteVersion(dir *os.File, name string) (version string, regular bool) {
	h, err := securejoin.OpenatInRoot(dir, name)
	if err != nil {
		return "", false
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false
	}
	f, err := securejoin.Reopen(h, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return "", true
	}
	defer f.Close()
	ef, err := readELF(f, st.Size)
	if err != nil {
		return "", true
	}
	data, err := ef.section(compatNote, maxCompatNote)
	if err != nil || len(data) < 12 {
		return "", true
	}
	// ELF note: namesz, descsz, type, name (padded to 4), desc.
	namesz := uint64(ef.order.Uint32(data[0:4]))
	descsz := uint64(ef.order.Uint32(data[4:8]))
	off := 12 + (namesz+3)&^3
	if descsz == 0 || off > uint64(len(data)) || descsz > uint64(len(data))-off {
		return "", true
	}
	v := string(bytes.TrimRight(data[off:off+descsz], "\x00"))
	if _, err := requirements.CompareVersions(v, "0"); err != nil {
		return "", true
	}
	return v, true
}

// preferCompat writes CompatConf inside root (confined to it) so the loader searches
// CompatDir first.
func preferCompat(root string) error {
	rootHandle, err := openRoot(root)
	if err != nil {
		return err
	}
	defer rootHandle.Close()
	confDir, err := securejoin.MkdirAllHandle(rootHandle, path.Dir(CompatConf), 0o755)
	if err != nil {
		return fmt.Errorf("create %s in container root: %w", path.Dir(CompatConf), err)
	}
	defer confDir.Close()
	content := "# written by gpu-hook: CUDA forward compatibility libraries are newer than the host driver\n" + CompatDir + "\n"
	if err := atomicfile.WriteAt(confDir, path.Base(CompatConf), []byte(content), 0o644); err != nil {
		return fmt.Errorf("write %s in container root: %w", CompatConf, err)
	}
	return nil
}

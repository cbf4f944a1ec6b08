package ldupdate

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// CUDA forward compatibility: CUDA images may ship a newer user-space driver (libcuda) in
// CompatDir. When it is newer than the host driver, the container's loader must prefer it: an
// ld.so.conf.d entry says so, and ldconfig is given the directory first. Image files are only
// read, never mounted or executed.
const (
	CompatDir  = "/usr/local/cuda/compat"
	CompatConf = "/etc/ld.so.conf.d/00-gpu-runtime-cuda-compat.conf"
	compatNote = ".note.cuda.fwd_compatibility"
)

// Bounds on what CompatVersion reads.
const (
	// maxCompatCandidates: libcuda.so.* files opened; each one costs the create.
	maxCompatCandidates = 8
	// maxCompatList: names listed of the compat directory, where NVIDIA's cuda-compat package
	// installs about a dozen files: a larger directory is refused, not skimmed.
	maxCompatList = 4096
	// maxCompatNote: the forward-compatibility note of a compat library.
	maxCompatNote = 4096
)

// CompatVersion returns the driver version of the newest libcuda.so.<version> in the image's
// compat directory, or "": its .note.cuda.fwd_compatibility note's where that holds one, else
// the file name's. Only regular files are opened (without blocking), the maxCompatCandidates
// newest by name, with a warning when more were skipped. A compat directory on another mount
// is not considered, with a warning; more than maxCompatList entries, or the budget's end, is
// an error.
func CompatVersion(root *confined.Root) (string, []string, error) {
	dir, err := root.Dir(CompatDir)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
		return "", nil, nil
	case errors.Is(err, confined.ErrOtherMount):
		return "", []string{"CUDA forward compatibility not considered: " + err.Error()}, nil
	case err != nil:
		return "", nil, fmt.Errorf("open %s in container root: %w", CompatDir, err)
	}
	names, err := dir.List(maxCompatList)
	if err != nil {
		if !errors.Is(err, confined.ErrBudget) {
			err = fmt.Errorf("%s: %w: gpu-runtime reads at most %d names of the CUDA compat directory (NVIDIA's cuda-compat package installs about a dozen)", CompatDir, err, maxCompatList)
		}
		return "", nil, err
	}
	type candidate struct {
		name, version string
		parsed        requirements.Version
	}
	var candidates []candidate
	for _, name := range names {
		v, ok := strings.CutPrefix(name, "libcuda.so.")
		if !ok || strings.Count(v, ".") < 1 {
			continue // libcuda.so.1 and friends are links to the versioned file
		}
		parsed, err := requirements.ParseVersion(v)
		if err != nil {
			continue
		}
		candidates = append(candidates, candidate{name, v, parsed})
	}
	// Each version parsed once, not at every comparison.
	slices.SortFunc(candidates, func(a, b candidate) int {
		return cmp.Or(b.parsed.Compare(a.parsed), strings.Compare(a.name, b.name))
	})
	var warnings []string
	if len(candidates) > maxCompatCandidates {
		warnings = append(warnings, fmt.Sprintf("%s holds %d libcuda.so.<version> files; only the newest %d by name were considered",
			CompatDir, len(candidates), maxCompatCandidates))
		candidates = candidates[:maxCompatCandidates]
	}
	best := ""
	for _, c := range candidates {
		nv, regular := noteVersion(dir, c.name)
		if !regular {
			warnings = append(warnings, fmt.Sprintf("%s/%s ignored: not a regular file", CompatDir, c.name))
			continue
		}
		v := cmp.Or(nv, c.version)
		if c, _ := requirements.CompareVersions(v, best); best == "" || c > 0 {
			best = v
		}
	}
	return best, warnings, nil
}

// noteVersion reads the forward-compatibility note of a compat library, if any; regular is
// false when name is not a regular file of the root's mount (it is then not read at all).
func noteVersion(dir *confined.Dir, name string) (version string, regular bool) {
	f, size, err := dir.Open(name, false)
	if err != nil {
		return "", false
	}
	defer f.Close()
	ef, err := readELF(f, size)
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

// preferCompat writes CompatConf inside the root so the loader searches CompatDir first.
func preferCompat(root *confined.Root) error {
	confDir, err := root.MkdirAll(path.Dir(CompatConf), 0o755)
	if err != nil {
		return fmt.Errorf("create %s in container root: %w", path.Dir(CompatConf), err)
	}
	content := "# written by gpu-hook: CUDA forward compatibility libraries are newer than the host driver\n" + CompatDir + "\n"
	return confDir.WriteFile(path.Base(CompatConf), []byte(content), 0o644)
}

package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/gpu-runtime/gpu-runtime/pkg/ldcache"
)

const nvmlSONAME = "libnvidia-ml.so.1"

// NVMLCandidates returns the host paths where libnvidia-ml.so.1 is looked for, in order:
// the driver root's ld.so.cache entries, then the standard library directories.
func NVMLCandidates(root string) []string {
	return nvmlCandidates(root, rootLDCache(root))
}

// rootLDCache reads the driver root's ld.so.cache; a missing or unreadable cache is empty
// (the standard directories are searched anyway).
func rootLDCache(root string) []ldcache.Entry {
	entries, _ := ldcache.Load(inRootLexical(root, "/etc/ld.so.cache"))
	return entries
}

func nvmlCandidates(root string, entries []ldcache.Entry) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, e := range entries {
		if e.Name == nvmlSONAME && e.Bits != 32 {
			add(inRootLexical(root, e.Path))
		}
	}
	for _, dir := range libDirs64 {
		add(inRootLexical(root, path.Join(dir, nvmlSONAME)))
	}
	return out
}

// FindNVML returns the first loadable candidate path (symlinks resolved inside the root).
func FindNVML(root string) (string, error) {
	candidates := NVMLCandidates(root)
	var tried []string
	for _, c := range candidates {
		resolved, err := resolveInRoot(root, c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", c, shortErr(err)))
			continue
		}
		return resolved, nil
	}
	return "", fmt.Errorf("%w: load %s from driver root %q: tried %s; set driver.root in the gpu-runtime config (%s) to where the NVIDIA driver is installed",
		ErrNVMLNotFound, nvmlSONAME, root, strings.Join(tried, ", "), "/etc/gpu-runtime/config.toml")
}

func shortErr(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "not found"
	}
	return err.Error()
}

// inRootLexical joins a root-relative absolute path onto root without resolving anything.
func inRootLexical(root, p string) string {
	if root == "/" || root == "" {
		return path.Clean("/" + p)
	}
	return path.Join(root, p)
}

// resolveInRoot resolves hostPath (which lies under root) with every symlink interpreted
// inside root, and checks that the result exists.
func resolveInRoot(root, hostPath string) (string, error) {
	rel := strings.TrimPrefix(hostPath, strings.TrimSuffix(root, "/"))
	resolved, err := securejoin.SecureJoin(root, rel)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(resolved); err != nil {
		return "", err
	}
	return resolved, nil
}

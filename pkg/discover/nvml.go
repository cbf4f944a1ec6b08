package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
)

const nvmlSONAME = "libnvidia-ml.so.1"

// rootLDCache reads the driver root's ld.so.cache; a missing or unreadable cache is empty
// (the standard directories are searched anyway).
func rootLDCache(root string) []ldcache.Entry {
	p, ok := ldcacheFile(root)
	if !ok {
		return nil
	}
	entries, _ := ldcache.Load(p)
	return entries
}

// ldcacheFile is the driver root's ld.so.cache, symlinks resolved inside the root (a link to
// /etc/ld.so.cache must not read the host's); false, with the lexical path, when missing.
func ldcacheFile(root string) (p string, ok bool) {
	p = inRootLexical(root, ldcache.DefaultPath)
	resolved, err := resolveInRoot(root, p)
	if err != nil {
		return p, false
	}
	return resolved, true
}

func nvmlCandidates(root string, entries []ldcache.Entry) []string {
	var out []string
	for _, e := range entries {
		if e.Name == nvmlSONAME && e.Bits != 32 {
			out = append(out, inRootLexical(root, e.Path))
		}
	}
	for _, dir := range libDirs64 {
		out = append(out, inRootLexical(root, path.Join(dir, nvmlSONAME)))
	}
	return dedupe(out)
}

// FindNVML returns the first loadable libnvidia-ml.so.1 (symlinks resolved inside the root),
// looked for in the driver root's ld.so.cache entries, then the standard library directories.
func FindNVML(root string) (string, error) {
	candidates := nvmlCandidates(root, rootLDCache(root))
	var tried []string
	for _, c := range candidates {
		resolved, err := resolveInRoot(root, c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", c, shortErr(err)))
			continue
		}
		return resolved, nil
	}
	return "", fmt.Errorf("%w: load %s from driver root %q: tried %s",
		ErrNVMLNotFound, nvmlSONAME, root, strings.Join(tried, ", "))
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

// resolveInRoot resolves hostPath, under root, with symlinks inside root; the result exists.
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

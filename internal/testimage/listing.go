package testimage

import (
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// CacheLine is a line of ldconfig -p: "\tKey (Desc) => Path".
type CacheLine struct{ Key, Desc, Path string }

func (l CacheLine) String() string { return l.Key + " (" + l.Desc + ") => " + l.Path }

// ListCache returns what ldconfig (the binary at the given path) prints with -p for the
// cache file at file, in its order: the answers the loader would read from it.
func ListCache(ldconfig, file string) ([]CacheLine, error) {
	out, err := exec.Command(ldconfig, "-p", "-C", file).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -p -C %s: %w", ldconfig, file, err)
	}
	var lines []CacheLine
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "\t") {
			continue
		}
		key, rest, _ := strings.Cut(line[1:], " (")
		desc, p, ok := strings.Cut(rest, ") => ")
		if !ok {
			return nil, fmt.Errorf("%s -p -C %s: unexpected line %q", ldconfig, file, line)
		}
		lines = append(lines, CacheLine{Key: key, Desc: desc, Path: p})
	}
	return lines, nil
}

// ResolveDir returns p, an absolute path inside root, with the symbolic links of its
// directory resolved inside root, so that /lib/x86_64-linux-gnu/x and
// /usr/lib/x86_64-linux-gnu/x compare equal in a usr-merged root. It is for roots whose
// links stay inside them, as Build's do; a directory that does not exist leaves p as it is.
func ResolveDir(root, p string) string {
	dir, err := filepath.EvalSymlinks(filepath.Join(root, path.Dir(p)))
	if err != nil {
		return p
	}
	rootReal, err := filepath.EvalSymlinks(root)
	if err != nil {
		return p
	}
	rel, err := filepath.Rel(rootReal, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return path.Join("/", filepath.ToSlash(rel), path.Base(p))
}

// DiffListings describes, line by line, where listing b differs from listing a (labelled
// la and lb), "" where they are the same; it stops after about 4 KB.
func DiffListings(la string, a []CacheLine, lb string, b []CacheLine) string {
	var out strings.Builder
	for i := range max(len(a), len(b)) {
		var x, y CacheLine
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			fmt.Fprintf(&out, "line %d:\n  %s %v\n  %s %v\n", i, la, x, lb, y)
			if out.Len() > 4000 {
				out.WriteString("…\n")
				break
			}
		}
	}
	return out.String()
}

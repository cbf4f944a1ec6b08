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

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// Limits on what is read of an image's loader configuration. A real one is a few files of
// a few lines each.
const (
	maxConfFiles = 256
	maxConfSize  = 1 << 20
	maxConfDepth = 8
)

// LDSOConf is where the loader configuration lives in a root.
const LDSOConf = "/etc/ld.so.conf"

// flattenLDSOConf returns the image's loader configuration as one file with no includes: the
// lines of /etc/ld.so.conf with each `include` replaced, in place, by the lines of the files
// its patterns match (sorted, as glibc's glob sorts them). ldconfig then reads only that
// text, which it parses itself, instead of opening image files by name: every file here is
// read through handles confined to the root, only when it is a regular file, without
// blocking and within the limits above. Files that cannot be read that way are skipped with
// a warning; a missing /etc/ld.so.conf is an empty configuration, as for ldconfig.
func flattenLDSOConf(root *os.File) (conf []byte, warnings []string) {
	var out bytes.Buffer
	files := 0
	var walk func(file string, depth int)
	walk = func(file string, depth int) {
		if files >= maxConfFiles {
			warnings = append(warnings, fmt.Sprintf("%s skipped: more than %d loader configuration files", file, maxConfFiles))
			return
		}
		files++
		data, err := readRegular(root, file, maxConfSize)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
			return
		case err != nil:
			warnings = append(warnings, fmt.Sprintf("loader configuration %s skipped: %v", file, err))
			return
		}
		for _, line := range strings.Split(string(data), "\n") {
			text, _, _ := strings.Cut(line, "#")
			text = strings.TrimSpace(text)
			if rest, ok := cutKeyword(text, "include"); ok {
				if depth >= maxConfDepth {
					warnings = append(warnings, fmt.Sprintf("%s: include %s skipped: includes nested more than %d deep", file, quote.Value(rest), maxConfDepth))
					continue
				}
				for _, pattern := range strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '\t' }) {
					if !path.IsAbs(pattern) { // relative to the including file, as glibc does
						pattern = path.Join(path.Dir(file), pattern)
					}
					matches, err := globInRoot(root, pattern)
					if err != nil {
						warnings = append(warnings, fmt.Sprintf("%s: include %s skipped: %v", file, quote.Value(pattern), quote.Error(err)))
					}
					for _, m := range matches {
						walk(m, depth+1)
					}
				}
				continue
			}
			if text != "" {
				out.WriteString(text + "\n")
			}
		}
	}
	walk(LDSOConf, 0)
	return out.Bytes(), warnings
}

// cutKeyword returns what follows keyword and a blank at the start of line.
func cutKeyword(line, keyword string) (string, bool) {
	rest, ok := strings.CutPrefix(line, keyword)
	if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

// globInRoot expands an absolute pattern (path.Match syntax in any component) inside the
// root, listing directories through confined handles. Matches come back sorted.
func globInRoot(root *os.File, pattern string) ([]string, error) {
	parts := strings.Split(strings.Trim(path.Clean(pattern), "/"), "/")
	paths := []string{"/"}
	for _, part := range parts {
		if part == "" {
			continue
		}
		var next []string
		if !strings.ContainsAny(part, `*?[\`) {
			for _, p := range paths {
				next = append(next, path.Join(p, part))
			}
		} else {
			if _, err := path.Match(part, ""); err != nil {
				return nil, fmt.Errorf("bad pattern: %w", err)
			}
			for _, dir := range paths {
				names, err := listDir(root, dir)
				if err != nil {
					continue // as glob: an unreadable directory matches nothing
				}
				for _, name := range names {
					if ok, _ := path.Match(part, name); ok && (name[0] != '.' || part[0] == '.') {
						next = append(next, path.Join(dir, name))
					}
				}
			}
		}
		if len(next) > maxConfFiles {
			return next[:maxConfFiles], fmt.Errorf("more than %d matches", maxConfFiles)
		}
		paths = next
	}
	sort.Strings(paths)
	return paths, nil
}

// listDir lists a directory inside the root, sorted.
func listDir(root *os.File, dir string) ([]string, error) {
	h, err := securejoin.OpenatInRoot(root, dir)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	d, err := securejoin.Reopen(h, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

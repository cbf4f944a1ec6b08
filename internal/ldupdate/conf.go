package ldupdate

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// Limits on what is read of an image's loader configuration, a few files of a few lines each
// in a real one; the update's budget bounds all of them together.
const (
	maxConfFiles = 256
	maxConfSize  = 1 << 20
	maxConfDepth = 8
	// maxGlobEntries: names listed per directory an include pattern's wildcard matches in.
	maxGlobEntries = 4096
	// maxConfWarnings: warnings given one by one; past them, one line counts the rest (an
	// image can repeat a bad line any number of times).
	maxConfWarnings = 10
)

// warnings collects what ReadConfig skipped, at most maxConfWarnings lines and a count.
type warnings struct {
	lines []string
	more  int
}

func (w *warnings) add(format string, args ...any) {
	if len(w.lines) >= maxConfWarnings {
		w.more++
		return
	}
	w.lines = append(w.lines, fmt.Sprintf(format, args...))
}

// list is the warnings, with a line counting those left out.
func (w *warnings) list() []string {
	if w.more == 0 {
		return w.lines
	}
	return append(w.lines, fmt.Sprintf("%d more warnings about the loader configuration not shown", w.more))
}

// LDSOConf is where the loader configuration lives in a root.
const LDSOConf = "/etc/ld.so.conf"

// confLine is a line of the flattened configuration and where it came from: messages name the
// file and line, never the text (an image can include a file it cannot read).
type confLine struct {
	text string
	file string
	line int
}

// Config is the image's loader configuration, flattened (ReadConfig).
type Config struct {
	lines []confLine
	// Warnings say which files were skipped, and why: at most maxConfWarnings, then a line
	// counting the others.
	Warnings []string
}

// Bytes is the configuration as one file with no includes, for ldconfig.
func (c Config) Bytes() []byte {
	var out bytes.Buffer
	for _, l := range c.lines {
		out.WriteString(l.text + "\n")
	}
	return out.Bytes()
}

// ReadConfig returns the image's loader configuration as one file with no includes, which
// ldconfig then parses instead of opening image files by name: /etc/ld.so.conf with each
// `include` replaced by the lines of the files its patterns match (sorted, as by glibc's
// glob). Each file is read once through the confined root, within the limits above; one that
// cannot be is skipped with a warning naming it (past maxConfWarnings, only counted). A missing /etc/ld.so.conf is empty, as for
// ldconfig. Only the budget's end is an error.
func ReadConfig(root *confined.Root) (Config, error) {
	var c Config
	var warn warnings
	read := map[string]bool{}
	var walk func(file string, depth int) error
	walk = func(file string, depth int) error {
		if read[file] {
			return nil // included again: its lines are in already, and ldconfig dedups directories
		}
		if len(read) >= maxConfFiles {
			warn.add("%s skipped: more than %d loader configuration files", quote.Cut(file), maxConfFiles)
			return nil
		}
		read[file] = true
		data, err := root.ReadFile(file, maxConfSize)
		switch {
		case errors.Is(err, confined.ErrBudget):
			return err
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
			return nil
		case err != nil:
			warn.add("loader configuration %s skipped: %v", quote.Cut(file), quote.Error(err))
			return nil
		}
		for i, line := range strings.Split(string(data), "\n") {
			text, _, _ := strings.Cut(line, "#")
			text = strings.TrimSpace(text)
			if rest, ok := strings.CutPrefix(text, "include"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
				if depth >= maxConfDepth {
					warn.add("%s line %d: include skipped: includes nested more than %d deep", quote.Cut(file), i+1, maxConfDepth)
					continue
				}
				for _, pattern := range strings.FieldsFunc(strings.TrimSpace(rest), func(r rune) bool { return r == ' ' || r == '\t' }) {
					if !path.IsAbs(pattern) { // relative to the including file, as glibc does
						pattern = path.Join(path.Dir(file), pattern)
					}
					matches, err := globInRoot(root, pattern, func(w string) {
						warn.add("%s line %d: include: %s", quote.Cut(file), i+1, w)
					})
					if err != nil {
						return err
					}
					for _, m := range matches {
						if err := walk(m, depth+1); err != nil {
							return err
						}
					}
				}
				continue
			}
			if text != "" {
				c.lines = append(c.lines, confLine{text: text, file: file, line: i + 1})
			}
		}
		return nil
	}
	err := walk(LDSOConf, 0)
	c.Warnings = warn.list()
	return c, err
}

// globInRoot expands an absolute pattern (path.Match syntax in any component) inside the
// root, listing at most maxGlobEntries names per directory. Matches come back sorted, at most
// maxConfFiles; warn says what was cut or skipped. Only the budget's end is an error.
func globInRoot(root *confined.Root, pattern string, warn func(string)) ([]string, error) {
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
				warn("bad pattern: " + err.Error())
				return nil, nil
			}
			for _, dir := range paths {
				names, err := root.List(dir, maxGlobEntries)
				switch {
				case errors.Is(err, confined.ErrBudget):
					return nil, err
				case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
					continue // as glob: a missing directory matches nothing
				case err != nil:
					warn(fmt.Sprintf("%s not searched: %v", quote.Cut(dir), quote.Error(err)))
					continue
				}
				for _, name := range names {
					if ok, _ := path.Match(part, name); ok && (name[0] != '.' || part[0] == '.') {
						next = append(next, path.Join(dir, name))
					}
				}
			}
		}
		if len(next) > maxConfFiles {
			warn(fmt.Sprintf("more than %d matches: only the first %d are read", maxConfFiles, maxConfFiles))
			next = next[:maxConfFiles]
		}
		paths = next
	}
	sort.Strings(paths)
	return paths, nil
}

// Package ldupdate updates a container's loader cache for the driver libraries injected into
// it, in-process and as ldconfig would leave it: the libraries' development and SONAME links,
// the CUDA forward-compatibility preference, and the image's own /etc/ld.so.cache with the
// libraries added (internal/ldcache). Everything it reads or writes in the container root goes
// through internal/confined (resolved in the root, on the root's own mount, within one
// budget). Where it cannot show its result equals ldconfig's, it says so (MethodLDConfig, with
// the reason and ldconfig's input): gpu-runtime then leaves the update to its hook, which runs
// the host's ldconfig in a sandbox (internal/hook). It runs no program and starts no process.
package ldupdate

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// Library is an injected library.
type Library struct {
	// Path is its path in the container.
	Path string
	// Source, when not empty, is the host file it will be mounted from: an update before the
	// mounts (at create) reads it there and makes its directory in the root, as the low-level
	// runtime would. Empty: it is read at Path, where the runtime mounted it.
	Source string
}

// Options say what to update the loader cache for.
type Options struct {
	// LDConfig is the host's static ldconfig (absolute), which the caller runs where the
	// update cannot be in-process: one that could not run is refused on every update, not on
	// the first image that needs it.
	LDConfig string
	// Libraries are the injected libraries.
	Libraries []Library
	// DriverVersion is the host driver's version; when the image's CUDA compat libcuda is
	// newer, the loader is pointed at it. Empty disables forward compatibility.
	DriverVersion string
}

// How the container's loader cache was updated (Result.Method).
const (
	// MethodInProcess: /etc/ld.so.cache was written from the image's cache and the libraries.
	MethodInProcess = "in-process"
	// MethodLDConfig: the update could not be shown equal to ldconfig's; ldconfig must
	// rebuild the cache over the whole image, given Result.LDConfig.
	MethodLDConfig = "ldconfig"
	// MethodSkipped: the image's loader reads no ld.so.cache (musl): none was written.
	MethodSkipped = "skipped"
)

// Result says what Update did.
type Result struct {
	Method string
	// Reason says why ldconfig must run or why no cache was written; empty for MethodInProcess.
	Reason string
	// Warnings say what of the image was skipped or ignored.
	Warnings []string
	// LDConfig is what ldconfig must be given, for MethodLDConfig.
	LDConfig LDConfigInput
}

// LDConfigInput is what ldconfig is run with when the update cannot be done in-process.
type LDConfigInput struct {
	// Libraries are the injected libraries' container paths; Dirs the directories on
	// ldconfig's command line (the compat directory first when preferred).
	Libraries, Dirs []string
}

// Note is the line about an update that was not done in-process, "" for one that was.
func (r Result) Note(ldconfig string) string {
	switch r.Method {
	case MethodLDConfig:
		return fmt.Sprintf("loader cache: ran %s over the whole image (slower) because %s", ldconfig, r.Reason)
	case MethodSkipped:
		return "loader cache: none written because " + r.Reason
	}
	return ""
}

// Update makes the injected libraries loadable inside the container root, as the package
// says; a musl image gets no cache. An error, wrapping ErrUpdate, means ldconfig must not run
// either: the root's budget is spent (confined.ErrBudget), or what must be written lies on
// another mount (confined.ErrOtherMount).
func Update(root *confined.Root, o Options) (Result, error) {
	w := &cacheWriter{root: root, ours: map[fileKey]bool{}}
	var res Result
	p, err := w.prepare(o)
	if err == nil {
		res.Method, res.Reason, err = w.write(p)
	}
	res.Warnings = w.warnings
	if res.Method == MethodLDConfig {
		res.LDConfig = p
	}
	if fatal(err) {
		err = fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	return res, err
}

// Prepare makes the development links and the compat preference and returns ldconfig's
// input: the reference the tests compare Update with.
func Prepare(root *confined.Root, o Options) (LDConfigInput, []string, error) {
	w := &cacheWriter{root: root, ours: map[fileKey]bool{}}
	p, err := w.prepare(o)
	return p, w.warnings, err
}

// ErrLDConfig marks a configured ldconfig that cannot be run (and, in the hook, a failed or
// timed-out ldconfig run).
var ErrLDConfig = errors.New("update the container's loader cache")

// ErrUpdate marks an update of the container's loader cache that could not be done at all:
// the image made it reach a limit, or put what it must write on another mount.
var ErrUpdate = errors.New("the container's loader cache cannot be updated")

// maxLoaderPaths bounds LoaderPaths, which are a few dozen without the image's configured
// directories: an image configuring more is left to the hook.
const maxLoaderPaths = 256

// ErrTooManyLoaderPaths: LoaderPaths found more than maxLoaderPaths paths.
var ErrTooManyLoaderPaths = fmt.Errorf("the image's loader configuration names more than %d directories", maxLoaderPaths)

// LoaderPaths are the paths inside the root that the update for the libraries libs reads,
// writes or lists, each once: the loader's cache and configuration, the directories ldconfig
// may scan (configured ones included), the libraries' directories and the compat directory.
// A mount at, above or below one is seen by the hook but not by an update at create.
// ErrTooManyLoaderPaths or the budget's end is an error (the update is left to the hook).
func LoaderPaths(r *confined.Root, libs []Library) ([]string, error) {
	var paths []string
	seen := map[string]bool{}
	add := func(p string) {
		if p = path.Clean(p); !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	for _, p := range append([]string{ldcache.DefaultPath, "/etc/ld.so.conf", "/etc/ld.so.conf.d", CompatDir}, scanDirs...) {
		add(p)
	}
	for _, lib := range libs {
		add(path.Dir(path.Clean(lib.Path)))
	}
	// The configured directories are scanned only for an image without a cache (an
	// unreadable one sends the update to ldconfig, in the hook): reading the configuration
	// costs ~0.2 ms on a distribution image, on every create.
	if h, err := r.Lookup(ldcache.DefaultPath); err == nil {
		fi, err := h.Stat()
		_ = h.Close()
		if err == nil && fi.Mode().IsRegular() {
			return paths, nil
		}
	}
	conf, err := ReadConfig(r)
	if err != nil {
		return nil, err
	}
	for _, line := range conf.lines {
		if path.IsAbs(line.text) {
			add(line.text)
		}
		if len(paths) > maxLoaderPaths {
			return nil, ErrTooManyLoaderPaths
		}
	}
	return paths, nil
}

// prepare makes the development links and the compat preference (w.compat) and returns
// ldconfig's input, with cleaned library paths.
func (w *cacheWriter) prepare(opts Options) (LDConfigInput, error) {
	var p LDConfigInput
	if _, err := StaticLDConfig(opts.LDConfig); err != nil {
		return p, fmt.Errorf("%w: %w", ErrLDConfig, err)
	}
	if _, err := w.root.MkdirAll("/etc", 0o755); err != nil { // kept open: the cache is written there
		return p, err
	}
	w.sources = map[string]string{}
	for _, l := range opts.Libraries {
		if !path.IsAbs(l.Path) {
			return p, fmt.Errorf("update ldcache: library path %q is not absolute", l.Path)
		}
		lib := path.Clean(l.Path)
		p.Libraries = append(p.Libraries, lib)
		if l.Source != "" {
			w.sources[lib] = l.Source
			if _, err := w.root.MkdirAll(path.Dir(lib), 0o755); err != nil {
				return p, err
			}
		}
		if d := path.Dir(lib); !slices.Contains(p.Dirs, d) {
			p.Dirs = append(p.Dirs, d)
		}
		if err := w.devLink(lib); err != nil {
			return p, err
		}
	}
	if opts.DriverVersion != "" {
		compat, cw, err := CompatVersion(w.root)
		w.warnings = append(w.warnings, cw...)
		if err != nil {
			return p, err
		}
		if c, cerr := requirements.CompareVersions(compat, opts.DriverVersion); compat != "" && cerr == nil && c > 0 {
			if err := preferCompat(w.root); err != nil {
				return p, err
			}
			p.Dirs = append([]string{CompatDir}, p.Dirs...)
			w.compat = true
		}
	}
	return p, nil
}

// DevLinkName returns a versioned library file name's development link name
// ("libcuda.so.550.54.15" -> "libcuda.so"), or "" if it has no ".so." part.
func DevLinkName(file string) string {
	i := strings.Index(file, ".so.")
	if i <= 0 {
		return ""
	}
	return file[:i+3]
}

// devLink creates <dir>/<dev link name> -> <file> unless something exists there, relative to
// the directory's handle in the root: an image's symlinked directory cannot redirect it.
func (w *cacheWriter) devLink(lib string) error {
	dir, file := path.Split(lib)
	name := DevLinkName(file)
	if name == "" {
		return nil
	}
	d, err := w.root.Dir(path.Clean(dir))
	if err != nil {
		return fmt.Errorf("open %s in container root %s: %w", dir, w.root.Path(), err)
	}
	if exists, err := d.Exists(name); err != nil || exists {
		return err
	}
	return d.Symlink(file, name)
}

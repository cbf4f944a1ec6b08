package hook

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// LDCacheOptions are the arguments of `gpu-hook update-ldcache`.
type LDCacheOptions struct {
	// LDConfig is the host's ldconfig (absolute path; a static executable), run where the
	// cache cannot be updated in-process.
	LDConfig string
	// Libraries are the container paths of the injected libraries.
	Libraries []string
	// DriverVersion is the host driver's version; when the image's CUDA compat libcuda is
	// newer, the loader is pointed at it. Empty disables forward compatibility.
	DriverVersion string
	// Deadline bounds the whole update, ldconfig included (gpu-runtime passes the hook's
	// timeout less a margin; at create, its own short one).
	Deadline time.Duration
	// Sources, for UpdateLDCacheAtCreate, name the host file each injected library (by
	// container path) will be mounted from: before the mounts, it is read there.
	Sources map[string]string
	// User, when not nil, is the container's user (process.user, no user namespace): the
	// image's files are read with its credentials, so that what it could not read is not
	// read for it either.
	User *confined.Cred
}

// DefaultDeadline bounds ldconfig when no deadline is given.
const DefaultDeadline = 25 * time.Second

// LDConfigEnv is the whole environment ldconfig runs with.
var LDConfigEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// How UpdateLDCache updated the container's loader cache (LDCacheResult.Method).
const (
	// MethodInProcess: gpu-hook wrote /etc/ld.so.cache itself, from the image's cache and
	// the injected libraries; no ldconfig ran.
	MethodInProcess = "in-process"
	// MethodLDConfig: the host's ldconfig rebuilt the cache over the whole image.
	MethodLDConfig = "ldconfig"
	// MethodSkipped: the image's loader reads no ld.so.cache (musl): none was written.
	MethodSkipped = "skipped"
)

// LDCacheResult says what UpdateLDCache did.
type LDCacheResult struct {
	Method string
	// Reason says why ldconfig ran (MethodLDConfig) or why no cache was written
	// (MethodSkipped); empty for MethodInProcess.
	Reason string
	// Warnings say what of the image was skipped or ignored.
	Warnings []string
	// LDConfigOutput is what ldconfig printed, when it ran: it names the image's paths and
	// quotes its configuration, so it goes to the runtime's log, never into a message.
	LDConfigOutput string
}

// Note is the line gpu-hook prints about an update that was not done in-process, "" for one
// that was.
func (r LDCacheResult) Note(ldconfig string) string {
	switch r.Method {
	case MethodLDConfig:
		return fmt.Sprintf("loader cache: ran %s over the whole image (slower) because %s", ldconfig, r.Reason)
	case MethodSkipped:
		return "loader cache: none written because " + r.Reason
	}
	return ""
}

// UpdateLDCache makes the injected libraries loadable inside the container root: it creates
// each library's development link (libcuda.so -> libcuda.so.550.54.15) where the image has
// none, points the loader at newer CUDA forward-compatibility libraries, then updates the
// container's /etc/ld.so.cache and the libraries' SONAME links.
//
// In the common case it does that in-process (writeLDCache): the image's own cache, read
// through confined handles, plus the injected libraries (and preferred compat libraries,
// first), written back in glibc's format — the image's size does not matter. Where that
// cannot be shown to give what ldconfig would, it runs the host's ldconfig confined to the
// root (RunLDConfig) over the libraries' directories and the image's configuration, and
// the result says why. A musl image gets no cache at all. Warnings say what of the image
// was skipped.
func UpdateLDCache(root string, opts LDCacheOptions) (LDCacheResult, error) {
	deadline := opts.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	w, err := newCacheWriter(root, confined.DefaultLimits(deadline), opts)
	if err != nil {
		return LDCacheResult{}, err
	}
	defer w.root.Close()
	var res LDCacheResult
	p, err := w.prepare(opts)
	if err == nil {
		res.Method, res.Reason, err = w.write(p)
	}
	if err == nil && res.Method == MethodLDConfig {
		res.LDConfigOutput, err = w.runLDConfig(opts.LDConfig, p, deadline)
	}
	res.Warnings = w.warnings
	return res, inContext(err)
}

// inContext says what an error that ended the update was about, where the error itself
// names only a path and a limit or a mount.
func inContext(err error) error {
	if fatal(err) && !errors.Is(err, ErrLDConfig) {
		return fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	return err
}

// ErrUpdate marks an update of the container's loader cache that could not be done at all:
// the image made it reach a limit, or put what it must write on another mount.
var ErrUpdate = errors.New("the container's loader cache cannot be updated")

// UpdateLDCacheAtCreate is UpdateLDCache's in-process update done before the container
// exists: gpu-runtime calls it at create, on the root the engine prepared, so that the
// container needs no hook process. The libraries are not mounted yet: each is read at its
// host file (opts.Sources) and the directories they will be mounted into are made inside the
// root, as the low-level runtime would make them. Everything in the root is reached as the
// hook reaches it, through the confined root, within the same budget. It never runs
// ldconfig: where the hook would (MethodLDConfig, with the reason), the caller leaves the
// update to the hook, which does it all again; what was done here is what the hook does
// first anyway.
func UpdateLDCacheAtCreate(root string, opts LDCacheOptions) (LDCacheResult, error) {
	if opts.Sources == nil {
		return LDCacheResult{}, errors.New("update the loader cache at create: no host files for the libraries")
	}
	w, err := newCacheWriter(root, confined.DefaultLimits(opts.Deadline), opts)
	if err != nil {
		return LDCacheResult{}, err
	}
	defer w.root.Close()
	p, err := w.prepare(opts)
	res := LDCacheResult{}
	if err == nil {
		res.Method, res.Reason, err = w.write(p)
	}
	res.Warnings = w.warnings
	return res, inContext(err)
}

// newCacheWriter opens the container root for one update bounded by lim.
func newCacheWriter(root string, lim confined.Limits, opts LDCacheOptions) (*cacheWriter, error) {
	r, err := confined.Open(root, lim)
	if err != nil {
		return nil, err
	}
	r.ReadAs(opts.User)
	return &cacheWriter{root: r, ours: map[fileKey]bool{}, sources: opts.Sources}, nil
}

// maxLoaderPaths bounds LoaderPaths: the fixed ones and the library directories are a few
// dozen; an image configuring more directories than this is left to the hook.
const maxLoaderPaths = 256

// ErrTooManyLoaderPaths: LoaderPaths found more than maxLoaderPaths paths.
var ErrTooManyLoaderPaths = fmt.Errorf("the image's loader configuration names more than %d directories", maxLoaderPaths)

// LoaderPaths are the paths inside the root that the loader-cache update reads or writes,
// or whose contents it lists, for the libraries libs (container paths), each once: the
// loader's cache and configuration, the directories ldconfig may scan (the image's
// configured ones included), the libraries' directories and the CUDA compat directory.
// Something mounted at one of them, above one or below one is seen by the hook but not by
// UpdateLDCacheAtCreate, which runs before the mounts. What is read to find them is bounded
// by lim; ErrTooManyLoaderPaths or the budget's end is an error (the caller leaves the
// update to the hook).
func LoaderPaths(root string, libs []string, lim confined.Limits) ([]string, error) {
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
		add(path.Dir(path.Clean(lib)))
	}
	r, err := confined.Open(root, lim)
	if err != nil {
		return paths, nil
	}
	defer r.Close()
	// The configured directories are scanned only for an image without a cache (a cache
	// that is there but unreadable sends the update to ldconfig, in the hook): reading the
	// configuration costs ~0.2 ms on a distribution image, on every create.
	if h, err := r.Lookup(ldcache.DefaultPath); err == nil {
		regular := isRegular(h)
		_ = h.Close()
		if regular {
			return paths, nil
		}
	}
	conf, err := flattenLDSOConf(r)
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

// ldPlan is what prepareLDCache found: the cleaned library paths, the directories ldconfig
// is given (the compat directory first when its libcuda is preferred), and whether it is.
type ldPlan struct {
	libs   []string
	dirs   []string
	compat bool
}

func (w *cacheWriter) prepare(opts LDCacheOptions) (ldPlan, error) {
	var p ldPlan
	// The in-process update runs no ldconfig in the common case: a hook.ldconfig that could
	// not run is refused all the same, on every container, not on the first image that
	// needs it.
	if _, err := StaticLDConfig(opts.LDConfig); err != nil {
		return p, fmt.Errorf("%w: %w", ErrLDConfig, err)
	}
	if _, err := w.root.MkdirAll("/etc", 0o755); err != nil { // kept open: the cache is written there
		return p, err
	}
	seen := map[string]bool{}
	for _, lib := range opts.Libraries {
		if !path.IsAbs(lib) {
			return p, fmt.Errorf("update ldcache: library path %q is not absolute", lib)
		}
		lib = path.Clean(lib)
		p.libs = append(p.libs, lib)
		if w.sources != nil {
			if _, err := w.root.MkdirAll(path.Dir(lib), 0o755); err != nil {
				return p, err
			}
		}
		if d := path.Dir(lib); !seen[d] {
			seen[d] = true
			p.dirs = append(p.dirs, d)
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
			p.dirs = append([]string{CompatDir}, p.dirs...)
			p.compat = true
		}
	}
	return p, nil
}

// DevLinkName returns the development link name of a versioned library file name
// ("libcuda.so.550.54.15" -> "libcuda.so"), or "" if the name has no ".so." part.
func DevLinkName(file string) string {
	i := strings.Index(file, ".so.")
	if i <= 0 {
		return ""
	}
	return file[:i+3]
}

// devLink creates <dir>/<dev link name> -> <file> inside the root unless something exists
// there. The directory is opened inside the root and the link made relative to that handle,
// so a symlinked directory in the image cannot redirect the write outside the root.
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

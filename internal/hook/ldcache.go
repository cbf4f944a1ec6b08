package hook

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

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
	// Deadline bounds the ldconfig run (gpu-runtime passes the hook's timeout less a margin).
	Deadline time.Duration
	// Sources, for UpdateLDCacheAtCreate, name the host file each injected library (by
	// container path) will be mounted from: before the mounts, it is read there.
	Sources map[string]string
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
	w, err := newCacheWriter(root)
	if err != nil {
		return LDCacheResult{}, err
	}
	defer w.close()
	p, warnings, err := w.prepare(opts)
	res := LDCacheResult{Warnings: warnings}
	if err != nil {
		return res, err
	}
	method, reason := w.write(p)
	res.Method, res.Reason = method, reason
	if method != MethodLDConfig {
		return res, nil
	}
	deadline := opts.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	more, err := RunLDConfig(root, opts.LDConfig, p.dirs, deadline)
	res.Warnings = append(res.Warnings, more...)
	return res, err
}

// UpdateLDCacheAtCreate is UpdateLDCache's in-process update done before the container
// exists: gpu-runtime calls it at create, on the root the engine prepared, so that the
// container needs no hook process. The libraries are not mounted yet: each is read at its
// host file (opts.Sources) and the directories they will be mounted into are made inside the
// root, as the low-level runtime would make them. Everything in the root is reached as the
// hook reaches it, through handles confined to the root. It never runs ldconfig: where the
// hook would (MethodLDConfig, with the reason), the caller leaves the update to the hook,
// which does it all again; what was done here is what the hook does first anyway.
func UpdateLDCacheAtCreate(root string, opts LDCacheOptions) (LDCacheResult, error) {
	if opts.Sources == nil {
		return LDCacheResult{}, errors.New("update the loader cache at create: no host files for the libraries")
	}
	w, err := newCacheWriter(root)
	if err != nil {
		return LDCacheResult{}, err
	}
	defer w.close()
	w.sources = opts.Sources
	p, warnings, err := w.prepare(opts)
	res := LDCacheResult{Warnings: warnings}
	if err != nil {
		return res, err
	}
	res.Method, res.Reason = w.write(p)
	return res, nil
}

// LoaderPaths are the paths inside the root that the loader-cache update reads or writes,
// or whose contents it lists, for the libraries libs (container paths): the loader's cache
// and configuration, the directories ldconfig may scan (the image's configured ones
// included), the libraries' directories and the CUDA compat directory. Something mounted at
// one of them, above one or below one is seen by the hook but not by UpdateLDCacheAtCreate,
// which runs before the mounts.
func LoaderPaths(root string, libs []string) []string {
	paths := []string{ldcache.DefaultPath, "/etc/ld.so.conf", "/etc/ld.so.conf.d", CompatDir}
	paths = append(paths, scanDirs...)
	for _, lib := range libs {
		paths = append(paths, path.Dir(path.Clean(lib)))
	}
	h, err := openRoot(root)
	if err != nil {
		return paths
	}
	defer h.Close()
	// The configured directories are scanned only for an image without a cache (a cache
	// that is there but unreadable sends the update to ldconfig, in the hook): reading the
	// configuration costs ~0.2 ms on a distribution image, on every create.
	if c, err := securejoin.OpenatInRoot(h, ldcache.DefaultPath); err == nil {
		var st unix.Stat_t
		regular := unix.Fstat(int(c.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
		_ = c.Close()
		if regular {
			return paths
		}
	}
	conf, _ := flattenLDSOConf(h)
	for _, line := range strings.Split(string(conf), "\n") {
		if path.IsAbs(line) {
			paths = append(paths, path.Clean(line))
		}
	}
	return paths
}

// ldPlan is what prepareLDCache found: the cleaned library paths, the directories ldconfig
// is given (the compat directory first when its libcuda is preferred), and whether it is.
type ldPlan struct {
	libs   []string
	dirs   []string
	compat bool
}

func (w *cacheWriter) prepare(opts LDCacheOptions) (ldPlan, []string, error) {
	var p ldPlan
	root := w.rootPath
	// The in-process update runs no ldconfig in the common case: a hook.ldconfig that could
	// not run is refused all the same, on every container, not on the first image that
	// needs it.
	if _, err := StaticLDConfig(opts.LDConfig); err != nil {
		return p, nil, fmt.Errorf("%w: %w", ErrLDConfig, err)
	}
	if err := w.mkdir("/etc"); err != nil { // kept open: the cache is written there
		return p, nil, err
	}
	seen := map[string]bool{}
	for _, lib := range opts.Libraries {
		if !path.IsAbs(lib) {
			return p, nil, fmt.Errorf("update ldcache: library path %q is not absolute", lib)
		}
		lib = path.Clean(lib)
		p.libs = append(p.libs, lib)
		if w.sources != nil {
			if err := w.mkdir(path.Dir(lib)); err != nil {
				return p, nil, err
			}
		}
		if d := path.Dir(lib); !seen[d] {
			seen[d] = true
			p.dirs = append(p.dirs, d)
		}
		if err := w.devLink(lib); err != nil {
			return p, nil, err
		}
	}
	var warnings []string
	if opts.DriverVersion != "" {
		compat, cw, err := CompatVersion(root)
		warnings = append(warnings, cw...)
		if err != nil {
			return p, warnings, err
		}
		if c, cerr := requirements.CompareVersions(compat, opts.DriverVersion); compat != "" && cerr == nil && c > 0 {
			if err := preferCompat(root); err != nil {
				return p, warnings, err
			}
			p.dirs = append([]string{CompatDir}, p.dirs...)
			p.compat = true
		}
	}
	return p, warnings, nil
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
	handle, err := w.dir(path.Clean(dir))
	if err != nil {
		return fmt.Errorf("open %s in container root %s: %w", dir, w.rootPath, err)
	}
	fd := int(handle.Fd())
	var st unix.Stat_t
	err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("stat %s in container root: %w", path.Join(dir, name), err)
	}
	if err := unix.Symlinkat(file, fd, name); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create link %s -> %s in container root: %w", path.Join(dir, name), file, err)
	}
	return nil
}

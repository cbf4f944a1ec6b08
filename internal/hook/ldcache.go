package hook

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// LDCacheOptions are the arguments of `gpu-hook update-ldcache`.
type LDCacheOptions struct {
	// LDConfig is the host's ldconfig (absolute path; a static executable).
	LDConfig string
	// Libraries are the container paths of the injected libraries.
	Libraries []string
	// DriverVersion is the host driver's version; when the image's CUDA compat libcuda is
	// newer, the loader is pointed at it. Empty disables forward compatibility.
	DriverVersion string
	// Deadline bounds the ldconfig run (gpu-runtime passes the hook's timeout less a margin).
	Deadline time.Duration
}

// DefaultDeadline bounds ldconfig when no deadline is given.
const DefaultDeadline = 25 * time.Second

// LDConfigEnv is the whole environment ldconfig runs with.
var LDConfigEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// UpdateLDCache makes the injected libraries loadable inside the container root: it creates
// each library's development link (libcuda.so -> libcuda.so.550.54.15) where the image has
// none, points the loader at newer CUDA forward-compatibility libraries, then runs the
// host's ldconfig confined to the root (RunLDConfig) over the libraries' directories, which
// creates the SONAME links and rewrites /etc/ld.so.cache. Warnings say what of the image was
// skipped.
func UpdateLDCache(root string, opts LDCacheOptions) ([]string, error) {
	dirs, warnings, err := PrepareLDCache(root, opts)
	if err != nil {
		return warnings, err
	}
	deadline := opts.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	more, err := RunLDConfig(root, opts.LDConfig, dirs, deadline)
	return append(warnings, more...), err
}

// PrepareLDCache does all of UpdateLDCache but the ldconfig run, whose library directories
// it returns: the compat directory first when its libcuda is preferred.
func PrepareLDCache(root string, opts LDCacheOptions) (dirs, warnings []string, err error) {
	if !filepath.IsAbs(opts.LDConfig) {
		return nil, nil, fmt.Errorf("run ldconfig: path %q is not absolute", opts.LDConfig)
	}
	if err := securejoin.MkdirAll(root, "/etc", 0o755); err != nil {
		return nil, nil, fmt.Errorf("create /etc in container root %s: %w", root, err)
	}
	seen := map[string]bool{}
	for _, lib := range opts.Libraries {
		if !path.IsAbs(lib) {
			return nil, nil, fmt.Errorf("update ldcache: library path %q is not absolute", lib)
		}
		lib = path.Clean(lib)
		if d := path.Dir(lib); !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
		if err := devLink(root, lib); err != nil {
			return nil, nil, err
		}
	}
	if opts.DriverVersion != "" {
		compat, cw, err := CompatVersion(root)
		warnings = append(warnings, cw...)
		if err != nil {
			return nil, warnings, err
		}
		if c, cerr := requirements.CompareVersions(compat, opts.DriverVersion); compat != "" && cerr == nil && c > 0 {
			if err := preferCompat(root); err != nil {
				return nil, warnings, err
			}
			dirs = append([]string{CompatDir}, dirs...)
		}
	}
	return dirs, warnings, nil
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

// devLink creates <dir>/<dev link name> -> <file> inside root unless something exists there.
// The directory is opened inside the root and the link made relative to that handle, so a
// symlinked directory in the image cannot redirect the write outside the root.
func devLink(root, lib string) error {
	dir, file := path.Split(lib)
	name := DevLinkName(file)
	if name == "" {
		return nil
	}
	handle, err := securejoin.OpenInRoot(root, dir)
	if err != nil {
		return fmt.Errorf("open %s in container root %s: %w", dir, root, err)
	}
	defer handle.Close()
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

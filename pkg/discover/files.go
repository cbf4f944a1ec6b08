package discover

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
)

// Kind says what a driver file is.
type Kind string

// The kinds of driver files.
const (
	KindLibrary  Kind = "library"
	KindBinary   Kind = "binary"
	KindFirmware Kind = "firmware"
	KindSocket   Kind = "socket"
	KindConfig   Kind = "config"
)

// File is one driver file found on the host.
type File struct {
	Kind Kind `json:"kind"`
	// Capability is the capability that brings this file; "" for files every GPU container gets.
	Capability capabilities.Capability `json:"capability,omitempty"`
	Prefix     string                  `json:"prefix,omitempty"` // a library's SONAME prefix
	Bits       int                     `json:"bits,omitempty"`   // 64 or 32 for libraries
	// HostPath is the file to mount (symlinks resolved inside the driver root); ContainerPath
	// is where it goes: the path it was found at, minus the driver root.
	HostPath      string `json:"host_path"`
	ContainerPath string `json:"container_path"`
}

// Standard library directories, relative to the driver root.
var (
	libDirs64 = []string{
		"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
		"/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib",
		"/usr/local/nvidia/lib64",
	}
	libDirs32 = []string{
		"/usr/lib/i386-linux-gnu", "/lib/i386-linux-gnu", "/usr/lib32", "/lib32", "/usr/lib",
		"/lib", "/usr/local/nvidia/lib",
	}
	binDirs = []string{
		"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin",
		"/usr/local/nvidia/bin",
	}
	firmwareDirs = []string{"/lib/firmware/nvidia", "/usr/lib/firmware/nvidia"}
)

// FindDriverFiles lists the driver files of version under root that exist: every library of
// the capability table named "<prefix>.so.<version>" (in the root's ld.so.cache directories,
// then the standard ones, and their vdpau/ subdirectories), binaries, GSP firmware, sockets
// and config files.
func FindDriverFiles(root, version string) ([]File, error) {
	if version == "" {
		return nil, errors.New("find driver files: empty driver version")
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("find driver files: driver root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("find driver files: driver root %s is not a directory", root)
	}

	dirs64, dirs32 := libSearchDirs(rootLDCache(root))
	var files []File
	for _, c := range capabilities.All {
		set := capabilities.FilesOf(c)
		for _, prefix := range set.Libraries {
			name := prefix + ".so." + version
			found := map[int]bool{}
			for _, dirs := range [][]string{dirs64, dirs32} {
				for _, dir := range dirs {
					f, ok := find(root, path.Join(dir, name), KindLibrary, 0)
					if !ok || found[f.Bits] {
						continue
					}
					found[f.Bits] = true
					f.Capability, f.Prefix = c, prefix
					files = append(files, f)
				}
			}
		}
		for _, bin := range set.Binaries {
			for _, dir := range binDirs {
				if f, ok := find(root, path.Join(dir, bin), KindBinary, 0); ok {
					f.Capability = c
					files = append(files, f)
					break
				}
			}
		}
		for _, sock := range set.Sockets {
			if f, ok := find(root, sock, KindSocket, fs.ModeSocket); ok && !slices.ContainsFunc(files, func(g File) bool { return g.HostPath == f.HostPath }) {
				f.Capability = c // the var/run and run forms of one socket: the first found
				files = append(files, f)
			}
		}
		for _, cfg := range set.Configs {
			if f, ok := find(root, cfg, KindConfig, 0); ok {
				f.Capability = c
				files = append(files, f)
			}
		}
	}
	for _, dir := range firmwareDirs {
		fwDir := firmwareVersionDir(dir, version)
		entries, err := os.ReadDir(inRootLexical(root, fwDir))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "gsp") && strings.HasSuffix(e.Name(), ".bin") {
				if f, ok := find(root, path.Join(fwDir, e.Name()), KindFirmware, 0); ok {
					files = append(files, f)
				}
			}
		}
		break
	}
	return files, nil
}

// firmwareVersionDir is where a driver version's GSP firmware lives under a firmware dir.
func firmwareVersionDir(dir, version string) string { return path.Join(dir, version) }

// libSearchDirs returns the root-relative library directories, 64-bit and 32-bit: those the
// root's ld.so.cache names for driver libraries, then the standard ones, each with vdpau/.
func libSearchDirs(entries []ldcache.Entry) (dirs64, dirs32 []string) {
	var cache64, cache32 []string
	prefixes := capabilities.LibraryPrefixes()
	for _, e := range entries {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(e.Name, p+".so") }) {
			continue
		}
		dir := path.Dir(e.Path)
		if e.Bits == 32 {
			cache32 = append(cache32, dir)
		} else {
			cache64 = append(cache64, dir)
		}
	}
	return withVDPAU(dedupe(append(cache64, libDirs64...))), withVDPAU(dedupe(append(cache32, libDirs32...)))
}

func withVDPAU(dirs []string) []string {
	out := make([]string, 0, 2*len(dirs))
	for _, d := range dirs {
		out = append(out, d, path.Join(d, "vdpau"))
	}
	return dedupe(out)
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0:0]
	for _, s := range in {
		s = path.Clean(s)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// find looks up root-relative path p, resolving symlinks inside root, and checks the
// result has the wanted type (0 = regular file); a library must be ELF, its Bits set.
func find(root, p string, kind Kind, typ fs.FileMode) (File, bool) {
	lexical := inRootLexical(root, p)
	if _, err := os.Lstat(lexical); err != nil {
		return File{}, false
	}
	resolved, err := resolveInRoot(root, lexical)
	if err != nil {
		return File{}, false
	}
	fi, err := os.Stat(resolved)
	if err != nil || fi.Mode().Type() != typ {
		return File{}, false
	}
	f := File{Kind: kind, HostPath: resolved, ContainerPath: path.Clean(p)}
	if kind == KindLibrary {
		if f.Bits, err = elfBits(resolved); err != nil {
			return File{}, false
		}
	}
	return f, true
}

// elfBits reads the ELF class of a shared library from its identification bytes (without
// debug/elf, whose dependencies would slow every gpu-runtime start).
func elfBits(p string) (int, error) {
	fh, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	var ident [5]byte // EI_MAG0..3, EI_CLASS
	if _, err := io.ReadFull(fh, ident[:]); err != nil {
		return 0, fmt.Errorf("read ELF header of %s: %w", p, err)
	}
	if string(ident[:4]) != "\x7fELF" {
		return 0, fmt.Errorf("%s is not an ELF file", p)
	}
	switch ident[4] {
	case 2: // ELFCLASS64
		return 64, nil
	case 1: // ELFCLASS32
		return 32, nil
	}
	return 0, fmt.Errorf("%s: unknown ELF class %d", p, ident[4])
}

// Package testimage builds container root filesystems for tests and
// benchmarks: a distribution-like tree of real ELF shared libraries with
// distinct SONAMEs, the ld.so.conf files that list their directories, and
// an /etc/ld.so.cache written by the host's ldconfig, as an image built
// from a Dockerfile has.
//
// The libraries are minimal shared objects written by SharedObject, not
// compiled, so that a root with thousands of them builds in well under a
// second (plus ldconfig's run). ldconfig reads them like any library, and
// glibc's dynamic linker can load them (they define no symbols). Build
// writes only under the root it is given, creates every file new (it never
// overwrites one), and is deterministic: the same Options give the same
// tree and the same cache.
package testimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// ErrNeedRoot is wrapped by Build's error when the cache cannot be built
// because the process is not root: ldconfig -r chroots.
var ErrNeedRoot = errors.New("building /etc/ld.so.cache with ldconfig -r needs root")

// Options describe a root filesystem. The zero value is a root with no
// libraries; Default gives a realistic CUDA image.
type Options struct {
	// Libraries is the number of shared libraries in LibDir, each with its
	// own SONAME (such as libavcodec-3.so.59) and a SONAME link to its
	// versioned file; one in eight also has a development link (libfoo.so).
	Libraries int
	// LibDir is where Libraries go; "" means /usr/lib/x86_64-linux-gnu.
	LibDir string
	// UsrMerge makes /lib, /lib64, /bin and /sbin links to their /usr
	// directories, as in Debian 12 and Ubuntu 22.04 images.
	UsrMerge bool
	// NoConfig leaves out /etc/ld.so.conf and /etc/ld.so.conf.d, as
	// busybox-like images do: ldconfig then reads only its built-in
	// directories (/lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib
	// and /usr/lib on Debian's x86-64 ldconfig). Otherwise /etc/ld.so.conf
	// includes /etc/ld.so.conf.d/*.conf, which list /usr/local/lib, the
	// x86-64 and i386 multiarch directories, /usr/local/cuda/lib64 and
	// the /usr/local/nvidia directories NVIDIA's CUDA images list.
	NoConfig bool
	// CUDALibraries is the number of CUDA toolkit libraries (libcudart.so.12,
	// libcublas.so.12…) in /usr/local/cuda/lib64.
	CUDALibraries int
	// I386Libraries is the number of 32-bit libraries in
	// /usr/lib/i386-linux-gnu.
	I386Libraries int
	// GlibcHwcaps are glibc-hwcaps subdirectories of LibDir (such as
	// "x86-64-v3") that each get a variant of the first HwcapsLibraries
	// libraries, with the same SONAME, as ldconfig finds them.
	GlibcHwcaps     []string
	HwcapsLibraries int
	// CompatVersion, if set, adds CUDA forward-compatibility libraries
	// for that driver version to /usr/local/cuda/compat, as the
	// cuda-compat package installs them: libcuda.so.<version> with SONAME
	// libcuda.so.1, libcudadebugger, libnvidia-nvvm and
	// libnvidia-ptxjitcompiler. CompatInConfig lists that directory in
	// /etc/ld.so.conf.d/000_cuda-compat.conf, which ldconfig reads before
	// the other files, so its libcuda.so.1 comes first in the cache.
	CompatVersion  string
	CompatInConfig bool
	// HostLibc copies this host's x86-64 dynamic linker to
	// /lib64/ld-linux-x86-64.so.2 and its libc.so.6 to LibDir, so that a
	// dynamically linked program can run in the root under chroot.
	HostLibc bool
	// DlopenCUDA compiles, with the host's gcc, a dynamically linked program into
	// DlopenCUDAProgram that dlopens libcuda.so.1 by its SONAME and prints the file the
	// loader opened. It implies HostLibc, so that the program runs in the root.
	DlopenCUDA bool
	// NoCache skips running ldconfig: the root then has no
	// /etc/ld.so.cache, and Build does not need root.
	NoCache bool
	// Ldconfig is the ldconfig to run; "" means /sbin/ldconfig.
	Ldconfig string
}

// Default returns the options of a realistic CUDA image: a usr-merged
// Debian-like root with 1,500 libraries in /usr/lib/x86_64-linux-gnu, 32
// CUDA libraries, 4 i386 libraries and an ld.so.cache.
func Default() Options {
	return Options{
		Libraries:     1500,
		UsrMerge:      true,
		CUDALibraries: 32,
		I386Libraries: 4,
	}
}

// Library is one shared library Build wrote. Paths are absolute paths
// inside the root.
type Library struct {
	Soname string // its SONAME, e.g. "libcuda.so.1"
	File   string // the ELF file, e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
	// Link is the symbolic link named Soname next to File that ldconfig
	// records as the library's path, or "" where ldconfig records File
	// itself: where File is named by its SONAME, and in glibc-hwcaps
	// subdirectories, where ldconfig makes no links.
	Link   string
	Arch   Arch
	Hwcaps string // the glibc-hwcaps subdirectory it is in, or ""
}

// Path returns the path ldconfig records for l: Link, or File without one.
func (l Library) Path() string {
	if l.Link != "" {
		return l.Link
	}
	return l.File
}

// Image is a root filesystem Build wrote.
type Image struct {
	Root      string    // the directory holding the root filesystem
	Libraries []Library // every library written, in the order written
}

// Build writes a root filesystem described by opts into root, which must
// be an empty directory, and unless opts.NoCache runs ldconfig -r root to
// write its /etc/ld.so.cache; that needs root privileges, and without them
// Build fails with an error wrapping ErrNeedRoot.
func Build(root string, opts Options) (*Image, error) {
	if opts.LibDir == "" {
		opts.LibDir = "/usr/lib/x86_64-linux-gnu"
	}
	if opts.Ldconfig == "" {
		opts.Ldconfig = "/sbin/ldconfig"
	}
	if !path.IsAbs(opts.LibDir) {
		return nil, fmt.Errorf("build test image: library directory %q is not absolute", opts.LibDir)
	}
	if !opts.NoCache && os.Geteuid() != 0 {
		return nil, fmt.Errorf("build test image in %s: %w: running as uid %d; run as root or set Options.NoCache", root, ErrNeedRoot, os.Geteuid())
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("build test image: %w", err)
	}
	if len(entries) > 0 {
		return nil, fmt.Errorf("build test image: %s is not empty", root)
	}
	img := &Image{Root: root}
	b := builder{img: img}
	b.layout(opts)
	b.libraries(opts)
	if opts.HostLibc || opts.DlopenCUDA {
		b.hostLibc(opts)
	}
	if opts.DlopenCUDA {
		b.dlopenCUDA()
	}
	if !opts.NoConfig {
		b.config(opts)
	}
	if b.err != nil {
		return nil, fmt.Errorf("build test image in %s: %w", root, b.err)
	}
	if !opts.NoCache {
		if err := RunLdconfig(opts.Ldconfig, root, "/etc/ld.so.cache"); err != nil {
			return nil, fmt.Errorf("build test image in %s: %w", root, err)
		}
	}
	return img, nil
}

// RunLdconfig runs ldconfig (the binary at the given path) over root as
// an image build does, writing the cache to cache, a path inside root.
// It needs root privileges; without them it fails with an error wrapping
// ErrNeedRoot.
func RunLdconfig(ldconfig, root, cache string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run %s -r %s: %w: running as uid %d", ldconfig, root, ErrNeedRoot, os.Geteuid())
	}
	if _, err := os.Stat(ldconfig); err != nil {
		return fmt.Errorf("find ldconfig: %w", err)
	}
	cmd := exec.Command(ldconfig, "-r", root, "-C", cache)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("run %s: %w: %s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// builder writes files under img.Root, remembering the first error.
type builder struct {
	img  *Image
	err  error
	dirs map[string]bool // directories made so far
}

// abs returns the host path of p, an absolute path inside the root. The
// root is one Build creates, so p is joined lexically: every link in it
// was written by Build and points inside it.
func (b *builder) abs(p string) string {
	return filepath.Join(b.img.Root, filepath.FromSlash(p))
}

func (b *builder) mkdir(p string) {
	if b.err != nil || b.dirs[p] {
		return
	}
	b.err = os.MkdirAll(b.abs(p), 0o755)
	if b.dirs == nil {
		b.dirs = make(map[string]bool)
	}
	b.dirs[p] = true
}

func (b *builder) symlink(target, p string) {
	if b.err == nil {
		b.err = os.Symlink(target, b.abs(p))
	}
}

func (b *builder) write(p string, data []byte, mode os.FileMode) {
	if b.err != nil {
		return
	}
	f, err := os.OpenFile(b.abs(p), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		b.err = err
		return
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		b.err = fmt.Errorf("write %s: %w", p, err)
		return
	}
	if err := f.Close(); err != nil {
		b.err = fmt.Errorf("write %s: %w", p, err)
	}
}

// layout creates the top-level directories, merged into /usr or not.
func (b *builder) layout(opts Options) {
	for _, d := range []string{"/etc", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/local/lib", "/tmp", "/var/cache"} {
		b.mkdir(d)
	}
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		if opts.UsrMerge {
			b.mkdir("/usr/" + d)
			b.symlink("usr/"+d, "/"+d)
		} else {
			b.mkdir("/" + d)
		}
	}
}

// library writes one library and records it.
func (b *builder) library(lib Library) {
	if b.err != nil {
		return
	}
	data, err := SharedObject(lib.Arch, lib.Soname, "libc.so.6")
	if err != nil {
		b.err = err
		return
	}
	b.mkdir(path.Dir(lib.File))
	b.write(lib.File, data, 0o644)
	if lib.Link != "" {
		b.symlink(path.Base(lib.File), lib.Link)
	}
	b.img.Libraries = append(b.img.Libraries, lib)
}

// libraries writes every library opts asks for.
func (b *builder) libraries(opts Options) {
	names := distroLibraries(opts.Libraries)
	for i, n := range names {
		b.library(Library{Soname: n.soname, File: path.Join(opts.LibDir, n.file), Link: link(opts.LibDir, n), Arch: AMD64})
		if i%8 == 3 && n.devLink != "" {
			b.symlink(n.soname, path.Join(opts.LibDir, n.devLink))
		}
	}
	for _, sub := range opts.GlibcHwcaps {
		dir := path.Join(opts.LibDir, "glibc-hwcaps", sub)
		b.mkdir(dir)
		for _, n := range names[:min(opts.HwcapsLibraries, len(names))] {
			b.library(Library{Soname: n.soname, File: path.Join(dir, n.file), Arch: AMD64, Hwcaps: sub})
		}
	}
	const cudaDir = "/usr/local/cuda/lib64"
	b.mkdir(cudaDir)
	for _, n := range cudaLibraries(opts.CUDALibraries) {
		b.library(Library{Soname: n.soname, File: path.Join(cudaDir, n.file), Link: link(cudaDir, n), Arch: AMD64})
	}
	if opts.I386Libraries > 0 {
		const dir = "/usr/lib/i386-linux-gnu"
		for _, n := range distroLibraries(opts.I386Libraries) {
			b.library(Library{Soname: n.soname, File: path.Join(dir, n.file), Link: link(dir, n), Arch: I386})
		}
	}
	if v := opts.CompatVersion; v != "" {
		const dir = "/usr/local/cuda/compat"
		for _, soname := range compatSonames {
			stem, _, _ := strings.Cut(soname, ".so.")
			b.library(Library{Soname: soname, File: path.Join(dir, stem+".so."+v), Link: path.Join(dir, soname), Arch: AMD64})
		}
		b.symlink("libcuda.so.1", path.Join(dir, "libcuda.so"))
	}
}

// link returns the path of n's SONAME link in dir, "" if its file is
// named by its SONAME.
func link(dir string, n libName) string {
	if n.file == n.soname {
		return ""
	}
	return path.Join(dir, n.soname)
}

// compatSonames are the libraries of NVIDIA's cuda-compat package.
var compatSonames = []string{"libcuda.so.1", "libcudadebugger.so.1", "libnvidia-nvvm.so.4", "libnvidia-ptxjitcompiler.so.1"}

// Host files HostLibc copies: Debian's x86-64 paths.
const (
	hostLoader = "/lib64/ld-linux-x86-64.so.2"
	hostLibc   = "/lib/x86_64-linux-gnu/libc.so.6"
)

// hostLibc copies the host's dynamic linker and C library into the root.
func (b *builder) hostLibc(opts Options) {
	for _, f := range []struct{ from, to string }{
		{from: hostLoader, to: "/lib64/ld-linux-x86-64.so.2"},
		{from: hostLibc, to: path.Join(opts.LibDir, "libc.so.6")},
	} {
		if b.err != nil {
			return
		}
		data, err := readFile(f.from)
		if err != nil {
			b.err = fmt.Errorf("copy the host's C library (HostLibc): %w", err)
			return
		}
		b.mkdir(path.Dir(f.to))
		b.write(f.to, data, 0o755)
	}
}

// readFile reads a host file through any symbolic links.
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// config writes /etc/ld.so.conf and the files it includes.
func (b *builder) config(opts Options) {
	b.write("/etc/ld.so.conf", []byte("include /etc/ld.so.conf.d/*.conf\n\n"), 0o644)
	b.mkdir("/etc/ld.so.conf.d")
	files := []struct{ name, content string }{
		{name: "libc.conf", content: "# libc default configuration\n/usr/local/lib\n"},
		{name: "x86_64-linux-gnu.conf", content: "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n"},
		{name: "988_cuda.conf", content: "/usr/local/cuda/lib64\n"},
		{name: "nvidia.conf", content: "/usr/local/nvidia/lib\n/usr/local/nvidia/lib64\n"},
	}
	if opts.I386Libraries > 0 {
		files = append(files, struct{ name, content string }{name: "i386-linux-gnu.conf", content: "# Multiarch support\n/usr/local/lib/i386-linux-gnu\n/lib/i386-linux-gnu\n/usr/lib/i386-linux-gnu\n"})
	}
	if opts.CompatVersion != "" && opts.CompatInConfig {
		files = append(files, struct{ name, content string }{name: "000_cuda-compat.conf", content: "/usr/local/cuda/compat\n"})
	}
	for _, f := range files {
		b.write("/etc/ld.so.conf.d/"+f.name, []byte(f.content), 0o644)
	}
}

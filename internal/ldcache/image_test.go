package ldcache

import (
	"debug/elf"
	"errors"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// hostLdconfig is glibc's ldconfig on the test host.
const hostLdconfig = "/sbin/ldconfig"

// buildImage builds a root with testimage and, unless opts.NoCache, its
// ldconfig-built cache. before runs on the root before ldconfig does.
// It skips, saying why, where the host cannot: ldconfig -r needs root.
func buildImage(t testing.TB, opts testimage.Options, before func(root string)) *testimage.Image {
	t.Helper()
	if _, err := os.Stat(hostLdconfig); err != nil {
		t.Skipf("SKIP: the host's ldconfig is needed to build image caches: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skipf("SKIP: ldconfig -r chroots, which needs root; running as uid %d", os.Geteuid())
	}
	root := t.TempDir()
	noCache := opts.NoCache
	opts.NoCache = true
	img, err := testimage.Build(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(root)
	}
	if !noCache {
		ldconfigCache(t, root, "/etc/ld.so.cache")
	}
	return img
}

// ldconfigCache runs the host's ldconfig over root, writing cache (a path in
// root), and returns the cache.
func ldconfigCache(t testing.TB, root, cache string) []byte {
	t.Helper()
	if err := testimage.RunLdconfig(hostLdconfig, root, cache); err != nil {
		if errors.Is(err, testimage.ErrNeedRoot) {
			t.Skipf("SKIP: %v", err)
		}
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, cache))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeFile writes a file under root, replacing any file there by rename.
func writeFile(t testing.TB, root, name string, data []byte, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// driverLib is a driver library to inject: its file name and SONAME.
type driverLib struct{ file, soname string }

// driverLibs are libraries of NVIDIA driver 550.54.15 as the runtime injects
// them; libnvidia-gpucomp's SONAME is its file name, as in the driver.
var driverLibs = []driverLib{
	{file: "libcuda.so.550.54.15", soname: "libcuda.so.1"},
	{file: "libcudadebugger.so.550.54.15", soname: "libcudadebugger.so.1"},
	{file: "libnvidia-ml.so.550.54.15", soname: "libnvidia-ml.so.1"},
	{file: "libnvidia-ptxjitcompiler.so.550.54.15", soname: "libnvidia-ptxjitcompiler.so.1"},
	{file: "libnvidia-nvvm.so.550.54.15", soname: "libnvidia-nvvm.so.4"},
	{file: "libnvidia-allocator.so.550.54.15", soname: "libnvidia-allocator.so.1"},
	{file: "libnvidia-gpucomp.so.550.54.15", soname: "libnvidia-gpucomp.so.550.54.15"},
}

// injectDriver writes the driver libraries and their SONAME links into dir
// of root, as the runtime's mounts and links put them there, and returns
// the libraries to Add for them.
func injectDriver(t testing.TB, root, dir string) []Library {
	t.Helper()
	flags, err := FlagsFor(64, uint16(elf.EM_X86_64))
	if err != nil {
		t.Fatal(err)
	}
	var libs []Library
	for _, d := range driverLibs {
		data, err := testimage.SharedObject(testimage.AMD64, d.soname, "libc.so.6")
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, root, path.Join(dir, d.file), data, 0o644)
		if d.file != d.soname {
			if err := os.Symlink(d.file, filepath.Join(root, dir, d.soname)); err != nil {
				t.Fatal(err)
			}
		}
		libs = append(libs, Library{Name: d.soname, Path: path.Join(dir, d.soname), Flags: flags})
	}
	return libs
}

// listing is a line of ldconfig -p.
type listing = testimage.CacheLine

// printCache returns what the host's ldconfig -p prints for the cache in data, in its order.
func printCache(t testing.TB, data []byte) []listing {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ld.so.cache")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := testimage.ListCache(hostLdconfig, file)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

package ldcache

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// dlopenSource is a program that dlopens each argument and prints the
// path the dynamic linker opened for it (its link map name), or the error.
const dlopenSource = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		struct link_map *lm;
		if (h == NULL) {
			printf("%s => error\n", argv[i]);
		} else if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) {
			printf("%s => dlinfo: %s\n", argv[i], dlerror());
		} else {
			printf("%s => %s\n", argv[i], lm->l_name);
			dlclose(h);
		}
	}
	return 0;
}
`

// dlopenProgram is where the program goes in the root.
const dlopenProgram = "/usr/bin/dlopen-names"

// compileDlopen builds dlopenSource into root with the host's gcc.
func compileDlopen(t *testing.T, root string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("SKIP: gcc is needed to build the dlopen test program: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "dlopen.c")
	if err := os.WriteFile(src, []byte(dlopenSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, dlopenProgram)
	if b, err := exec.Command(gcc, "-O2", "-Wall", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
}

// dlopenInRoot runs the program chrooted into root, with no
// LD_LIBRARY_PATH, and returns each name's answer, its path resolved as
// testimage.ResolveDir does.
func dlopenInRoot(t *testing.T, root string, names []string) map[string]string {
	t.Helper()
	cmd := exec.Command(dlopenProgram, names...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chroot %s %s: %v\n%s", root, dlopenProgram, err, stderr.Bytes())
	}
	answers := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, answer, ok := strings.Cut(sc.Text(), " => ")
		if !ok {
			t.Fatalf("unexpected output line %q", sc.Text())
		}
		if strings.HasPrefix(answer, "/") {
			answer = testimage.ResolveDir(root, answer)
		}
		answers[name] = answer
	}
	if len(answers) != len(names) {
		t.Fatalf("the program answered for %d of %d names:\n%s", len(answers), len(names), out)
	}
	return answers
}

// preferredHwcaps returns the first of subdirs, in the priority order the
// host's dynamic linker prints, that it supports; "" if none.
func preferredHwcaps(t *testing.T, subdirs []string) string {
	t.Helper()
	out, err := exec.Command("/lib64/ld-linux-x86-64.so.2", "--help").Output()
	if err != nil {
		t.Fatalf("ld.so --help: %v", err)
	}
	_, list, _ := strings.Cut(string(out), "Subdirectories of glibc-hwcaps directories, in priority order:\n")
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break // the end of the list
		}
		// A level this CPU lacks is listed bare ("  x86-64-v4"), with no status.
		name, status, _ := strings.Cut(strings.TrimSpace(line), " ")
		if status == "(supported, searched)" && slices.Contains(subdirs, name) {
			return name
		}
	}
	return ""
}

// TestLoaderAcceptance has glibc's dynamic linker use caches Encode wrote.
// In a realistic image with glibc-hwcaps variants, CUDA libraries outside
// the default search path and forward-compat libraries, a program chrooted
// into the root dlopens every x86-64 name in the cache by its SONAME:
//
//   - with cache B (image cache + driver and First compat libraries,
//     through ParseCache, Add and Encode) every name loads, from the
//     directories the cache names;
//   - cache A, ldconfig's for the same root, gives the same answer for
//     every name;
//   - with an empty cache the CUDA libraries are not found and libcuda.so.1
//     comes from the default path, so the answers above came from the cache.
func TestLoaderAcceptance(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("SKIP: running x86-64 test libraries needs a linux/amd64 host, have %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	opts := testimage.Default()
	opts.GlibcHwcaps = []string{"x86-64-v2", "x86-64-v3"}
	opts.HwcapsLibraries = 5
	opts.CompatVersion = "560.35.03"
	opts.HostLibc = true
	img := buildImage(t, opts, nil)
	root := img.Root
	compileDlopen(t, root)
	imageCache, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	libs := injectDriver(t, root, "/usr/lib/x86_64-linux-gnu")

	c, err := ParseCache(imageCache)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(append(libs, compatLibs(true)...)...); err != nil {
		t.Fatal(err)
	}
	cacheB, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "/etc/ld.so.conf.d/000_cuda-compat.conf", []byte("/usr/local/cuda/compat\n"), 0o644)
	cacheA := ldconfigCache(t, root, "/etc/ld.so.cache.a")
	empty, err := (&Cache{}).Encode()
	if err != nil {
		t.Fatal(err)
	}

	var names []string
	for _, e := range c.Entries {
		if e.Flags == 0x0303 && !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	const missing = "libnot-in-the-image.so.1"
	names = append(names, missing)

	writeFile(t, root, "/etc/ld.so.cache", cacheB, 0o644)
	gotB := dlopenInRoot(t, root, names)
	writeFile(t, root, "/etc/ld.so.cache", cacheA, 0o644)
	gotA := dlopenInRoot(t, root, names)
	writeFile(t, root, "/etc/ld.so.cache", empty, 0o644)
	gotEmpty := dlopenInRoot(t, root, []string{"libcuda.so.1", "libcudart.so.12"})

	const libDir = "/usr/lib/x86_64-linux-gnu"
	want := map[string]string{
		"libcuda.so.1":      "/usr/local/cuda/compat/libcuda.so.1",
		"libnvidia-ml.so.1": libDir + "/libnvidia-ml.so.1",
		"libcudart.so.12":   "/usr/local/cuda/lib64/libcudart.so.12",
		"libc.so.6":         libDir + "/libc.so.6",
		missing:             "error",
	}
	// The first image library has variants in the glibc-hwcaps
	// subdirectories; the loader takes the one the CPU runs best.
	hw := img.Libraries[0]
	if sub := preferredHwcaps(t, opts.GlibcHwcaps); sub != "" {
		want[hw.Soname] = path.Join(libDir, "glibc-hwcaps", sub, path.Base(hw.File))
	} else {
		want[hw.Soname] = hw.Link
	}
	for name, w := range want {
		if gotB[name] != w {
			t.Errorf("with cache B, dlopen(%q) opened %q, want %q", name, gotB[name], w)
		}
	}
	for _, name := range names {
		if name != missing && !strings.HasPrefix(gotB[name], "/") {
			t.Errorf("with cache B, dlopen(%q): %s", name, gotB[name])
		}
		if gotA[name] != gotB[name] {
			t.Errorf("dlopen(%q) opened %q with ldconfig's cache, %q with cache B", name, gotA[name], gotB[name])
		}
	}
	wantEmpty := map[string]string{"libcuda.so.1": libDir + "/libcuda.so.1", "libcudart.so.12": "error"}
	for name, w := range wantEmpty {
		if gotEmpty[name] != w {
			t.Errorf("with an empty cache, dlopen(%q) opened %q, want %q", name, gotEmpty[name], w)
		}
	}
}

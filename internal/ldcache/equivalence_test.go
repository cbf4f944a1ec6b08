package ldcache

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// compatLibs are the forward-compat libraries testimage puts in
// /usr/local/cuda/compat, and the development link libcuda.so that the
// cuda-compat package also ships and ldconfig records.
func compatLibs(first bool) []Library {
	var libs []Library
	for _, name := range []string{"libcuda.so.1", "libcudadebugger.so.1", "libnvidia-nvvm.so.4", "libnvidia-ptxjitcompiler.so.1", "libcuda.so"} {
		libs = append(libs, Library{Name: name, Path: "/usr/local/cuda/compat/" + name, Flags: 0x0303, First: first})
	}
	return libs
}

// TestEquivalence injects driver libraries into image roots and compares
// cache A, which ldconfig -r writes for the root afterwards (what the OCI
// hook does today), with cache B, which ParseCache, Add and Encode make
// from the image's cache: ldconfig -p must list the same libraries, in the
// same order, for both, so the loader finds the same file for every name.
//
// Paths are compared with their directory's links resolved inside the
// root: in a usr-merged root ldconfig records /lib/x86_64-linux-gnu/x for
// the file the runtime mounts, and Add records, at
// /usr/lib/x86_64-linux-gnu/x.
func TestEquivalence(t *testing.T) {
	const driverDir = "/usr/lib/x86_64-linux-gnu"
	small := testimage.Options{Libraries: 200, UsrMerge: true, CUDALibraries: 10, I386Libraries: 4}
	withCompat := func(inConfig bool) testimage.Options {
		o := small
		o.CompatVersion, o.CompatInConfig = "560.35.03", inConfig
		return o
	}
	testCases := []struct {
		description string
		opts        testimage.Options
		// afterImage changes the root after its cache is built, before
		// ldconfig writes cache A.
		afterImage func(t *testing.T, root string)
		// extra are added to cache B after the driver libraries.
		extra []Library
		// onlyInB are entries cache B keeps that ldconfig drops.
		onlyInB []listing
	}{
		{
			description: "busybox-like root: libraries in /lib, no ld.so.conf",
			opts:        testimage.Options{Libraries: 5, LibDir: "/lib", NoConfig: true},
		},
		{
			description: "realistic CUDA image",
			opts:        testimage.Default(),
		},
		{
			// The image lists its compat directory first, so its
			// libcuda.so.1 stays in front of the driver's, for both.
			description: "forward compat in the image's ld.so.conf.d",
			opts:        withCompat(true),
		},
		{
			// What the runtime does for a driver older than the compat
			// libraries: ldconfig gets a conf file read first; Add gets
			// First.
			description: "forward compat preferred by the runtime",
			opts:        withCompat(false),
			afterImage: func(t *testing.T, root string) {
				writeFile(t, root, "/etc/ld.so.conf.d/000_cuda-compat.conf", []byte("/usr/local/cuda/compat\n"), 0o644)
			},
			extra: compatLibs(true),
		},
		{
			description: "glibc-hwcaps subdirectories",
			opts: testimage.Options{Libraries: 200, UsrMerge: true,
				GlibcHwcaps: []string{"x86-64-v2", "x86-64-v3", "x86-64-v4"}, HwcapsLibraries: 20},
		},
		{
			// The inherent difference: a library removed from the image
			// after its cache was built (a later layer deleting it without
			// running ldconfig). ldconfig, reading the files, drops its
			// entry; Add keeps every entry the image's cache has, since it
			// does not read the files. The loader tries the stale path,
			// fails to open it and moves on to the default directories, as
			// it did in the image before the runtime touched it.
			description: "stale entry of a removed library",
			opts:        small,
			afterImage: func(t *testing.T, root string) {
				for _, name := range []string{"libacl.so.0", "libacl.so.0.0.0"} {
					if err := os.Remove(filepath.Join(root, "usr/lib/x86_64-linux-gnu", name)); err != nil {
						t.Fatal(err)
					}
				}
			},
			onlyInB: []listing{{Key: "libacl.so.0", Desc: "libc6,x86-64", Path: "/lib/x86_64-linux-gnu/libacl.so.0"}},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			img := buildImage(t, tc.opts, nil)
			root := img.Root
			imageCache, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.afterImage != nil {
				tc.afterImage(t, root)
			}
			libs := injectDriver(t, root, driverDir)

			a := ldconfigCache(t, root, "/etc/ld.so.cache.a")

			c, err := ParseCache(imageCache)
			if err != nil {
				t.Fatalf("ParseCache(image cache): %v", err)
			}
			if err := c.Add(append(libs, tc.extra...)...); err != nil {
				t.Fatalf("Add: %v", err)
			}
			b, err := c.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}

			normalize := func(entries []listing) []listing {
				for i := range entries {
					entries[i].Path = testimage.ResolveDir(root, entries[i].Path)
				}
				return entries
			}
			listA, listB := normalize(printCache(t, a)), normalize(printCache(t, b))
			wantB := slices.Clone(listA)
			for _, stale := range normalize(tc.onlyInB) {
				i := slices.IndexFunc(listB, func(l listing) bool { return l == stale })
				if i < 0 {
					t.Fatalf("cache B lacks the stale entry %v", stale)
				}
				if slices.Contains(listA, stale) {
					t.Fatalf("ldconfig kept the stale entry %v", stale)
				}
				wantB = slices.Insert(wantB, i, stale)
			}

			// Every injected library and every library the image had is in
			// both, and the first entry of each name and ABI, which the
			// loader takes unless a glibc-hwcaps one beats it, is the same.
			firstA, firstB := firstPaths(listA), firstPaths(listB)
			for _, lib := range libs {
				key := lib.Name + " (libc6,x86-64)"
				if firstB[key] != firstA[key] || firstA[key] == "" {
					t.Errorf("injected %s: cache A finds %q, cache B %q", key, firstA[key], firstB[key])
				}
			}
			for _, lib := range img.Libraries {
				if lib.Hwcaps != "" {
					continue
				}
				desc := "libc6,x86-64"
				if lib.Arch == testimage.I386 {
					desc = "libc6"
				}
				key := lib.Soname + " (" + desc + ")"
				if firstB[key] != firstA[key] && !slices.ContainsFunc(tc.onlyInB, func(l listing) bool { return l.Key == lib.Soname }) {
					t.Errorf("image library %s: cache A finds %q, cache B %q", key, firstA[key], firstB[key])
				}
			}
			// The whole listing, in order: ldconfig's order is
			// deterministic here (directories in ld.so.conf order, one
			// file per SONAME in each).
			if diff := testimage.DiffListings("want", wantB, " got", listB); diff != "" {
				t.Errorf("ldconfig -p differs between cache A (ldconfig) and cache B (Encode), stale entries aside:\n%s", diff)
			}
			if len(listA) < len(img.Libraries) {
				t.Errorf("cache A lists %d entries for %d image libraries", len(listA), len(img.Libraries))
			}
		})
	}
}

// firstPaths maps "key (desc)" to the path of its first plain entry.
func firstPaths(entries []listing) map[string]string {
	first := make(map[string]string)
	for _, e := range entries {
		if strings.Contains(e.Desc, "hwcap:") {
			continue
		}
		key := e.Key + " (" + e.Desc + ")"
		if _, ok := first[key]; !ok {
			first[key] = e.Path
		}
	}
	return first
}

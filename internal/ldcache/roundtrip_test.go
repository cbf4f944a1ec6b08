package ldcache

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// TestRoundTripLdconfig has this host's ldconfig write caches for roots
// of every shape testimage builds, plus legacy hwcaps subdirectories and
// libraries without libc, and checks that Encode writes each back byte for
// byte, and that what it writes parses to the same Cache.
func TestRoundTripLdconfig(t *testing.T) {
	testCases := []struct {
		description string
		opts        testimage.Options
		before      func(t *testing.T, root string)
	}{
		{
			description: "busybox-like: a few libraries in /lib, no ld.so.conf",
			opts:        testimage.Options{Libraries: 5, LibDir: "/lib", NoConfig: true},
		},
		{
			description: "realistic CUDA image",
			opts:        testimage.Default(),
		},
		{
			description: "glibc-hwcaps subdirectories",
			opts:        testimage.Options{Libraries: 60, UsrMerge: true, GlibcHwcaps: []string{"x86-64-v2", "x86-64-v3", "x86-64-v4"}, HwcapsLibraries: 12},
		},
		{
			description: "i386 libraries next to x86-64 ones with the same SONAMEs",
			opts:        testimage.Options{Libraries: 30, I386Libraries: 30},
		},
		{
			description: "CUDA forward compat listed first",
			opts:        testimage.Options{Libraries: 30, CUDALibraries: 10, CompatVersion: "550.54.15", CompatInConfig: true},
		},
		{
			// ldconfig 2.36 still reads the legacy hwcaps subdirectories
			// (tls, and the platform and hwcap names such as x86_64) and
			// records their bits in the hwcap field. A library that needs
			// no libc gets FLAG_ELF rather than FLAG_ELF_LIBC6.
			description: "legacy hwcaps subdirectories, libraries without libc",
			opts:        testimage.Options{Libraries: 20, I386Libraries: 3},
			before:      addLegacyHwcaps,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var before func(string)
			if tc.before != nil {
				before = func(root string) { tc.before(t, root) }
			}
			img := buildImage(t, tc.opts, before)
			data, err := os.ReadFile(filepath.Join(img.Root, "etc/ld.so.cache"))
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseCache(data)
			if err != nil {
				t.Fatalf("ParseCache: %v", err)
			}
			if len(c.Entries) < len(img.Libraries) {
				t.Fatalf("ParseCache found %d entries for %d libraries", len(c.Entries), len(img.Libraries))
			}
			out, err := c.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if !bytes.Equal(out, data) {
				t.Errorf("Encode(ParseCache(ldconfig's cache)) differs from it:\n got %q\nwant %q", out, data)
			}
			again, err := ParseCache(out)
			if err != nil {
				t.Fatalf("ParseCache(Encode): %v", err)
			}
			if !reflect.DeepEqual(again, c) {
				t.Errorf("ParseCache(Encode(c)) != c:\n got %+v\nwant %+v", again, c)
			}
		})
	}
}

// addLegacyHwcaps adds libacl.so.0 (testimage's first library) in legacy
// hwcaps subdirectories of /usr/lib/x86_64-linux-gnu, and an i386 library
// that needs no libc.
func addLegacyHwcaps(t *testing.T, root string) {
	for _, f := range []struct {
		arch testimage.Arch
		file string
	}{
		{arch: testimage.AMD64, file: "/usr/lib/x86_64-linux-gnu/tls/libacl.so.0"},
		{arch: testimage.AMD64, file: "/usr/lib/x86_64-linux-gnu/x86_64/libacl.so.0"},
		{arch: testimage.AMD64, file: "/usr/lib/x86_64-linux-gnu/tls/x86_64/libacl.so.0"},
		{arch: testimage.I386, file: "/usr/lib/i386-linux-gnu/libnolibc.so.3"},
	} {
		data, err := testimage.SharedObject(f.arch, filepath.Base(f.file))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, root, f.file, data, 0o644)
	}
}

// TestRoundTripLegacyHwcapsEntries makes sure the legacy hwcaps case above
// has what it is there for: entries with one and two hwcap bits, ordered
// by them, and one with FLAG_ELF.
func TestRoundTripLegacyHwcapsEntries(t *testing.T) {
	img := buildImage(t, testimage.Options{Libraries: 1, I386Libraries: 1}, func(root string) { addLegacyHwcaps(t, root) })
	data, err := os.ReadFile(filepath.Join(img.Root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCache(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Name: "libnolibc.so.3", Path: "/usr/lib/i386-linux-gnu/libnolibc.so.3", Flags: 0x0001, Bits: 32},
		// Two bits (tls, and x86_64 as bit 1) before one; of one bit,
		// the higher hwcap first.
		{Name: "libacl.so.0", Path: "/usr/lib/x86_64-linux-gnu/tls/x86_64/libacl.so.0", Flags: 0x0303, Bits: 64, Hwcap: 1<<63 | 1<<1},
		{Name: "libacl.so.0", Path: "/usr/lib/x86_64-linux-gnu/tls/libacl.so.0", Flags: 0x0303, Bits: 64, Hwcap: 1 << 63},
		{Name: "libacl.so.0", Path: "/usr/lib/x86_64-linux-gnu/x86_64/libacl.so.0", Flags: 0x0303, Bits: 64, Hwcap: 1 << 1},
		{Name: "libacl.so.0", Path: "/usr/lib/x86_64-linux-gnu/libacl.so.0", Flags: 0x0303, Bits: 64},
		{Name: "libacl.so.0", Path: "/usr/lib/i386-linux-gnu/libacl.so.0", Flags: 0x0003, Bits: 32},
	}
	if !reflect.DeepEqual(c.Entries, want) {
		t.Errorf("ldconfig wrote\n%+v\nwant\n%+v", c.Entries, want)
	}
}

// TestRoundTripCompatFormat checks ParseCache's reading of a combined
// old+new cache on one with glibc-hwcaps entries: written back, it is the
// cache ldconfig -c new writes for the same root.
func TestRoundTripCompatFormat(t *testing.T) {
	img := buildImage(t, testimage.Options{Libraries: 30, GlibcHwcaps: []string{"x86-64-v2", "x86-64-v3"}, HwcapsLibraries: 5}, nil)
	newFormat, err := os.ReadFile(filepath.Join(img.Root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	compat := runLdconfig(t, img.Root, "compat")
	c, err := ParseCache(compat)
	if err != nil {
		t.Fatalf("ParseCache(compat): %v", err)
	}
	out, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, newFormat) {
		t.Errorf("Encode(ParseCache(compat cache)) is not ldconfig's new-format cache:\n got %q\nwant %q", out, newFormat)
	}
}

// TestRoundTripEmptyHwcapsSubdirectory covers the one difference Encode
// has from ldconfig: a glibc-hwcaps subdirectory with no libraries. ldconfig
// puts its name into the string table (new_glibc_hwcaps_subdirectory adds
// every subdirectory it opens) but nowhere else, so nothing refers to it
// and the loader never reads it; ParseCache cannot see it, and Encode
// writes the cache ldconfig writes for the root without that directory.
func TestRoundTripEmptyHwcapsSubdirectory(t *testing.T) {
	opts := testimage.Options{Libraries: 10, GlibcHwcaps: []string{"x86-64-v3"}, HwcapsLibraries: 3}
	with := buildImage(t, opts, func(root string) {
		if err := os.MkdirAll(filepath.Join(root, "usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v4"), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	without := buildImage(t, opts, nil)
	withData, err := os.ReadFile(filepath.Join(with.Root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	withoutData, err := os.ReadFile(filepath.Join(without.Root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(withData, withoutData) || !bytes.Contains(withData, []byte("\x00x86-64-v4\x00")) {
		t.Fatalf("ldconfig no longer writes the name of an empty glibc-hwcaps subdirectory; Encode can match it byte for byte")
	}
	c, err := ParseCache(withData)
	if err != nil {
		t.Fatal(err)
	}
	cWithout, err := ParseCache(withoutData)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, cWithout) {
		t.Errorf("the empty subdirectory changed what the loader reads:\n%+v\n%+v", c, cWithout)
	}
	out, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, withoutData) {
		t.Errorf("Encode differs from ldconfig's cache without the empty subdirectory:\n got %q\nwant %q", out, withoutData)
	}
}

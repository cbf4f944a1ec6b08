package ldcache

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// readTestdata returns a testdata cache and its ParseCache result.
func readTestdata(t testing.TB, name string) ([]byte, *Cache) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCache(data)
	if err != nil {
		t.Fatalf("ParseCache(%s): %v", name, err)
	}
	return data, c
}

// testdataGenerator is what glibc 2.36's ldconfig wrote into testdata.
const testdataGenerator = "ldconfig (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36"

func TestParseCacheTestdata(t *testing.T) {
	newData, _ := readTestdata(t, "new.cache")
	testCases := []struct {
		description string
		file        string
		want        *Cache
		// wantEncoded is what Encode must return, byte for byte.
		wantEncoded []byte
	}{
		{
			description: "new format: written back byte for byte",
			file:        "new.cache",
			want:        &Cache{Entries: wantEntries, GlibcHwcaps: []string{"x86-64-v3"}, Generator: testdataGenerator},
			wantEncoded: newData,
		},
		{
			// The new-format part of a compat cache is what ldconfig -c new
			// writes, except for its offsets; written back on its own it
			// is the new-format file of the same root. This also shows the
			// glibc-hwcaps names are read where ldconfig wrote them.
			description: "compat format: its new part is written as the new format",
			file:        "compat.cache",
			want:        &Cache{Entries: wantEntries, GlibcHwcaps: []string{"x86-64-v3"}, Generator: testdataGenerator},
			wantEncoded: newData,
		},
		{
			description: "old format: no hwcap, no extensions",
			file:        "old.cache",
			want:        &Cache{Entries: withoutHwcap(wantEntries)},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, got := readTestdata(t, tc.file)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseCache:\n got %+v\nwant %+v", got, tc.want)
			}
			encoded, err := got.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if tc.wantEncoded != nil && !bytes.Equal(encoded, tc.wantEncoded) {
				t.Errorf("Encode:\n got %q\nwant %q", encoded, tc.wantEncoded)
			}
			again, err := ParseCache(encoded)
			if err != nil {
				t.Fatalf("ParseCache(Encode): %v", err)
			}
			if !reflect.DeepEqual(again, got) {
				t.Errorf("ParseCache(Encode(c)):\n got %+v\nwant %+v", again, got)
			}
		})
	}
}

func TestHwcapsSubdirectory(t *testing.T) {
	_, c := readTestdata(t, "new.cache")
	var got []string
	for _, e := range c.Entries {
		name, ok := c.HwcapsSubdirectory(e)
		got = append(got, name+"/"+map[bool]string{true: "yes", false: "no"}[ok])
	}
	want := []string{"/no", "/no", "x86-64-v3/yes", "/no", "/no"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HwcapsSubdirectory of each entry = %q, want %q", got, want)
	}
	if name, ok := c.HwcapsSubdirectory(Entry{Hwcap: HwcapExtension | 1}); ok {
		t.Errorf("HwcapsSubdirectory(index past the names) = %q, true; want false", name)
	}
}

func TestLibcmp(t *testing.T) {
	testCases := []struct {
		description string
		s1, s2      string
		signed      bool
		want        int // the sign of the result
	}{
		{description: "equal", s1: "libz.so.1", s2: "libz.so.1", want: 0},
		{description: "letters as strcmp", s1: "liba.so", s2: "libb.so", want: -1},
		{description: "numbers by value, not by text", s1: "libz.so.10", s2: "libz.so.9", want: 1},
		{description: "leading zeros do not count", s1: "libz.so.01", s2: "libz.so.1", want: 0},
		{description: "number in the middle", s1: "libx264.so", s2: "libx30.so", want: 1},
		{description: "a digit sorts after a letter", s1: "lib2.so", s2: "libz.so", want: 1},
		{description: "a letter sorts before a digit", s1: "libz.so", s2: "lib2.so", want: -1},
		{description: "prefix sorts first", s1: "libz.so", s2: "libz.so.1", want: -1},
		{description: "longer sorts last", s1: "libz.so.1", s2: "libz.so", want: 1},
		{description: "digits against the end", s1: "libz.so.1", s2: "libz.so.", want: 1},
		{description: "signed char: 0xe9 is negative", s1: "lib\xe9", s2: "libz", signed: true, want: -1},
		{description: "unsigned char: 0xe9 is above z", s1: "lib\xe9", s2: "libz", signed: false, want: 1},
		{description: "signed char at the end of the shorter", s1: "lib", s2: "lib\xe9", signed: true, want: 1},
		// 4294967306 wraps to 10 in 32-bit int arithmetic, as in the loader.
		{description: "numbers wrap at 32 bits", s1: "lib.so.4294967306", s2: "lib.so.10", want: 0},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got := libcmp(tc.s1, tc.s2, tc.signed)
			if sign(got) != tc.want {
				t.Errorf("libcmp(%q, %q, signed %v) = %d, want sign %d", tc.s1, tc.s2, tc.signed, got, tc.want)
			}
		})
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestStringTable(t *testing.T) {
	testCases := []struct {
		description string
		entries     []Entry
		hwcaps      []string
		want        string // the table, NULs written as |
	}{
		{
			description: "key is the tail of its path",
			entries:     []Entry{{Name: "libz.so.1", Path: "/lib/libz.so.1"}},
			want:        "/lib/libz.so.1|",
		},
		{
			description: "reversed order, higher bytes first; tails shared with the string just before",
			entries: []Entry{
				{Name: "libb.so.1", Path: "/lib/libb.so.1"},
				{Name: "liba.so.2", Path: "/usr/lib/liba.so.2"},
			},
			// Reversed: "2.os.abil/bil/rsu/" sorts before "1.os.bbil/bil/".
			want: "/usr/lib/liba.so.2|/lib/libb.so.1|",
		},
		{
			description: "a key shared by two paths merges with the one sorting just before it",
			entries: []Entry{
				{Name: "libz.so.1", Path: "/b/libz.so.1"},
				{Name: "libz.so.1", Path: "/a/libz.so.1"},
			},
			// Reversed "1.os.zbil/b/" sorts before "1.os.zbil/a/".
			want: "/b/libz.so.1|/a/libz.so.1|",
		},
		{
			description: "glibc-hwcaps names are in the table",
			entries:     []Entry{{Name: "libz.so.1", Path: "/lib/glibc-hwcaps/x86-64-v3/libz.so.1"}},
			hwcaps:      []string{"x86-64-v3"},
			want:        "x86-64-v3|/lib/glibc-hwcaps/x86-64-v3/libz.so.1|",
		},
		{
			description: "empty",
			want:        "",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			st := newStringTable(&Cache{Entries: tc.entries, GlibcHwcaps: tc.hwcaps})
			if got := strings.ReplaceAll(string(st.data), "\x00", "|"); got != tc.want {
				t.Errorf("string table %q, want %q", got, tc.want)
			}
			var strs []string
			for _, e := range tc.entries {
				strs = append(strs, e.Name, e.Path)
			}
			strs = append(strs, tc.hwcaps...)
			for slot, s := range strs {
				off := st.offsets[slot]
				if end := int(off) + len(s); end >= len(st.data) || string(st.data[off:end]) != s || st.data[end] != 0 {
					t.Errorf("offset %d of %q does not point at it in %q", off, s, st.data)
				}
			}
		})
	}
}

// compareReversed is finalize_compare from glibc's elf/stringtable.c:
// strings compare by their bytes from the last, as unsigned char, higher
// first; of a string and its own suffix, the longer first.
func compareReversed(l, r string) int {
	for i := 1; i <= min(len(l), len(r)); i++ {
		if lc, rc := l[len(l)-i], r[len(r)-i]; lc != rc {
			return int(rc) - int(lc)
		}
	}
	return len(r) - len(l)
}

// TestStringTableOrder checks that newStringTable's order, the reversed
// strings in descending byte order, is finalize_compare's, on strings
// built to share tails, bytes from 0x80 up included.
func TestStringTableOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", ".so", ".1", "/", "lib", "\xe9", "\x7f"}
	seen := map[string]bool{}
	var entries []Entry
	for len(entries) < 500 {
		var name, dir strings.Builder
		for range 1 + rng.IntN(4) {
			name.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		for range rng.IntN(3) {
			dir.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		p := "/" + dir.String() + name.String()
		if seen[name.String()] || seen[p] {
			continue
		}
		seen[name.String()], seen[p] = true, true
		entries = append(entries, Entry{Name: name.String(), Path: p})
	}
	st := newStringTable(&Cache{Entries: entries})
	// Order the strings by where they start, then by length, longest first
	// (a tail starts after the string it ends): finalize_compare's order.
	var strs []string
	for _, e := range entries {
		strs = append(strs, e.Name, e.Path)
	}
	offset := make(map[string]uint32)
	for slot, s := range strs {
		offset[s] = st.offsets[slot]
	}
	byOffset := slices.Clone(strs)
	slices.SortFunc(byOffset, func(a, b string) int {
		if c := cmp.Compare(offset[a]+uint32(len(a)), offset[b]+uint32(len(b))); c != 0 {
			return c // where their shared NUL is
		}
		return len(b) - len(a)
	})
	want := slices.Clone(strs)
	slices.SortFunc(want, compareReversed)
	if !slices.Equal(byOffset, want) {
		t.Errorf("string table order differs from finalize_compare's:\n got %q\nwant %q", byOffset, want)
	}
}

// hwcapsEntry is a glibc-hwcaps entry of subdirectory index.
func hwcapsEntry(name, path string, index uint64) Entry {
	return Entry{Name: name, Path: path, Flags: 0x0303, Bits: 64, Hwcap: HwcapExtension | index}
}

// x64 is an x86-64 entry.
func x64(name, path string) Entry {
	return Entry{Name: name, Path: path, Flags: 0x0303, Bits: 64}
}

func TestAdd(t *testing.T) {
	const (
		lib    = "/usr/lib/x86_64-linux-gnu/"
		compat = "/usr/local/cuda/compat/"
	)
	i386Cuda := Entry{Name: "libcuda.so.1", Path: "/usr/lib/i386-linux-gnu/libcuda.so.1", Flags: 0x0003, Bits: 32}
	// base is in ldconfig's order: keys descending, glibc-hwcaps entries
	// first among equal keys, 64-bit before 32-bit.
	base := func() *Cache {
		return &Cache{
			Entries: []Entry{
				x64("libz.so.1", lib+"libz.so.1"),
				hwcapsEntry("libcuda.so.1", lib+"glibc-hwcaps/x86-64-v3/libcuda.so.1", 0),
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				i386Cuda,
				x64("libc.so.6", lib+"libc.so.6"),
			},
			GlibcHwcaps: []string{"x86-64-v3"},
			Generator:   "test",
		}
	}
	withEntries := func(entries ...Entry) *Cache {
		c := base()
		c.Entries = entries
		return c
	}
	testCases := []struct {
		description string
		cache       *Cache
		libs        []Library
		want        *Cache
		wantErr     string
	}{
		{
			description: "new keys go where they sort",
			cache:       base(),
			libs: []Library{
				{Name: "libnvidia-ml.so.1", Path: lib + "libnvidia-ml.so.1", Flags: 0x0303},
				{Name: "libzz.so.1", Path: lib + "libzz.so.1", Flags: 0x0303},
				{Name: "liba.so.1", Path: lib + "liba.so.1", Flags: 0x0303},
			},
			want: withEntries(
				x64("libzz.so.1", lib+"libzz.so.1"),
				x64("libz.so.1", lib+"libz.so.1"),
				x64("libnvidia-ml.so.1", lib+"libnvidia-ml.so.1"),
				hwcapsEntry("libcuda.so.1", lib+"glibc-hwcaps/x86-64-v3/libcuda.so.1", 0),
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				i386Cuda,
				x64("libc.so.6", lib+"libc.so.6"),
				x64("liba.so.1", lib+"liba.so.1"),
			),
		},
		{
			description: "a tie goes after the entries it ties with",
			cache:       base(),
			libs:        []Library{{Name: "libcuda.so.1", Path: lib + "libcuda.so.1", Flags: 0x0303}},
			want: withEntries(
				x64("libz.so.1", lib+"libz.so.1"),
				hwcapsEntry("libcuda.so.1", lib+"glibc-hwcaps/x86-64-v3/libcuda.so.1", 0),
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				x64("libcuda.so.1", lib+"libcuda.so.1"),
				i386Cuda,
				x64("libc.so.6", lib+"libc.so.6"),
			),
		},
		{
			description: "First goes before the ties, after the glibc-hwcaps entries",
			cache:       base(),
			libs:        []Library{{Name: "libcuda.so.1", Path: lib + "libcuda.so.1", Flags: 0x0303, First: true}},
			want: withEntries(
				x64("libz.so.1", lib+"libz.so.1"),
				hwcapsEntry("libcuda.so.1", lib+"glibc-hwcaps/x86-64-v3/libcuda.so.1", 0),
				x64("libcuda.so.1", lib+"libcuda.so.1"),
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				i386Cuda,
				x64("libc.so.6", lib+"libc.so.6"),
			),
		},
		{
			description: "First with other flags: 32-bit entries go after 64-bit ones anyway",
			cache:       base(),
			libs:        []Library{{Name: "libcuda.so.1", Path: "/usr/lib32/libcuda.so.1", Flags: 0x0003, First: true}},
			want: withEntries(
				x64("libz.so.1", lib+"libz.so.1"),
				hwcapsEntry("libcuda.so.1", lib+"glibc-hwcaps/x86-64-v3/libcuda.so.1", 0),
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				Entry{Name: "libcuda.so.1", Path: "/usr/lib32/libcuda.so.1", Flags: 0x0003, Bits: 32},
				i386Cuda,
				x64("libc.so.6", lib+"libc.so.6"),
			),
		},
		{
			description: "the same library again replaces its entry in place",
			cache:       base(),
			libs:        []Library{{Name: "libcuda.so.1", Path: compat + "libcuda.so.1", Flags: 0x0303}},
			want:        base(),
		},
		{
			description: "the same library with First moves in front of its ties",
			cache: withEntries(
				x64("libcuda.so.1", lib+"libcuda.so.1"),
				x64("libcuda.so.1", compat+"libcuda.so.1"),
			),
			libs: []Library{{Name: "libcuda.so.1", Path: compat + "libcuda.so.1", Flags: 0x0303, First: true}},
			want: withEntries(
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				x64("libcuda.so.1", lib+"libcuda.so.1"),
			),
		},
		{
			description: "a replaced entry that does not tie moves: its OS version differed",
			cache: withEntries(
				Entry{Name: "libcuda.so.1", Path: lib + "libcuda.so.1", Flags: 0x0303, Bits: 64, OSVersion: 0x030200},
				x64("libcuda.so.1", compat+"libcuda.so.1"),
			),
			libs: []Library{{Name: "libcuda.so.1", Path: lib + "libcuda.so.1", Flags: 0x0303}},
			want: withEntries(
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				x64("libcuda.so.1", lib+"libcuda.so.1"),
			),
		},
		{
			description: "a glibc-hwcaps entry with the same path is not replaced",
			cache:       base(),
			libs:        []Library{{Name: "libcuda.so.1", Path: lib + "glibc-hwcaps/x86-64-v3/libcuda.so.1", Flags: 0x0303}},
			want: withEntries(
				x64("libz.so.1", lib+"libz.so.1"),
				hwcapsEntry("libcuda.so.1", lib+"glibc-hwcaps/x86-64-v3/libcuda.so.1", 0),
				x64("libcuda.so.1", compat+"libcuda.so.1"),
				x64("libcuda.so.1", lib+"glibc-hwcaps/x86-64-v3/libcuda.so.1"),
				i386Cuda,
				x64("libc.so.6", lib+"libc.so.6"),
			),
		},
		{
			description: "two First libraries that tie: the later is in front",
			cache:       withEntries(),
			libs: []Library{
				{Name: "libcuda.so.1", Path: "/a/libcuda.so.1", Flags: 0x0303, First: true},
				{Name: "libcuda.so.1", Path: "/b/libcuda.so.1", Flags: 0x0303, First: true},
			},
			want: withEntries(x64("libcuda.so.1", "/b/libcuda.so.1"), x64("libcuda.so.1", "/a/libcuda.so.1")),
		},
		{
			description: "every bad library is reported and nothing is added",
			cache:       base(),
			libs: []Library{
				{Name: "", Path: "relative/libx.so.1", Flags: 0x0303},
				{Name: "libok.so.1", Path: lib + "libok.so.1", Flags: 0x0303},
				{Name: "dir/libx.so.1", Path: "/lib/libx\x00.so.1", Flags: 0x0303},
			},
			want: base(),
			wantErr: `add library "" => "relative/libx.so.1" to ld cache: the name must be a non-empty file name without NUL bytes; the path must be absolute, without NUL bytes` + "\n" +
				`add library "dir/libx.so.1" => "/lib/libx\x00.so.1" to ld cache: the name must be a non-empty file name without NUL bytes; the path must be absolute, without NUL bytes`,
		},
		{
			description: "entries out of ldconfig's order are refused",
			cache:       withEntries(x64("liba.so.1", "/lib/liba.so.1"), x64("libb.so.1", "/lib/libb.so.1")),
			libs:        []Library{{Name: "libc.so.6", Path: "/lib/libc.so.6", Flags: 0x0303}},
			want:        withEntries(x64("liba.so.1", "/lib/liba.so.1"), x64("libb.so.1", "/lib/libb.so.1")),
			wantErr:     `add to ld cache: entries 0 ("liba.so.1" => "/lib/liba.so.1") and 1 ("libb.so.1" => "/lib/libb.so.1") are not in ldconfig's order`,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			err := tc.cache.Add(tc.libs...)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Add: %v", err)
			}
			if tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Errorf("Add error:\n got %v\nwant %s", err, tc.wantErr)
			}
			if !reflect.DeepEqual(tc.cache, tc.want) {
				t.Errorf("after Add:\n got %+v\nwant %+v", tc.cache.Entries, tc.want.Entries)
			}
			if err != nil {
				return
			}
			// The result must be a cache ldconfig could have written.
			data, err := tc.cache.Encode()
			if err != nil {
				t.Fatalf("Encode after Add: %v", err)
			}
			if _, err := ParseCache(data); err != nil {
				t.Errorf("ParseCache(Encode) after Add: %v", err)
			}
		})
	}
}

func TestFlagsFor(t *testing.T) {
	testCases := []struct {
		description string
		bits        int
		machine     elf.Machine
		want        int32
		wantErr     string
	}{
		{description: "x86-64", bits: 64, machine: elf.EM_X86_64, want: 0x0303},
		{description: "x32", bits: 32, machine: elf.EM_X86_64, want: 0x0803},
		{description: "i386", bits: 32, machine: elf.EM_386, want: 0x0003},
		{description: "aarch64", bits: 64, machine: elf.EM_AARCH64, want: 0x0a03},
		{description: "ppc64le", bits: 64, machine: elf.EM_PPC64, want: 0x0503},
		{description: "s390x", bits: 64, machine: elf.EM_S390, want: 0x0403},
		{description: "32-bit arm depends on the float ABI", bits: 32, machine: elf.EM_ARM, wantErr: "find ld cache flags for 32-bit libraries of ELF machine 40: not supported"},
		{description: "riscv depends on the float ABI", bits: 64, machine: elf.EM_RISCV, wantErr: "find ld cache flags for 64-bit libraries of ELF machine 243: not supported"},
		{description: "64-bit i386 does not exist", bits: 64, machine: elf.EM_386, wantErr: "find ld cache flags for 64-bit libraries of ELF machine 3: not supported"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := FlagsFor(tc.bits, uint16(tc.machine))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("FlagsFor = %#x, %v; want error %s", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("FlagsFor = %#x, %v; want %#x", got, err, tc.want)
			}
			if bits(got) != tc.bits {
				t.Errorf("bits(FlagsFor) = %d, want %d", bits(got), tc.bits)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	testCases := []struct {
		description string
		cache       *Cache
		wantErr     string
	}{
		{
			description: "empty name",
			cache:       &Cache{Entries: []Entry{x64("", "/lib/libz.so.1")}},
			wantErr:     `encode ld cache: entry 0 ("" => "/lib/libz.so.1"): name and path must be non-empty, without NUL bytes`,
		},
		{
			description: "NUL in a path",
			cache:       &Cache{Entries: []Entry{x64("libz.so.1", "/lib/\x00")}},
			wantErr:     `encode ld cache: entry 0 ("libz.so.1" => "/lib/\x00"): name and path must be non-empty, without NUL bytes`,
		},
		{
			description: "unsorted glibc-hwcaps names",
			cache:       &Cache{GlibcHwcaps: []string{"x86-64-v3", "x86-64-v2"}},
			wantErr:     `encode ld cache: glibc-hwcaps subdirectory names are not sorted and distinct: "x86-64-v3" before "x86-64-v2"`,
		},
		{
			description: "duplicate glibc-hwcaps names",
			cache:       &Cache{GlibcHwcaps: []string{"x86-64-v3", "x86-64-v3"}},
			wantErr:     `encode ld cache: glibc-hwcaps subdirectory names are not sorted and distinct: "x86-64-v3" before "x86-64-v3"`,
		},
		{
			description: "empty glibc-hwcaps name",
			cache:       &Cache{GlibcHwcaps: []string{""}},
			wantErr:     `encode ld cache: glibc-hwcaps subdirectory 0: name "" is empty or holds a NUL byte`,
		},
		{
			description: "entry past the glibc-hwcaps names",
			cache:       &Cache{Entries: []Entry{hwcapsEntry("libz.so.1", "/lib/libz.so.1", 1)}, GlibcHwcaps: []string{"x86-64-v3"}},
			wantErr:     `encode ld cache: entry 0 ("libz.so.1"): glibc-hwcaps subdirectory 1 of 1`,
		},
		{
			description: "entries out of order",
			cache:       &Cache{Entries: []Entry{x64("libz.so.1", "/lib/libz.so.1"), x64("libz.so.2", "/lib/libz.so.2")}},
			wantErr:     `encode ld cache: entries 0 ("libz.so.1" => "/lib/libz.so.1") and 1 ("libz.so.2" => "/lib/libz.so.2") are not in ldconfig's order`,
		},
		{
			description: "too large",
			cache:       &Cache{Generator: strings.Repeat("x", MaxSize-64)},
			wantErr:     "encode ld cache: 67108872 bytes, larger than 67108864",
		},
		{
			description: "too many strings",
			cache:       &Cache{Entries: []Entry{x64("libz.so.1", "/"+strings.Repeat("x", MaxSize))}},
			wantErr:     "encode ld cache: 67108876 bytes of strings, more than 67108864",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := tc.cache.Encode()
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("Encode = %d bytes, %v; want error %s", len(got), err, tc.wantErr)
			}
		})
	}
}

// TestEncodeByteOrder writes a cache in both byte orders: each must parse
// back to the same cache, and its byte-order flag must say which it is.
func TestEncodeByteOrder(t *testing.T) {
	_, c := readTestdata(t, "new.cache")
	testCases := []struct {
		description string
		order       binary.ByteOrder
		flag        byte
	}{
		{description: "little-endian", order: binary.LittleEndian, flag: endianLittle},
		{description: "big-endian", order: binary.BigEndian, flag: endianBig},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			data, err := c.encode(tc.order, tc.flag)
			if err != nil {
				t.Fatal(err)
			}
			if data[28] != tc.flag || tc.order.Uint32(data[20:]) != uint32(len(c.Entries)) {
				t.Errorf("header flag %d, nlibs %d; want %d, %d", data[28], tc.order.Uint32(data[20:]), tc.flag, len(c.Entries))
			}
			got, err := ParseCache(data)
			if err != nil {
				t.Fatalf("ParseCache: %v", err)
			}
			if !reflect.DeepEqual(got, c) {
				t.Errorf("ParseCache:\n got %+v\nwant %+v", got, c)
			}
		})
	}
	native, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if native[28] != nativeEndianFlag || nativeEndianFlag != endianLittle && nativeEndianFlag != endianBig {
		t.Errorf("Encode wrote byte-order flag %d, want this machine's (%d)", native[28], nativeEndianFlag)
	}
}

func TestParseCacheErrors(t *testing.T) {
	real, _ := readTestdata(t, "new.cache")
	// Offsets in testdata/new.cache (5 entries, glibc-hwcaps subdirectory
	// x86-64-v3 at string offset 0xee), from its hex dump.
	const (
		extOff      = 0x1a8 // extension directory
		hwcapsOff   = 0x1d0 // glibc-hwcaps section data
		hwcapsEntry = 2     // the entry in x86-64-v3
	)
	withUint32 := func(off int, v uint32) []byte {
		b := bytes.Clone(real)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	withUint64 := func(off int, v uint64) []byte {
		b := bytes.Clone(real)
		binary.LittleEndian.PutUint64(b[off:], v)
		return b
	}
	entry := func(i int) int { return newHeaderSize + i*newEntrySize }
	// unsorted swaps entries 0 and 1 (libnvidia-ptxjitcompiler and
	// libnvidia-ml), which ldconfig writes the other way round.
	unsorted := bytes.Clone(real)
	copy(unsorted[entry(0):], real[entry(1):entry(2)])
	copy(unsorted[entry(1):], real[entry(0):entry(1)])
	// twoHwcaps lists x86-64-v3 twice.
	twoHwcaps := bytes.Clone(real)
	binary.LittleEndian.PutUint32(twoHwcaps[extOff+8+16+12:], 8) // section size
	twoHwcaps = append(twoHwcaps[:hwcapsOff+4], append([]byte{0xee, 0, 0, 0}, twoHwcaps[hwcapsOff+4:]...)...)
	binary.LittleEndian.PutUint32(twoHwcaps[extOff+8+8:], 0x1d8) // generator moved by 4

	testCases := []struct {
		description string
		data        []byte
		wantErr     string
	}{
		{
			description: "parse's errors",
			data:        real[:47],
			wantErr:     "malformed ld.so.cache: header truncated: 47 bytes, want 48",
		},
		{
			description: "larger than MaxSize",
			data:        make([]byte, MaxSize+1),
			wantErr:     "malformed ld.so.cache: 67108865 bytes, larger than 67108864",
		},
		{
			description: "extension directory misaligned",
			data:        withUint32(32, extOff+2),
			wantErr:     "malformed ld.so.cache: extension directory offset 426 is not a multiple of 4",
		},
		{
			description: "extension directory past the end",
			data:        withUint32(32, 532),
			wantErr:     "malformed ld.so.cache: extension directory at offset 532 does not fit in 535 bytes",
		},
		{
			description: "extension directory magic",
			data:        withUint32(extOff, 0xeaa42175),
			wantErr:     "malformed ld.so.cache: extension directory at offset 424: magic 0xeaa42175, want 0xeaa42174",
		},
		{
			description: "extension sections past the end",
			data:        withUint32(extOff+4, 1<<30),
			wantErr:     "malformed ld.so.cache: extension directory at offset 424: 1073741824 sections do not fit in 535 bytes",
		},
		{
			description: "extension section data past the end",
			data:        withUint32(extOff+8+12, 0xffffffff),
			wantErr:     "malformed ld.so.cache: extension section 0 (tag 0): 4294967295 bytes at offset 468 do not fit in 535 bytes",
		},
		{
			description: "glibc-hwcaps section misaligned",
			data:        withUint32(extOff+8+16+8, hwcapsOff+1),
			wantErr:     "malformed ld.so.cache: glibc-hwcaps section: 4 bytes at offset 465, want a multiple of 4 at a multiple of 4",
		},
		{
			description: "glibc-hwcaps name offset past the end",
			data:        withUint32(hwcapsOff, 0x7fffffff),
			wantErr:     "malformed ld.so.cache: glibc-hwcaps subdirectory 0: string offset 2147483647 outside string table of 535 bytes",
		},
		{
			description: "glibc-hwcaps names not distinct",
			data:        twoHwcaps,
			wantErr:     `malformed ld.so.cache: glibc-hwcaps subdirectory names are not sorted and distinct: "x86-64-v3" before "x86-64-v3"`,
		},
		{
			description: "entry past the glibc-hwcaps names",
			data:        withUint64(entry(hwcapsEntry)+16, HwcapExtension|1),
			wantErr:     `malformed ld.so.cache: entry 2 ("libcuda.so.1"): glibc-hwcaps subdirectory 1 of 1`,
		},
		{
			description: "entries out of ldconfig's order",
			data:        unsorted,
			wantErr: `malformed ld.so.cache: entries 0 ("libnvidia-ml.so.1" => "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1") and ` +
				`1 ("libnvidia-ptxjitcompiler.so.1" => "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1") are not in ldconfig's order`,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := ParseCache(tc.data)
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("ParseCache = %+v, %v; want an error wrapping ErrFormat", got, err)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("ParseCache error:\n got %s\nwant %s", err, tc.wantErr)
			}
			if got != nil {
				t.Errorf("ParseCache returned %+v with an error", got)
			}
		})
	}
}

// TestParseCacheLenient covers what glibc accepts and ParseCache reads
// the same way.
func TestParseCacheLenient(t *testing.T) {
	real, want := readTestdata(t, "new.cache")
	withUint32 := func(data []byte, off int, v uint32) []byte {
		b := bytes.Clone(data)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	withUint64 := func(data []byte, off int, v uint64) []byte {
		b := bytes.Clone(data)
		binary.LittleEndian.PutUint64(b[off:], v)
		return b
	}
	const extOff = 0x1a8
	noHwcaps := *want
	noHwcaps.GlibcHwcaps = nil
	noHwcaps.Entries = withoutHwcap(want.Entries)
	noHwcapsData, err := noHwcaps.Encode()
	if err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		data        []byte
		want        *Cache
	}{
		{
			description: "no extension directory: written before glibc 2.33",
			data:        withUint32(noHwcapsData, 32, 0),
			want:        &Cache{Entries: noHwcaps.Entries},
		},
		{
			description: "unknown extension tags are skipped",
			data:        withUint32(real, extOff+8, 7),
			want:        &Cache{Entries: want.Entries, GlibcHwcaps: want.GlibcHwcaps},
		},
		{
			// With its section empty, the entry in x86-64-v3 is a plain
			// one (as the loader would see it if the section were gone).
			description: "an empty glibc-hwcaps section is none",
			data:        withUint64(withUint32(real, extOff+8+16+12, 0), newHeaderSize+2*newEntrySize+16, 0),
			want:        &noHwcaps,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := ParseCache(tc.data)
			if err != nil {
				t.Fatalf("ParseCache: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseCache:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

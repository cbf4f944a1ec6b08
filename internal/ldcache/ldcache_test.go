package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "regenerate testdata/*.cache with the host's ldconfig")

// ldconfigFormats are the -c formats of glibc's ldconfig (2.36 has all
// three), the testdata file each one is kept in, and the entries each
// records for the root built by buildRoot.
var ldconfigFormats = []struct {
	format string
	file   string
	want   []Entry
}{
	{format: "new", file: "testdata/new.cache", want: wantEntries},
	{format: "old", file: "testdata/old.cache", want: withoutHwcap(wantEntries)},
	{format: "compat", file: "testdata/compat.cache", want: wantEntries},
}

// wantEntries is what the new format records for the root built by
// buildRoot, in ldconfig's order. The compat format records the same in its
// new-format part.
// The 32-bit library is built without libc (no i386 libc is needed), so
// ldconfig flags it FLAG_ELF (1) rather than FLAG_ELF_LIBC6 (3).
var wantEntries = []Entry{
	{Name: "libnvidia-ptxjitcompiler.so.1", Path: "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1", Flags: 0x0303, Bits: 64},
	{Name: "libnvidia-ml.so.1", Path: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", Flags: 0x0303, Bits: 64},
	// glibc-hwcaps subdirectory 0 (x86-64-v3), ISA level 0.
	{Name: "libcuda.so.1", Path: "/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libcuda.so.550.54.15", Flags: 0x0303, Bits: 64, Hwcap: HwcapExtension},
	{Name: "libcuda.so.1", Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Flags: 0x0303, Bits: 64},
	{Name: "libcuda.so.1", Path: "/usr/lib/i386-linux-gnu/libcuda.so.1", Flags: 0x0001, Bits: 32},
}

// withoutHwcap returns entries as the old format records them: it has no
// hwcap field, so its glibc-hwcaps entry looks like a plain one; the path
// tells them apart.
func withoutHwcap(entries []Entry) []Entry {
	out := make([]Entry, len(entries))
	for i, e := range entries {
		e.Hwcap = 0
		out[i] = e
	}
	return out
}

// buildRoot builds a fake root holding tiny real ELF libraries with real
// SONAMEs: 64-bit ones in /usr/lib/x86_64-linux-gnu (one also in a
// glibc-hwcaps subdirectory) and a 32-bit one in /usr/lib/i386-linux-gnu.
func buildRoot(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("SKIP: building x86-64 and i386 test libraries needs a linux/amd64 host, have %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("SKIP: gcc is needed to build test libraries: %v", err)
	}
	root := t.TempDir()
	src := filepath.Join(t.TempDir(), "lib.c")
	if err := os.WriteFile(src, []byte("int gpu_runtime_test(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lib64 := "/usr/lib/x86_64-linux-gnu"
	lib32 := "/usr/lib/i386-linux-gnu"
	libs := []struct {
		path   string
		soname string
		flags  []string
	}{
		{path: lib64 + "/libcuda.so.550.54.15", soname: "libcuda.so.1"},
		{path: lib64 + "/glibc-hwcaps/x86-64-v3/libcuda.so.550.54.15", soname: "libcuda.so.1"},
		{path: lib64 + "/libnvidia-ml.so.550.54.15", soname: "libnvidia-ml.so.1"},
		{path: lib64 + "/libnvidia-ptxjitcompiler.so.550.54.15", soname: "libnvidia-ptxjitcompiler.so.1"},
		// -nostdlib: links without an i386 libc or crt files installed.
		{path: lib32 + "/libcuda.so.550.54.15", soname: "libcuda.so.1", flags: []string{"-m32", "-nostdlib"}},
	}
	for _, lib := range libs {
		out := filepath.Join(root, lib.path)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-shared", "-fPIC", "-Wl,-soname," + lib.soname, "-o", out, src}, lib.flags...)
		if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, b)
		}
	}
	conf := lib64 + "\n" + lib32 + "\n"
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// runLdconfig runs the host's ldconfig over root, writing a cache in format
// to root/etc/ld.so.cache, and returns the cache.
func runLdconfig(t *testing.T, root, format string) []byte {
	t.Helper()
	ldconfig := "/sbin/ldconfig"
	if _, err := os.Stat(ldconfig); err != nil {
		t.Skipf("SKIP: the host's ldconfig is needed to generate caches: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skipf("SKIP: ldconfig -r chroots, which needs root; running as uid %d", os.Geteuid())
	}
	cmd := exec.Command(ldconfig, "-i", "-r", root, "-c", format, "-C", "/etc/ld.so.cache")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, b)
	}
	data, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseHostLdconfig(t *testing.T) {
	root := buildRoot(t)
	for _, tc := range ldconfigFormats {
		t.Run(tc.format, func(t *testing.T) {
			data := runLdconfig(t, root, tc.format)
			got, _, err := parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
			if *update {
				if err := os.WriteFile(tc.file, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestLoadTestdata(t *testing.T) {
	for _, tc := range ldconfigFormats {
		t.Run(tc.format, func(t *testing.T) {
			got, err := Load(tc.file)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Load(%s):\n got %+v\nwant %+v", tc.file, got, tc.want)
			}
		})
	}
}

// TestLoadHostCache compares the host's own cache with what glibc's
// ldconfig -p prints for it: the same names and paths in the same order.
func TestLoadHostCache(t *testing.T) {
	ldconfig := "/sbin/ldconfig"
	if _, err := os.Stat(ldconfig); err != nil {
		t.Skipf("SKIP: the host's ldconfig is needed to print the host cache: %v", err)
	}
	entries, err := Load(DefaultPath)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("SKIP: the host has no %s", DefaultPath)
	}
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	out, err := exec.Command(ldconfig, "-p", "-C", DefaultPath).Output()
	if err != nil {
		t.Fatalf("ldconfig -p: %v", err)
	}
	// Lines read "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1".
	var want []string
	for _, line := range strings.Split(string(out), "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "\t"), " (")
		if !ok || !strings.HasPrefix(line, "\t") {
			continue
		}
		_, path, ok := strings.Cut(rest, ") => ")
		if !ok {
			t.Fatalf("unexpected ldconfig -p line %q", line)
		}
		want = append(want, name+" => "+path)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+" => "+e.Path)
	}
	if len(want) == 0 {
		t.Fatalf("ldconfig -p printed no libraries:\n%s", out)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load(%s) names and paths differ from ldconfig -p:\n got %q\nwant %q", DefaultPath, got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a cache"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(dir, "large") // sparse: nothing of it is read
	if err := os.WriteFile(large, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(large, MaxSize+1); err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		path        string
		wantIs      error
		wantErr     string
	}{
		{
			description: "missing file wraps fs.ErrNotExist",
			path:        filepath.Join(dir, "missing"),
			wantIs:      fs.ErrNotExist,
			wantErr:     `open ld cache "` + dir + `/missing": open ` + dir + `/missing: no such file or directory`,
		},
		{
			description: "directory is not a cache",
			path:        dir,
			wantIs:      ErrFormat,
			wantErr:     `read ld cache "` + dir + `": malformed ld.so.cache: not a regular file (directory)`,
		},
		{
			description: "character device is not read",
			path:        "/dev/zero",
			wantIs:      ErrFormat,
			wantErr:     `read ld cache "/dev/zero": malformed ld.so.cache: not a regular file (character device)`,
		},
		{
			description: "FIFO is not opened (opening it would block)",
			path:        fifo,
			wantIs:      ErrFormat,
			wantErr:     `read ld cache "` + fifo + `": malformed ld.so.cache: not a regular file (FIFO)`,
		},
		{
			description: "file larger than MaxSize is not read",
			path:        large,
			wantIs:      ErrFormat,
			wantErr:     `read ld cache "` + large + `": malformed ld.so.cache: larger than 67108864 bytes`,
		},
		{
			description: "garbage file",
			path:        garbage,
			wantIs:      ErrFormat,
			wantErr:     `parse ld cache "` + garbage + `": malformed ld.so.cache: unknown magic "not a cache"`,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var got []Entry
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				got, err = Load(tc.path)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("Load(%s) still blocked after 10 s", tc.path)
			}
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("Load(%s) = %v, %v; want error wrapping %v", tc.path, got, err, tc.wantIs)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("Load(%s) error:\n got %s\nwant %s", tc.path, err, tc.wantErr)
			}
		})
	}
}

// cacheEntry is an entry for encode: raw offsets, so tests can break them.
type cacheEntry struct {
	flags      int32
	key, value uint32
	hwcap      uint64
}

// encodeNew builds a new-format cache by hand, following dl-cache.h, for
// cases ldconfig does not write (big-endian, unset byte-order flag) or
// writes only with broken offsets.
func encodeNew(order binary.ByteOrder, endianFlag byte, entries []cacheEntry, strs string) []byte {
	b := make([]byte, newHeaderSize, newHeaderSize+len(entries)*newEntrySize+len(strs))
	copy(b, newMagic)
	order.PutUint32(b[20:], uint32(len(entries)))
	order.PutUint32(b[24:], uint32(len(strs)))
	b[28] = endianFlag
	for _, e := range entries {
		var raw [newEntrySize]byte
		order.PutUint32(raw[0:], uint32(e.flags))
		order.PutUint32(raw[4:], e.key)
		order.PutUint32(raw[8:], e.value)
		order.PutUint64(raw[16:], e.hwcap)
		b = append(b, raw[:]...)
	}
	return append(b, strs...)
}

// encodeOld builds an old-format cache; if newPart is not nil it is placed
// after the entries at offset pad bytes past their end.
func encodeOld(entries []cacheEntry, strs string, pad int, newPart []byte) []byte {
	b := make([]byte, oldHeaderSize)
	copy(b, oldMagic)
	binary.NativeEndian.PutUint32(b[12:], uint32(len(entries)))
	for _, e := range entries {
		var raw [oldEntrySize]byte
		binary.NativeEndian.PutUint32(raw[0:], uint32(e.flags))
		binary.NativeEndian.PutUint32(raw[4:], e.key)
		binary.NativeEndian.PutUint32(raw[8:], e.value)
		b = append(b, raw[:]...)
	}
	if newPart != nil {
		b = append(b, make([]byte, pad)...)
		return append(b, newPart...)
	}
	return append(b, strs...)
}

func TestParse(t *testing.T) {
	// Offsets in a new-format cache count from the start of its header:
	// with one entry the strings start at 48+24 = 72.
	const strs1 = "/lib/libz.so.1\x00" // "libz.so.1" at 72+5, path at 72
	one := []cacheEntry{{flags: 0x0303, key: 77, value: 72}}
	wantOne := []Entry{{Name: "libz.so.1", Path: "/lib/libz.so.1", Flags: 0x0303, Bits: 64}}
	newOne := encodeNew(binary.LittleEndian, endianLittle, one, strs1)

	real, err := os.ReadFile("testdata/new.cache")
	if err != nil {
		t.Fatal(err)
	}
	realCompat, err := os.ReadFile("testdata/compat.cache")
	if err != nil {
		t.Fatal(err)
	}
	withByte := func(data []byte, off int, v byte) []byte {
		b := bytes.Clone(data)
		b[off] = v
		return b
	}
	withUint32 := func(data []byte, off int, v uint32) []byte {
		b := bytes.Clone(data)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}

	testCases := []struct {
		description string
		data        []byte
		want        []Entry
		wantErr     string // "" for success; errors must wrap ErrFormat
	}{
		{
			description: "new format, little-endian",
			data:        newOne,
			want:        wantOne,
		},
		{
			description: "new format, big-endian",
			data:        encodeNew(binary.BigEndian, endianBig, one, strs1),
			want:        wantOne,
		},
		{
			description: "new format from before glibc 2.33, byte-order flag unset: native order",
			data:        encodeNew(binary.NativeEndian, endianUnset, one, strs1),
			want:        wantOne,
		},
		{
			description: "new format, no entries",
			data:        encodeNew(binary.LittleEndian, endianLittle, nil, ""),
			want:        []Entry{},
		},
		{
			description: "old format alone: offsets count from the end of the entries",
			data:        encodeOld([]cacheEntry{{flags: 0x0001, key: 5, value: 0}}, strs1, 0, nil),
			want:        []Entry{{Name: "libz.so.1", Path: "/lib/libz.so.1", Flags: 0x0001, Bits: 32}},
		},
		{
			description: "old+new with the new header 4-aligned (ldconfig on i386): new part is used",
			data: encodeOld([]cacheEntry{{flags: 0x0303, key: 1, value: 2}}, "", 0,
				newOne),
			want: wantOne,
		},
		{
			description: "old+new with the new header 8-aligned: new part is used",
			data: encodeOld([]cacheEntry{{flags: 0x0303, key: 1, value: 2}}, "", 4,
				newOne),
			want: wantOne,
		},
		{
			description: "empty input",
			data:        nil,
			wantErr:     `malformed ld.so.cache: unknown magic ""`,
		},
		{
			description: "unknown magic",
			data:        []byte("\x7fELF\x02\x01\x01"),
			wantErr:     `malformed ld.so.cache: unknown magic "\x7fELF\x02\x01\x01"`,
		},
		{
			description: "unknown new-format version",
			data:        withByte(newOne, 19, '2'),
			wantErr:     `malformed ld.so.cache: unknown magic "glibc-ld.so.cache1.2"`,
		},
		{
			description: "new header truncated",
			data:        real[:47],
			wantErr:     "malformed ld.so.cache: header truncated: 47 bytes, want 48",
		},
		{
			description: "new format, entries truncated",
			data:        newOne[:newHeaderSize+newEntrySize-1],
			wantErr:     "malformed ld.so.cache: 1 entries do not fit in 71 bytes",
		},
		{
			description: "new format, entry count overflows 32-bit arithmetic",
			data:        withUint32(real, 20, 0xffffffff),
			wantErr:     "malformed ld.so.cache: 4294967295 entries do not fit in 535 bytes",
		},
		{
			description: "new format, invalid byte-order flag",
			data:        withByte(real, 28, 1),
			wantErr:     "malformed ld.so.cache: invalid byte-order flag 1",
		},
		{
			description: "key offset past the end",
			data:        withUint32(newOne, newHeaderSize+4, 0xfffffff0),
			wantErr:     "malformed ld.so.cache: entry 0: key: string offset 4294967280 outside string table of 87 bytes",
		},
		{
			description: "value offset exactly at the end",
			data:        withUint32(newOne, newHeaderSize+8, 87),
			wantErr:     "malformed ld.so.cache: entry 0: value: string offset 87 outside string table of 87 bytes",
		},
		{
			description: "string not NUL-terminated",
			data:        newOne[:len(newOne)-1],
			wantErr:     "malformed ld.so.cache: entry 0: key: string at offset 77 is not NUL-terminated",
		},
		{
			description: "empty name",
			data:        withUint32(newOne, newHeaderSize+4, 86),
			wantErr:     "malformed ld.so.cache: entry 0: key: empty string at offset 86",
		},
		{
			description: "old header truncated",
			data:        []byte("ld.so-1.7.0\x00\x01"),
			wantErr:     "malformed ld.so.cache: old-format header truncated: 13 bytes, want 16",
		},
		{
			description: "old format, entries past the end",
			data:        encodeOld([]cacheEntry{{}, {}}, "", 0, nil)[:oldHeaderSize+oldEntrySize],
			wantErr:     "malformed ld.so.cache: 2 old-format entries do not fit in 28 bytes",
		},
		{
			description: "old format, string offset past the end",
			data:        encodeOld([]cacheEntry{{key: 0, value: 15}}, strs1, 0, nil),
			wantErr:     "malformed ld.so.cache: entry 0: value: string offset 15 outside string table of 15 bytes",
		},
		{
			description: "old+new, new part truncated",
			data:        realCompat[:88+40], // 6 old entries end at 16+6*12 = 88
			wantErr:     "new-format part at offset 88: malformed ld.so.cache: header truncated: 40 bytes, want 48",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, _, err := parse(tc.data)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("Parse:\n got %+v\nwant %+v", got, tc.want)
				}
				return
			}
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("Parse = %+v, %v; want an error wrapping ErrFormat", got, err)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("Parse error:\n got %s\nwant %s", err, tc.wantErr)
			}
			if got != nil {
				t.Errorf("Parse returned entries %+v with an error", got)
			}
		})
	}
}

// TestParseTruncated parses every prefix of every real cache: each must
// either fail with ErrFormat or parse to a prefix-independent answer.
func TestParseTruncated(t *testing.T) {
	for _, tc := range ldconfigFormats {
		t.Run(tc.format, func(t *testing.T) {
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			for n := range len(data) {
				got, _, err := parse(data[:n])
				if err != nil {
					if !errors.Is(err, ErrFormat) {
						t.Fatalf("parse(first %d bytes): %v does not wrap ErrFormat", n, err)
					}
					continue
				}
				// Only the cache's trailing extension data may be cut.
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("parse(first %d bytes) = %+v, want an error or %+v", n, got, tc.want)
				}
			}
		})
	}
}

func TestBits(t *testing.T) {
	testCases := []struct {
		description string
		flags       int32
		want        int
	}{
		{description: "x86-64", flags: 0x0303, want: 64},
		{description: "i386 linked with libc", flags: 0x0003, want: 32},
		{description: "i386 without libc", flags: 0x0001, want: 32},
		{description: "x32", flags: 0x0803, want: 32},
		{description: "aarch64", flags: 0x0a03, want: 64},
		{description: "arm hard-float", flags: 0x0903, want: 32},
		{description: "arm soft-float", flags: 0x0b03, want: 32},
		{description: "ppc64", flags: 0x0503, want: 64},
		{description: "s390x", flags: 0x0403, want: 64},
		{description: "sparc64", flags: 0x0103, want: 64},
		{description: "ia64", flags: 0x0203, want: 64},
		{description: "mips n32", flags: 0x0603, want: 32},
		{description: "mips n64", flags: 0x0703, want: 64},
		{description: "mips o32 nan2008", flags: 0x0c03, want: 32},
		{description: "mips n32 nan2008", flags: 0x0d03, want: 32},
		{description: "mips n64 nan2008", flags: 0x0e03, want: 64},
		{description: "loongarch double-float", flags: 0x1203, want: 64},
		{description: "loongarch soft-float", flags: 0x1103, want: 64},
		{description: "riscv double-float: rv32 or rv64", flags: 0x1003, want: 0},
		{description: "riscv soft-float: rv32 or rv64", flags: 0x0f03, want: 0},
		{description: "unknown ABI", flags: 0x7f03, want: 0},
		{description: "negative flags", flags: -1, want: 0},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := bits(tc.flags); got != tc.want {
				t.Errorf("bits(%#x) = %d, want %d", tc.flags, got, tc.want)
			}
		})
	}
}

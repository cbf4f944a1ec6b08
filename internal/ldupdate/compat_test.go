package ldupdate

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

func TestCompatVersion(t *testing.T) {
	testCases := []struct {
		description string
		files       []string
		tmpfs       bool // the compat directory is a mount of its own (needs root)
		want        string
		warnings    []string
	}{
		{description: "no compat dir"},
		{description: "newest versioned file wins", files: []string{"libcuda.so.1", "libcuda.so.535.104.05", "libcuda.so.560.28.03", "libnvidia-ptxjitcompiler.so.560.28.03"}, want: "560.28.03"},
		{description: "numeric, not lexical, comparison", files: []string{"libcuda.so.99.1", "libcuda.so.100.0"}, want: "100.0"},
		{description: "only links and garbage", files: []string{"libcuda.so.1", "libcuda.so.x.y"}},
		{description: "a compat directory on another mount is not considered", files: []string{"libcuda.so.560.28.03"}, tmpfs: true,
			warnings: []string{"CUDA forward compatibility not considered: /usr/local/cuda/compat is on another mount than the container root (a volume, a bind mount or a kernel file system): gpu-runtime does not act there"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root := t.TempDir()
			if tc.tmpfs {
				mountTmpfs(t, filepath.Join(root, CompatDir))
			}
			for _, f := range tc.files {
				p := filepath.Join(root, CompatDir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("not an ELF"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, warnings, err := CompatVersion(openRoot(t, root))
			if err != nil || got != tc.want {
				t.Fatalf("CompatVersion = %q, %v; want %q", got, err, tc.want)
			}
			if strings.Join(warnings, "\n") != strings.Join(tc.warnings, "\n") {
				t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(warnings, "\n"), strings.Join(tc.warnings, "\n"))
			}
		})
	}
}

// mountTmpfs mounts a tmpfs at dir, unmounted at cleanup; the test is skipped, loudly, where
// it cannot be.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root (mounts a tmpfs)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("SKIP: cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// TestCompatVersionBounded: an image can hold any number of libcuda.so.* files; only the
// newest few by name are opened, FIFOs never, and the hook says what it skipped.
func TestCompatVersionBounded(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, CompatDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("libcuda.so.%d.1", 400+i)), []byte("not an ELF"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "libcuda.so.999.1"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var got string
	var warnings []string
	var err error
	go func() {
		got, warnings, err = CompatVersion(openRoot(t, root))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("CompatVersion blocked on the FIFO")
	}
	if err != nil || got != "499.1" {
		t.Fatalf("CompatVersion = %q, %v; want 499.1 (the FIFO named 999.1 is not a library)", got, err)
	}
	want := []string{
		"/usr/local/cuda/compat holds 101 libcuda.so.<version> files; only the newest 8 by name were considered",
		"/usr/local/cuda/compat/libcuda.so.999.1 ignored: not a regular file",
	}
	if strings.Join(warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
}

// noteELF returns a 64-bit little-endian ELF file with three sections: the null section,
// the section-name table and, if note is not nil, .note.cuda.fwd_compatibility holding it.
// fix edits the header and section table before they are written.
func noteELF(note []byte, fix func(hdr, shdrs []byte)) []byte {
	le := binary.LittleEndian
	names := []byte("\x00.shstrtab\x00" + compatNote + "\x00")
	shnum := 3
	if note == nil {
		shnum = 2
	}
	namesOff := 64
	noteOff := namesOff + len(names)
	shoff := (noteOff + len(note) + 7) &^ 7
	out := make([]byte, shoff+shnum*64)
	copy(out, "\x7fELF")
	out[4], out[5], out[6] = 2, 1, 1 // 64-bit, little endian, version 1
	le.PutUint16(out[16:], uint16(elf.ET_DYN))
	le.PutUint16(out[18:], uint16(elf.EM_X86_64))
	le.PutUint64(out[40:], uint64(shoff))
	le.PutUint16(out[52:], 64)
	le.PutUint16(out[58:], 64)
	le.PutUint16(out[60:], uint16(shnum))
	le.PutUint16(out[62:], 1)
	copy(out[namesOff:], names)
	copy(out[noteOff:], note)
	sh := func(i int, name, typ uint32, off, size int) {
		s := out[shoff+i*64:]
		le.PutUint32(s, name)
		le.PutUint32(s[4:], typ)
		le.PutUint64(s[24:], uint64(off))
		le.PutUint64(s[32:], uint64(size))
	}
	sh(1, 1, uint32(elf.SHT_STRTAB), namesOff, len(names))
	if note != nil {
		sh(2, 11, uint32(elf.SHT_NOTE), noteOff, len(note))
	}
	if fix != nil {
		fix(out[:64], out[shoff:])
	}
	return out
}

// cudaNote returns a forward-compatibility note whose payload is version.
func cudaNote(version string) []byte {
	le := binary.LittleEndian
	desc := []byte(version + "\x00")
	n := make([]byte, 12, 12+8+len(desc))
	le.PutUint32(n, 5) // "NVDA\0"
	le.PutUint32(n[4:], uint32(len(desc)))
	le.PutUint32(n[8:], 1)
	n = append(n, "NVDA\x00\x00\x00\x00"...)
	return append(n, desc...)
}

// TestNoteVersionHostileELF: the compat library is the image's. Its forward-compatibility
// note is honoured, and a header that declares too many sections or program headers,
// tables outside the file, a huge section-name table (in a sparse file of a gigabyte) or a
// huge note is refused without reading more than the bounds — no version, no error, and
// next to no memory.
func TestNoteVersionHostileELF(t *testing.T) {
	le := binary.LittleEndian
	testCases := []struct {
		description string
		data        []byte
		sparse      int64 // extend the file to this size with a hole
		want        string
	}{
		{description: "note honoured", data: noteELF(cudaNote("560.35.03"), nil), want: "560.35.03"},
		{description: "no note", data: noteELF(nil, nil)},
		{description: "not ELF", data: []byte("garbage")},
		{description: "too many sections", data: noteELF(cudaNote("560.35.03"), func(h, _ []byte) { le.PutUint16(h[60:], 2000) }), sparse: 1 << 30},
		{description: "too many program headers", data: noteELF(cudaNote("560.35.03"), func(h, _ []byte) {
			le.PutUint64(h[32:], 64)
			le.PutUint16(h[54:], 56)
			le.PutUint16(h[56:], 60000)
		}), sparse: 1 << 30},
		{description: "section table past the end", data: noteELF(cudaNote("560.35.03"), func(h, _ []byte) { le.PutUint64(h[40:], 1<<40) })},
		{description: "section table offset overflowing", data: noteELF(cudaNote("560.35.03"), func(h, _ []byte) { le.PutUint64(h[40:], 1<<63) })},
		{description: "odd section header size", data: noteELF(cudaNote("560.35.03"), func(h, _ []byte) { le.PutUint16(h[58:], 1) })},
		{description: "section-name table of a gigabyte", data: noteELF(cudaNote("560.35.03"), func(_, sh []byte) {
			le.PutUint64(sh[64+32:], 1<<30-4096)
		}), sparse: 1 << 30},
		{description: "note of a gigabyte", data: noteELF(cudaNote("560.35.03"), func(_, sh []byte) {
			le.PutUint64(sh[128+32:], 1<<30-4096)
		}), sparse: 1 << 30},
		{description: "note size past its section", data: noteELF(func() []byte {
			n := cudaNote("560.35.03")
			le.PutUint32(n[4:], 1<<31)
			return n
		}(), nil)},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			name := "libcuda.so.560.35.03"
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.sparse > 0 {
				if err := os.Truncate(p, tc.sparse); err != nil {
					t.Fatal(err)
				}
			}
			h, err := openRoot(t, dir).Dir("/")
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, regular := noteVersion(h, name)
			runtime.ReadMemStats(&after)
			if got != tc.want || !regular {
				t.Errorf("noteVersion = %q, %v; want %q, true", got, regular, tc.want)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("noteVersion allocated %d bytes reading a hostile file", alloc)
			}
		})
	}
}

// TestReadLibrary: the SONAME and cache flags of an injected or compat library come from its
// ELF dynamic section, read with the bounded reader: real libraries of each ABI give what
// ldconfig records; a hostile file (a gigabyte of program headers or dynamic section, a
// string table in no segment, an endless or path-like SONAME, a FIFO, a link) is refused with
// a reason, without reading more than the bounds.
func TestReadLibrary(t *testing.T) {
	le := binary.LittleEndian
	so := func(arch testimage.Arch, soname string) []byte {
		data, err := testimage.SharedObject(arch, soname, "libc.so.6")
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	// testimage's 64-bit layout: the program headers at 64, PT_LOAD then PT_DYNAMIC.
	edit := func(data []byte, f func(b []byte)) []byte {
		b := append([]byte(nil), data...)
		f(b)
		return b
	}
	base := so(testimage.AMD64, "libcuda.so.1")
	testCases := []struct {
		description string
		data        []byte
		sparse      int64
		fifo, link  bool
		wantSoname  string
		wantFlags   int32
		wantErr     string
	}{
		{description: "x86-64", data: base, wantSoname: "libcuda.so.1", wantFlags: 0x0303},
		{description: "i386", data: so(testimage.I386, "libcuda.so.1"), wantSoname: "libcuda.so.1", wantFlags: 0x0003},
		{description: "aarch64", data: so(testimage.AArch64, "libcuda.so.1"), wantSoname: "libcuda.so.1", wantFlags: 0x0a03},
		{description: "no ELF", data: []byte("#!/bin/sh\n"), wantErr: "not a readable ELF file: no ELF header"},
		{description: "no PT_DYNAMIC", data: edit(base, func(b []byte) { le.PutUint32(b[64+56:], uint32(elf.PT_NULL)) }),
			wantErr: "not a readable ELF file: no PT_DYNAMIC segment: not a shared library"},
		{description: "60,000 program headers", data: edit(base, func(b []byte) { le.PutUint16(b[56:], 60000) }), sparse: 1 << 30,
			wantErr: "not a readable ELF file: 60000 program headers, more than 256"},
		{description: "program headers past the end", data: edit(base, func(b []byte) { le.PutUint64(b[32:], 1<<40) }),
			wantErr: "not a readable ELF file: program headers outside the file"},
		{description: "dynamic segment of a gigabyte", data: edit(base, func(b []byte) { le.PutUint64(b[64+56+32:], 1<<30-8192) }), sparse: 1 << 30,
			wantErr: "not a readable ELF file: dynamic segment of 1073733632 bytes, more than 65536"},
		{description: "string table in no loaded segment", data: edit(base, func(b []byte) { le.PutUint32(b[64:], uint32(elf.PT_NULL)) }),
			wantErr: "not a readable ELF file: string table at address 0x110 is in no loaded segment"},
		{description: "SONAME longer than a file name", data: so(testimage.AMD64, "lib"+strings.Repeat("x", 300)+".so.1"),
			wantErr: "not a readable ELF file: string at offset 283 is not NUL-terminated within 256 bytes"},
		{description: "SONAME that is a path", data: so(testimage.AMD64, "../../etc/libx.so.1"),
			wantErr: `not a readable ELF file: SONAME "../../etc/libx.so.1" is not a file name`},
		{description: "FIFO", fifo: true, wantErr: "not a regular file"},
		{description: "link", link: true, wantErr: "not a regular file"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "libcuda.so.550.54.15")
			switch {
			case tc.fifo:
				testimage.Mkfifo(t, p)
			case tc.link:
				testimage.Symlink(t, "/etc/passwd", p)
			default:
				if err := os.WriteFile(p, tc.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.sparse > 0 {
				if err := os.Truncate(p, tc.sparse); err != nil {
					t.Fatal(err)
				}
			}
			h, err := openRoot(t, dir).Dir("/")
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			soname, flags, err := readLibrary(h, "libcuda.so.550.54.15", false)
			runtime.ReadMemStats(&after)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("readLibrary error = %v\nwant %s", err, tc.wantErr)
				}
			} else if err != nil || soname != tc.wantSoname || flags != tc.wantFlags {
				t.Fatalf("readLibrary = %q, %#x, %v; want %q, %#x", soname, flags, err, tc.wantSoname, tc.wantFlags)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("readLibrary allocated %d bytes", alloc)
			}
		})
	}
	// A library built by gcc (section headers, GNU hash, a real text segment), and one
	// without a SONAME, which ldconfig enters under its file name.
	dir := t.TempDir()
	testimage.BuildLib(t, filepath.Join(dir, "libreal.so.1.2"), "libreal.so.1")
	h, err := openRoot(t, dir).Dir("/")
	if err != nil {
		t.Fatal(err)
	}
	if soname, flags, err := readLibrary(h, "libreal.so.1.2", false); err != nil || soname != "libreal.so.1" || flags != 0x0303 {
		t.Errorf("gcc library: %q, %#x, %v", soname, flags, err)
	}
	src := filepath.Join(dir, "s.c")
	if err := os.WriteFile(src, []byte("int f(void){return 1;}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(dir, "libnosoname.so.3"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	if soname, _, err := readLibrary(h, "libnosoname.so.3", false); err != nil || soname != "libnosoname.so.3" {
		t.Errorf("library without a SONAME: %q, %v; want its file name", soname, err)
	}
}

// openRoot opens root for one update with the default limits, closed at cleanup.
func openRoot(t *testing.T, root string) *confined.Root {
	t.Helper()
	r, err := confined.Open(root, confined.DefaultLimits(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

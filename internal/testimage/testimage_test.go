package testimage

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestSharedObject(t *testing.T) {
	testCases := []struct {
		description string
		arch        Arch
		soname      string
		needed      []string
	}{
		{description: "x86-64 with libc", arch: AMD64, soname: "libcuda.so.1", needed: []string{"libc.so.6"}},
		{description: "i386 with two dependencies", arch: I386, soname: "libGL.so.1", needed: []string{"libc.so.6", "libm.so.6"}},
		{description: "aarch64 without dependencies", arch: AArch64, soname: "libnvidia-ml.so.1"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			data, err := SharedObject(tc.arch, tc.soname, tc.needed...)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("debug/elf cannot read it: %v", err)
			}
			if f.Class != tc.arch.Class || f.Machine != tc.arch.Machine || f.Type != elf.ET_DYN || f.Data != elf.ELFDATA2LSB {
				t.Errorf("header: class %v machine %v type %v data %v; want %v %v ET_DYN ELFDATA2LSB",
					f.Class, f.Machine, f.Type, f.Data, tc.arch.Class, tc.arch.Machine)
			}
			var types []elf.ProgType
			for _, p := range f.Progs {
				types = append(types, p.Type)
				switch p.Type {
				case elf.PT_LOAD:
					if p.Off != 0 || p.Vaddr != 0 || p.Filesz != uint64(len(data)) || p.Memsz != p.Filesz {
						t.Errorf("PT_LOAD %+v does not map the whole file of %d bytes at 0", p.ProgHeader, len(data))
					}
				case elf.PT_GNU_STACK:
					if p.Flags&elf.PF_X != 0 {
						t.Errorf("PT_GNU_STACK asks for an executable stack")
					}
				}
			}
			if want := []elf.ProgType{elf.PT_LOAD, elf.PT_DYNAMIC, elf.PT_GNU_STACK}; !reflect.DeepEqual(types, want) {
				t.Errorf("program headers %v, want %v", types, want)
			}
			// debug/elf finds the dynamic section through section headers,
			// which a loaded library does not need; read it from the
			// program header the way ldconfig and the loader do.
			soname, needed := dynamicStrings(t, f, data)
			if soname != tc.soname || !slices.Equal(needed, tc.needed) {
				t.Errorf("SONAME %q, DT_NEEDED %q; want %q, %q", soname, needed, tc.soname, tc.needed)
			}
		})
	}
}

// dynamicStrings reads DT_SONAME and the DT_NEEDED entries of a file
// SharedObject wrote through its PT_DYNAMIC segment.
func dynamicStrings(t *testing.T, f *elf.File, data []byte) (soname string, needed []string) {
	t.Helper()
	var dyn *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn = p
		}
	}
	if dyn == nil {
		t.Fatal("no PT_DYNAMIC")
	}
	word := 8
	if f.Class == elf.ELFCLASS32 {
		word = 4
	}
	get := func(off uint64) uint64 {
		if word == 8 {
			return f.ByteOrder.Uint64(data[off:])
		}
		return uint64(f.ByteOrder.Uint32(data[off:]))
	}
	var strtab uint64
	var sonameOff uint64
	var neededOff []uint64
	for off := dyn.Off; off < dyn.Off+dyn.Filesz; off += uint64(2 * word) {
		switch elf.DynTag(get(off)) {
		case elf.DT_STRTAB:
			strtab = get(off + uint64(word))
		case elf.DT_SONAME:
			sonameOff = get(off + uint64(word))
		case elf.DT_NEEDED:
			neededOff = append(neededOff, get(off+uint64(word)))
		}
	}
	str := func(off uint64) string {
		s := data[strtab+off:]
		return string(s[:bytes.IndexByte(s, 0)])
	}
	for _, off := range neededOff {
		needed = append(needed, str(off))
	}
	return str(sonameOff), needed
}

func TestSharedObjectErrors(t *testing.T) {
	testCases := []struct {
		description string
		arch        Arch
		soname      string
		wantErr     string
	}{
		{description: "empty SONAME", arch: AMD64, wantErr: "write shared object: empty SONAME"},
		{description: "no ELF class", arch: Arch{Machine: elf.EM_X86_64}, soname: "libx.so.1", wantErr: `write shared object "libx.so.1": unsupported ELF class ELFCLASSNONE`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := SharedObject(tc.arch, tc.soname)
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("SharedObject error %v, want %s", err, tc.wantErr)
			}
		})
	}
}

// TestSharedObjectLoads has the host's dynamic linker load an x86-64
// object (ld.so --list maps it and its dependencies), and checks that it
// refuses the same object for AArch64, so that the first check means
// something.
func TestSharedObjectLoads(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("SKIP: loading an x86-64 library needs a linux/amd64 host, have %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := os.Stat(hostLoader); err != nil {
		t.Skipf("SKIP: the host's dynamic linker is needed: %v", err)
	}
	data, err := SharedObject(AMD64, "libgpu-runtime-test.so.1", "libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	other, err := SharedObject(AArch64, "libgpu-runtime-test.so.1", "libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "libgpu-runtime-test.so.1")
	bad := filepath.Join(dir, "libaarch64.so.1")
	if err := os.WriteFile(good, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, other, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(hostLoader, "--list", good).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "libc.so.6 => ") {
		t.Errorf("%s --list %s: %v\n%s", hostLoader, good, err, out)
	}
	if out, err := exec.Command(hostLoader, "--list", bad).CombinedOutput(); err == nil {
		t.Errorf("%s --list loaded an AArch64 library:\n%s", hostLoader, out)
	}
}

func TestDistroLibraries(t *testing.T) {
	names := distroLibraries(5000)
	sonames := make(map[string]bool)
	files := make(map[string]bool)
	for _, n := range names {
		if sonames[n.soname] || files[n.file] {
			t.Fatalf("%+v repeats a SONAME or file name", n)
		}
		sonames[n.soname] = true
		files[n.file] = true
		if !strings.HasPrefix(n.file, n.soname) || !strings.HasPrefix(n.soname, "lib") {
			t.Errorf("%+v: the file is not named after its SONAME", n)
		}
	}
	if len(cudaLibraries(40)) != 40 || cudaLibraries(40)[0].soname != "libcudart.so.12" {
		t.Errorf("cudaLibraries(40) = %+v", cudaLibraries(40))
	}
}

func TestBuild(t *testing.T) {
	testCases := []struct {
		description string
		opts        Options
	}{
		{
			description: "usr-merged CUDA image with every kind of library",
			opts: Options{
				Libraries: 60, UsrMerge: true, CUDALibraries: 6, I386Libraries: 3,
				GlibcHwcaps: []string{"x86-64-v2", "x86-64-v3"}, HwcapsLibraries: 2,
				CompatVersion: "550.54.15", CompatInConfig: true, HostLibc: true,
			},
		},
		{
			description: "busybox-like: libraries in /lib, no ld.so.conf",
			opts:        Options{Libraries: 5, LibDir: "/lib", NoConfig: true},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root := t.TempDir()
			img, err := Build(root, tc.opts)
			if errors.Is(err, ErrNeedRoot) {
				t.Skipf("SKIP: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			// Every library is in the cache under its SONAME and the path
			// ldconfig records for it, with its ABI; nothing else is,
			// except development links (libfoo.so), which ldconfig also
			// records, and the copied libc.
			want := make(map[CacheLine]bool)
			for _, lib := range img.Libraries {
				desc := "libc6,x86-64"
				if lib.Arch == I386 {
					desc = "libc6"
				}
				if lib.Hwcaps != "" {
					desc += `, hwcap: "` + lib.Hwcaps + `"`
				}
				want[CacheLine{Key: lib.Soname, Desc: desc, Path: lib.Path()}] = true
				if _, err := os.Lstat(filepath.Join(root, lib.Path())); err != nil {
					t.Errorf("library %+v: %v", lib, err)
				}
			}
			got := make(map[CacheLine]bool)
			lines, err := ListCache("/sbin/ldconfig", filepath.Join(root, "etc/ld.so.cache"))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range lines {
				e.Path = ResolveDir(root, e.Path)
				if !want[e] && !strings.HasSuffix(e.Key, ".so") && e.Key != "libc.so.6" {
					t.Errorf("cache entry %+v is not a library Build wrote", e)
				}
				got[e] = true
			}
			for e := range want {
				if !got[e] {
					t.Errorf("library %+v is not in the cache", e)
				}
			}
			if len(want) != len(img.Libraries) {
				t.Errorf("Build reported %d libraries, %d distinct", len(img.Libraries), len(want))
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		root        string
		opts        Options
		wantErr     string
	}{
		{description: "root not empty", root: nonEmpty, opts: Options{NoCache: true}, wantErr: "build test image: " + nonEmpty + " is not empty"},
		{description: "relative library directory", root: t.TempDir(), opts: Options{LibDir: "lib", NoCache: true}, wantErr: `build test image: library directory "lib" is not absolute`},
		{description: "missing ldconfig", root: t.TempDir(), opts: Options{Ldconfig: "/nonexistent/ldconfig"}, wantErr: "find ldconfig: stat /nonexistent/ldconfig: no such file or directory"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := Build(tc.root, tc.opts)
			if os.Geteuid() != 0 && !tc.opts.NoCache {
				if !errors.Is(err, ErrNeedRoot) {
					t.Errorf("Build as uid %d = %v, want an error wrapping ErrNeedRoot", os.Geteuid(), err)
				}
				return
			}
			if err == nil || !strings.HasSuffix(err.Error(), tc.wantErr) {
				t.Errorf("Build error:\n got %v\nwant one ending %s", err, tc.wantErr)
			}
		})
	}
}

// BenchmarkBuild measures building the realistic root of Default, with
// and without running ldconfig.
func BenchmarkBuild(b *testing.B) {
	for _, bc := range []struct {
		name    string
		noCache bool
	}{{name: "files", noCache: true}, {name: "files+ldconfig"}} {
		b.Run(bc.name, func(b *testing.B) {
			opts := Default()
			opts.NoCache = bc.noCache
			if !bc.noCache && os.Geteuid() != 0 {
				b.Skipf("SKIP: ldconfig -r needs root; running as uid %d", os.Geteuid())
			}
			for range b.N {
				b.StopTimer()
				root := b.TempDir()
				b.StartTimer()
				if _, err := Build(root, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

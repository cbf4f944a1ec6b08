package discover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// discoverEnv is a driver root with one library directory and a query that counts its calls.
type discoverEnv struct {
	opts    Options
	queries int
}

func newDiscoverEnv(t *testing.T) *discoverEnv {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/x86_64-linux-gnu"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &discoverEnv{}
	e.opts = Options{DriverRoot: root, DevRoot: t.TempDir(), ProcRoot: t.TempDir(), CacheFile: filepath.Join(t.TempDir(), "run", "cache.json")}
	e.opts.Query = func(context.Context, string) (Driver, error) {
		e.queries++
		return Driver{Version: "550.54.15", CUDAVersion: "12.4", GPUs: []GPU{{Index: 0, UUID: "GPU-a"}}}, nil
	}
	return e
}

func (e *discoverEnv) discover(t *testing.T) Result {
	t.Helper()
	res, err := Discover(e.opts, DeviceNodes{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Host.Driver.Version != "550.54.15" {
		t.Fatalf("host = %+v", res.Host)
	}
	return res
}

func TestDiscoverCache(t *testing.T) {
	e := newDiscoverEnv(t)
	if r := e.discover(t); r.CacheHit || r.CacheProblem != "" || e.queries != 1 {
		t.Fatalf("first: %+v, %d queries", r, e.queries)
	}
	if fi, err := os.Stat(e.opts.CacheFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi, err)
	}
	if r := e.discover(t); !r.CacheHit || e.queries != 1 {
		t.Fatalf("second: %+v, %d queries", r, e.queries)
	}
	// Every input is stamped once (the 32- and 64-bit library directory lists overlap).
	c, err := readCache(e.opts.CacheFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, in := range c.Inputs {
		if seen[in] {
			t.Errorf("input %q listed twice", in)
		}
		seen[in] = true
	}

	// The host changes (a file appears in a library directory): silently re-queried.
	if err := os.WriteFile(filepath.Join(e.opts.DriverRoot, "usr/lib/x86_64-linux-gnu/libcuda.so.560.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.discover(t); r.CacheHit || r.CacheProblem != "" || e.queries != 2 {
		t.Fatalf("after a change: %+v, %d queries", r, e.queries)
	}

	// Stale caches are normal events: re-queried silently.
	staleCases := []struct {
		description string
		write       func(c cacheFile) cacheFile
	}{
		{"another cache version", func(c cacheFile) cacheFile { c.Version = CacheVersion - 1; return c }},
		{"the JSON cache of an older gpu-runtime", func(c cacheFile) cacheFile { c.Fingerprint = "json"; return c }},
	}
	for _, tc := range staleCases {
		t.Run(tc.description, func(t *testing.T) {
			e.discover(t)
			c, err := readCache(e.opts.CacheFile)
			if err != nil {
				t.Fatal(err)
			}
			if c = tc.write(c); c.Fingerprint == "json" {
				err = os.WriteFile(e.opts.CacheFile, []byte(`{"version":2,"fingerprint":"x","inputs":[],"host":{}}`), 0o600)
			} else {
				err = writeCache(e.opts.CacheFile, c)
			}
			if err != nil {
				t.Fatal(err)
			}
			before := e.queries
			if r := e.discover(t); r.CacheHit || r.CacheProblem != "" || e.queries != before+1 {
				t.Fatalf("got %+v (%d queries)", r, e.queries-before)
			}
			if r := e.discover(t); !r.CacheHit {
				t.Errorf("cache not rebuilt: %+v", r)
			}
		})
	}

	testCases := []struct {
		description string
		spoil       func(p string) error
		wantProblem string
	}{
		{"not a cache", func(p string) error { return os.WriteFile(p, []byte("{not json,\n"), 0o600) },
			"discovery cache " + e.opts.CacheFile + " ignored: not a discovery cache"},
		{"bad CSV", func(p string) error { return appendTo(p, "file,\"unterminated\n") },
			"discovery cache " + e.opts.CacheFile + ` ignored: parse error on line N, column 20: extraneous or missing " in quoted-field`},
		{"unknown record", func(p string) error { return appendTo(p, "future,1\n") },
			"discovery cache " + e.opts.CacheFile + ` ignored: line N: unexpected record "future" with 2 fields`},
		{"short record", func(p string) error { return appendTo(p, "gpu,1,1\n") },
			"discovery cache " + e.opts.CacheFile + ` ignored: line N: unexpected record "gpu" with 3 fields`},
		{"bad number", func(p string) error { return appendTo(p, "gpu,one,1,GPU-b,,,,,000,0\n") },
			"discovery cache " + e.opts.CacheFile + ` ignored: line N: "one" is not a number`},
		{"world-writable", func(p string) error { return os.Chmod(p, 0o666) },
			"discovery cache " + e.opts.CacheFile + " ignored: mode 0666, not 0600"},
		{"group-readable", func(p string) error { return os.Chmod(p, 0o640) },
			"discovery cache " + e.opts.CacheFile + " ignored: mode 0640, not 0600"},
		{"a symlink to a valid cache", func(p string) error {
			copyPath := p + ".elsewhere"
			if err := os.Rename(p, copyPath); err != nil {
				return err
			}
			return os.Symlink(copyPath, p)
		}, "discovery cache " + e.opts.CacheFile + " ignored: it is a symbolic link"},
		{"a FIFO (must not hang)", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return syscall.Mkfifo(p, 0o600)
		}, "discovery cache " + e.opts.CacheFile + " ignored: not a regular file"},

		{"no driver version", func(p string) error {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, []byte(strings.Replace(string(data), "driver,550.54.15,", "driver,,", 1)), 0o600)
		}, "discovery cache " + e.opts.CacheFile + " ignored: no driver version"},
	}
	if os.Geteuid() == 0 { // only root can give a file away
		testCases = append(testCases, struct {
			description string
			spoil       func(p string) error
			wantProblem string
		}{"owned by another user", func(p string) error { return os.Chown(p, 1000, 1000) },
			"discovery cache " + e.opts.CacheFile + " ignored: owned by uid 1000, not 0"})
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e.discover(t) // a valid cache to spoil
			valid, err := os.ReadFile(e.opts.CacheFile)
			if err != nil {
				t.Fatal(err)
			}
			validLines := bytes.Count(valid, []byte("\n"))
			if err := tc.spoil(e.opts.CacheFile); err != nil {
				t.Fatal(err)
			}
			before := e.queries
			r := e.discover(t)
			// N: the line appended to the valid cache.
			want := strings.ReplaceAll(tc.wantProblem, "line N", fmt.Sprintf("line %d", validLines+1))
			if r.CacheHit || r.CacheProblem != want || e.queries != before+1 {
				t.Fatalf("got %+v (%d queries)\nwant problem %q", r, e.queries-before, want)
			}
			if r := e.discover(t); !r.CacheHit {
				t.Errorf("cache not rebuilt: %+v", r)
			}
		})
	}

	off := e.opts
	off.CacheFile = ""
	before := e.queries
	if r, err := Discover(off, DeviceNodes{}); err != nil || r.CacheHit || e.queries != before+1 {
		t.Errorf("cache off: %+v %v", r, err)
	}
}

func TestDiscoverQueryErrors(t *testing.T) {
	e := newDiscoverEnv(t)
	e.opts.Timeout = 50 * time.Millisecond
	e.opts.Query = func(ctx context.Context, _ string) (Driver, error) {
		<-ctx.Done()
		return Driver{}, ctx.Err()
	}
	_, err := Discover(e.opts, DeviceNodes{})
	want := "GPU discovery timed out: NVML did not answer within 50ms (setting discovery.timeout): the NVIDIA driver may be hung or still initialising; check nvidia-smi on the host, and enable persistence mode (nvidia-smi -pm 1)"
	if err == nil || err.Error() != want || !errors.Is(err, ErrTimeout) {
		t.Errorf("timeout error = %v", err)
	}
	e.opts.Query = nil
	if _, err := Discover(e.opts, DeviceNodes{}); err == nil || err.Error() != "discover: no NVML query configured" {
		t.Errorf("no query: %v", err)
	}
	if _, err := os.Stat(e.opts.CacheFile); err == nil {
		t.Error("a failed discovery wrote a cache")
	}
}

func TestFindDriverFilesErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testCases := []struct{ description, root, version, wantErr string }{
		{"empty version", t.TempDir(), "", "find driver files: empty driver version"},
		{"root is a file", file, "1.0", "find driver files: driver root " + file + " is not a directory"},
		{"root missing", "/nonexistent-root", "1.0", "find driver files: driver root: stat /nonexistent-root: no such file or directory"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if _, err := FindDriverFiles(tc.root, tc.version); err == nil || err.Error() != tc.wantErr {
				t.Errorf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func appendTo(p, line string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	return errors.Join(err, f.Close())
}

// TestCacheRoundTrip: everything discovery learns comes back from the cache as it went in,
// separators and quotes in names and paths included.
func TestCacheRoundTrip(t *testing.T) {
	want := cacheFile{Version: CacheVersion, Fingerprint: "0123abcd", Inputs: []string{"ldcache /r/etc/ld.so.cache", "dir /r/usr/lib, with comma"},
		Host: Host{
			Driver: Driver{Version: "550.54.15", CUDAVersion: "12.4", NVMLPath: "/r/usr/lib/libnvidia-ml.so.1", GPUs: []GPU{
				{Index: 0, Minor: 3, UUID: "GPU-a", Name: `NVIDIA "H100", 80GB`, Brand: "nvidia", BusID: "00000000:07:00.0", ComputeCapability: "9.0",
					MIGCapable: true, MIGCurrent: true, MIGPending: true, MIGDevices: []MIGDevice{
						{Index: 0, UUID: "MIG-x", GI: 1, CI: 0, Profile: "3g.40gb", MemoryMiB: 40192, GICap: 417, CICap: 418},
						{Index: 1, UUID: "MIG-y", GI: 7, CI: 0, Profile: "1g.10gb+me", MemoryMiB: 9728, GICap: 0, CICap: 0},
					}},
				{Index: 1, Minor: 4, UUID: "GPU-b", Name: "line\nbreak", MIGCapable: true, MIGPending: true},
			}, Excluded: []ExcludedGPU{{UUID: "GPU-c", BusID: "00000000:0A:00.0"}}},
			MIGCaps: MIGCaps{Major: 237, Config: 1, Monitor: 2},
			Files: []File{
				{Kind: KindLibrary, Capability: "compute", Prefix: "libcuda", Bits: 64, HostPath: "/r/usr/lib/libcuda.so.550.54.15", ContainerPath: "/usr/lib/libcuda.so.550.54.15"},
				{Kind: KindSocket, HostPath: "/r/run/nvidia-persistenced/socket", ContainerPath: "/run/nvidia-persistenced/socket"},
			},
		}}
	data, err := encodeCache(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeCache(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestCacheRefusesCarriageReturns: a value encoding/csv would not give back unchanged is
// not cached; discovery answers anyway and says why the cache was not written.
func TestCacheRefusesCarriageReturns(t *testing.T) {
	c := cacheFile{Version: CacheVersion, Host: Host{Driver: Driver{Version: "1.0", GPUs: []GPU{{UUID: "GPU-a", Name: "a\r\nb"}}}}}
	if _, err := encodeCache(c); err == nil || err.Error() != `gpu record: "a\r\nb" holds a carriage return` {
		t.Errorf("error = %v", err)
	}
	e := newDiscoverEnv(t)
	e.opts.Query = func(context.Context, string) (Driver, error) {
		return Driver{Version: "550.54.15", GPUs: []GPU{{UUID: "GPU-a", Name: "x\ry"}}}, nil
	}
	r := e.discover(t)
	if want := `encode discovery cache: gpu record: "x\ry" holds a carriage return`; r.CacheProblem != want || r.Host.Driver.GPUs[0].Name != "x\ry" {
		t.Errorf("got %+v\nwant problem %s", r, want)
	}
	if _, err := os.Stat(e.opts.CacheFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cache written: %v", err)
	}
}

// FuzzDecodeCache: any file decodes or fails cleanly, and what decodes survives a re-encode.
func FuzzDecodeCache(f *testing.F) {
	f.Add([]byte(cacheMagic + ",3\nfingerprint,ab\ninput,ldcache /etc/ld.so.cache\ndriver,1.0,12.4,\ngpu,0,0,GPU-a,n,b,bus,8.0\nfile,library,compute,libcuda,64,/a,/a\n"))
	f.Add([]byte(cacheMagic + ",6\nfingerprint,ab\ndriver,1.0,12.4,\ngpu,0,0,GPU-a,n,b,bus,8.0,111\nmig,0,MIG-a,1,0,3g.40gb,40192,12,13\ncaps,237,1,2\n"))
	f.Add([]byte(cacheMagic + ",2\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeCache(data)
		if err != nil || bytes.ContainsRune(data, '\r') { // values with \r are never written
			return
		}
		again, err := encodeCache(c)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		c2, err := decodeCache(again)
		if err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, c, c2)
		}
	})
}

// TestLDCacheStaysInRoot: a driver root whose ld.so.cache is a symlink to the host's reads
// nothing from the host's cache (it resolves inside the root, where nothing is).
func TestLDCacheStaysInRoot(t *testing.T) {
	if _, err := os.Stat("/etc/ld.so.cache"); err != nil {
		t.Skip("SKIPPED: this machine has no /etc/ld.so.cache to escape to")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/ld.so.cache", filepath.Join(root, "etc/ld.so.cache")); err != nil {
		t.Fatal(err)
	}
	if entries := rootLDCache(root); len(entries) != 0 {
		t.Errorf("read %d entries from outside the driver root", len(entries))
	}
	if p, ok := ldcacheFile(root); ok || p != filepath.Join(root, "etc/ld.so.cache") {
		t.Errorf("ldcacheFile = %s, %v", p, ok)
	}
}

// TestDiscoverCacheWatchesEveryFileKind: the fingerprint covers every directory a discovered
// or discoverable file lives in, so the cache never answers for a host where a socket, a
// config file or a firmware file came or went (a stale answer meant a mount error on every
// GPU create, or a socket never injected).
func TestDiscoverCacheWatchesEveryFileKind(t *testing.T) {
	e := newDiscoverEnv(t)
	root := e.opts.DriverRoot
	mk := func(rel string, mode uint32) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, mode|0o644, 0); err != nil {
			t.Fatal(err)
		}
	}
	has := func(r Result, containerPath string) bool {
		for _, f := range r.Host.Files {
			if f.ContainerPath == containerPath {
				return true
			}
		}
		return false
	}
	mk("var/run/nvidia-persistenced/socket", unix.S_IFSOCK)
	mk("usr/share/vulkan/icd.d/nvidia_icd.json", unix.S_IFREG)
	mk("lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", unix.S_IFREG)
	mk("lib/firmware/nvidia/550.54.15/gsp_tu10x.bin", unix.S_IFREG)
	first := e.discover(t)
	for _, p := range []string{"/var/run/nvidia-persistenced/socket", "/usr/share/vulkan/icd.d/nvidia_icd.json", "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"} {
		if !has(first, p) {
			t.Fatalf("%s not discovered: %+v", p, first.Host.Files)
		}
	}
	steps := []struct {
		description string
		change      func()
		check       func(r Result) bool
	}{
		{"persistenced socket removed", func() { must(t, os.Remove(filepath.Join(root, "var/run/nvidia-persistenced/socket"))) },
			func(r Result) bool { return !has(r, "/var/run/nvidia-persistenced/socket") }},
		{"fabric-manager socket appears", func() { mk("var/run/nvidia-fabricmanager/socket", unix.S_IFSOCK) },
			func(r Result) bool { return has(r, "/var/run/nvidia-fabricmanager/socket") }},
		{"ICD json removed", func() { must(t, os.Remove(filepath.Join(root, "usr/share/vulkan/icd.d/nvidia_icd.json"))) },
			func(r Result) bool { return !has(r, "/usr/share/vulkan/icd.d/nvidia_icd.json") }},
		{"GSP firmware file removed", func() { must(t, os.Remove(filepath.Join(root, "lib/firmware/nvidia/550.54.15/gsp_tu10x.bin"))) },
			func(r Result) bool {
				return has(r, "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin") && !has(r, "/lib/firmware/nvidia/550.54.15/gsp_tu10x.bin")
			}},
		{"OpenCL vendor file appears", func() { mk("etc/OpenCL/vendors/nvidia.icd", unix.S_IFREG) },
			func(r Result) bool { return has(r, "/etc/OpenCL/vendors/nvidia.icd") }},
	}
	for _, s := range steps {
		s.change()
		r := e.discover(t)
		if r.CacheHit || !s.check(r) {
			t.Errorf("%s: cache hit %v, files %+v", s.description, r.CacheHit, r.Host.Files)
		}
		if r := e.discover(t); !r.CacheHit {
			t.Errorf("%s: not cached again", s.description)
		}
	}
}

// TestSocketsUnderRun: a driver root without the var/run -> ../run link has its sockets
// under run/ only; with the link, one socket is found once.
func TestSocketsUnderRun(t *testing.T) {
	for _, link := range []bool{false, true} {
		root := t.TempDir()
		p := filepath.Join(root, "run/nvidia-persistenced/socket")
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, unix.Mknod(p, unix.S_IFSOCK|0o644, 0))
		want := []string{"/run/nvidia-persistenced/socket"}
		if link {
			must(t, os.MkdirAll(filepath.Join(root, "var"), 0o755))
			must(t, os.Symlink("../run", filepath.Join(root, "var/run")))
			want = []string{"/var/run/nvidia-persistenced/socket"}
		}
		files, err := FindDriverFiles(root, "550.54.15")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range files {
			if f.Kind == KindSocket {
				got = append(got, f.ContainerPath)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("link %v: sockets %v, want %v", link, got, want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckCache(t *testing.T) {
	e := newDiscoverEnv(t)
	check := func(want string) {
		t.Helper()
		got, err := CheckCache(e.opts, DeviceNodes{})
		if got != want || (err != nil) != (want == CacheUnusable) {
			t.Errorf("CheckCache = %q, %v; want %q", got, err, want)
		}
	}
	check(CacheMissing)
	e.discover(t)
	check(CacheFresh)
	if err := os.WriteFile(filepath.Join(e.opts.DriverRoot, "usr/lib/x86_64-linux-gnu/libcuda.so.560.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check(CacheStale)
	if e.queries != 1 {
		t.Errorf("CheckCache queried NVML: %d queries", e.queries)
	}
	if err := os.Chmod(e.opts.CacheFile, 0o644); err != nil {
		t.Fatal(err)
	}
	check(CacheUnusable)
}

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// cacheHit runs a GPU container and reports whether discovery came from the cache, plus
// the container's output.
func cacheHit(t *testing.T, e *env, env ...string) (bool, result) {
	t.Helper()
	b := e.bundle(t, env, "for f in /dev/nvidia[0-9]*; do echo dev $f; done; ls /usr/lib/x86_64-linux-gnu/")
	logPath := filepath.Join(t.TempDir(), "log.json")
	r := e.run(t, b, "--log", logPath, "--log-format", "json")
	fh, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	hit, seen := false, false
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			CacheHit bool   `json:"cache_hit"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "discovered host" {
			hit, seen = line.CacheHit, true
		}
	}
	if !seen && r.code == 0 {
		t.Fatalf("no discovery line in the log")
	}
	return hit, r
}

// privateHost builds a fake host this test may rebuild in place.
func privateHost(t *testing.T, dir string, opts fakehost.Options) *fakehost.Host {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h, err := fakehost.Build(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestDiscoveryCache(t *testing.T) {
	e := newEnv(t, 1)
	hostDir := filepath.Join(e.dir, "host")
	e.host = privateHost(t, hostDir, fakehost.Default(2))
	e.writeConfig(t, "")
	cache := filepath.Join(e.dir, "discovery-cache.csv")

	step := func(name string, wantHit bool, check func(r result), env ...string) {
		t.Helper()
		hit, r := cacheHit(t, e, env...)
		if r.code != 0 && check == nil {
			t.Fatalf("%s: exit %d: %s", name, r.code, r.stderr)
		}
		if hit != wantHit {
			t.Errorf("%s: cache hit = %v, want %v", name, hit, wantHit)
		}
		if check != nil {
			check(r)
		}
	}
	all := "NVIDIA_VISIBLE_DEVICES=all"
	step("first container fills the cache", false, nil, all)
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi, err)
	}
	step("second container is served from the cache", true, nil, all)

	opts := fakehost.Default(2)
	opts.DriverVersion = "560.35.03"
	e.host = privateHost(t, hostDir, opts)
	step("driver upgrade invalidates", false, func(r result) {
		if !strings.Contains(r.stdout, "libcuda.so.560.35.03") || strings.Contains(r.stdout, "libcuda.so.550.54.15") {
			t.Errorf("after upgrade the container got:\n%s", r.stdout)
		}
	}, all)
	step("and is cached again", true, nil, all)

	e.host = privateHost(t, hostDir, fakehost.Default(3))
	step("GPU added invalidates", false, func(r result) {
		if !strings.Contains(r.stdout, "dev /dev/nvidia2") {
			t.Errorf("new GPU not seen:\n%s", r.stdout)
		}
	}, all)

	e.host = privateHost(t, hostDir, fakehost.Default(1))
	step("GPU removed invalidates", false, func(r result) {
		if r.code == 0 || !strings.Contains(r.stderr, `unknown device "1"`) {
			t.Errorf("removed GPU still offered: exit %d %s", r.code, r.stderr)
		}
	}, "NVIDIA_VISIBLE_DEVICES=1")
	step("cached after removal", true, nil, all)

	caps := filepath.Join(e.host.DevRoot, "dev/nvidia-caps")
	if err := os.MkdirAll(caps, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(caps, "nvidia-cap21"), unix.S_IFCHR|0o444, int(unix.Mkdev(509, 21))); err != nil {
		t.Fatal(err)
	}
	step("MIG reconfiguration (new capability node) invalidates", false, nil, all)

	other := privateHost(t, filepath.Join(e.dir, "other"), fakehost.Default(1))
	e.host = other
	e.writeConfig(t, "")
	step("changed driver root invalidates", false, nil, all)

	if err := os.WriteFile(cache, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	hit, r := cacheHit(t, e, all)
	if hit || r.code != 0 {
		t.Errorf("corrupt cache: hit %v exit %d %s", hit, r.code, r.stderr)
	}
	if data, _ := os.ReadFile(cache); !bytes.HasPrefix(data, []byte("gpu-runtime discovery cache,")) {
		t.Errorf("corrupt cache was not rebuilt: %q", data)
	}
	step("rebuilt cache is used", true, nil, all)

	if err := os.Chmod(cache, 0o666); err != nil {
		t.Fatal(err)
	}
	step("world-writable cache is not trusted", false, nil, all)

	if err := os.Remove(cache); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, "")
	replaceInFile(t, e.config, "[discovery]\n", "[discovery]\ncache = false\n")
	step("cache off", false, nil, all)
	step("cache off, again", false, nil, all)
	if _, err := os.Stat(cache); err == nil {
		t.Errorf("cache written although cache = false")
	}
}

func TestDiscoveryTimeout(t *testing.T) {
	e := newEnv(t, 1)
	opts := fakehost.Default(1)
	opts.NVMLInitDelay = 5 * time.Second
	e.host = privateHost(t, filepath.Join(e.dir, "slow"), opts)
	e.writeConfig(t, "")
	replaceInFile(t, e.config, "[discovery]\n", "[discovery]\ntimeout = \"300ms\"\n")
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "true")
	start := time.Now()
	r := e.run(t, b)
	if r.code == 0 {
		t.Fatal("want a timeout failure")
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("create took %s: the timeout did not bound it", took)
	}
	want := "GPU discovery timed out: NVML did not answer within 300ms (setting discovery.timeout)"
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
}

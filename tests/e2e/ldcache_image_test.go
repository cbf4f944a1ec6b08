package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// recordingLDConfig is a static stand-in for ldconfig that records being run: it writes
// /ldconfig-ran, which is the container root's once the hook's sandbox has pivoted into it.
const recordingLDConfig = `#include <stdio.h>
int main(void) { FILE *f = fopen("/ldconfig-ran", "w"); if (!f) return 1; fputs("ran\n", f); return fclose(f) != 0; }
`

// imageBundle makes a bundle whose rootfs is a testimage image built with opts and its
// program that dlopens libcuda.so.1 (testimage.DlopenCUDAProgram), which it runs with env.
func imageBundle(t *testing.T, opts testimage.Options, env ...string) (bundle string, img *testimage.Image) {
	t.Helper()
	bundle = filepath.Join(t.TempDir(), "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	opts.DlopenCUDA = true
	img, err := testimage.Build(rootfs, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var spec specs.Spec
	if err := json.Unmarshal(specTmpl, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{testimage.DlopenCUDAProgram}
	spec.Process.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	spec.Root.Readonly = false
	data, err := json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bundle, "config.json"), string(data))
	return bundle, img
}

// useRecordingLDConfig makes e's hook.ldconfig the recording stand-in.
func useRecordingLDConfig(t *testing.T, e *env) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "ldconfig.c")
	writeFile(t, src, recordingLDConfig)
	bin := filepath.Join(dir, "ldconfig")
	if out, err := exec.Command("gcc", "-static", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc -static (libc6-dev): %v: %s", err, out)
	}
	replaceInFile(t, e.config, "[hook]\n", "[hook]\nldconfig = \""+bin+"\"\n")
}

// loaderSearch returns the loader's LD_DEBUG=libs lines about libcuda.so.1, from its
// "find library" line to the file it opened.
func loaderSearch(stderr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(stderr))
	on := false
	for sc.Scan() {
		_, line, _ := strings.Cut(sc.Text(), ":")
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "find library=libcuda.so.1") {
			on = true
		}
		if on {
			out = append(out, line)
			if strings.HasPrefix(line, "calling init:") || strings.HasPrefix(line, "find library=") && len(out) > 1 {
				break
			}
		}
	}
	return out
}

// TestLDCacheRealisticImage: in an image with 1,500 libraries, CUDA libraries and an
// ld.so.cache, a dynamically linked program finds the injected libcuda.so.1 through the
// container's cache (the loader's LD_DEBUG trace: found in /etc/ld.so.cache, no search path
// tried), with LD_LIBRARY_PATH unset; where the image ships newer forward-compat libraries
// it gets those. No ldconfig ran: hook.ldconfig is a stand-in that records being run, and
// the control case (an image without a cache, with libraries of its own) shows it would have.
// Every entry of the image's cache is still there.
func TestLDCacheRealisticImage(t *testing.T) {
	testCases := []struct {
		description string
		opts        testimage.Options
		want        string // the file dlopen opens
		ldconfig    bool   // the stand-in must have run
	}{
		{description: "realistic image", opts: testimage.Default(), want: libDir + "/libcuda.so.1"},
		{description: "realistic image with newer forward-compat libraries",
			opts: func() testimage.Options { o := testimage.Default(); o.CompatVersion = "560.35.03"; return o }(),
			want: ldupdate.CompatDir + "/libcuda.so.1"},
		{description: "control: no cache and libraries of the image's own",
			opts:     testimage.Options{Libraries: 20, UsrMerge: true, NoCache: true},
			ldconfig: true},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 2)
			useRecordingLDConfig(t, e)
			b, img := imageBundle(t, tc.opts, "NVIDIA_VISIBLE_DEVICES=0", "LD_DEBUG=libs")
			rootfs := filepath.Join(b, "rootfs")
			var before []ldcache.Entry
			if !tc.opts.NoCache {
				var err error
				if before, err = ldcache.Load(filepath.Join(rootfs, "etc/ld.so.cache")); err != nil {
					t.Fatal(err)
				}
			}
			r := e.run(t, b)
			_, ranErr := os.Stat(filepath.Join(rootfs, "ldconfig-ran"))
			if tc.ldconfig {
				if ranErr != nil {
					t.Fatalf("the stand-in ldconfig did not run where it must (%v): it cannot show that none ran\nstderr: %s", ranErr, r.stderr)
				}
				return
			}
			if ranErr == nil {
				t.Error("ldconfig ran")
			}
			if r.code != 0 || !strings.Contains(r.stdout, "libcuda.so.1 => "+tc.want+"\n") {
				t.Fatalf("exit %d; want the program to open %s\nstdout: %s\nstderr: %s", r.code, tc.want, r.stdout, r.stderr)
			}
			search := loaderSearch(r.stderr)
			if len(search) < 3 || search[1] != "search cache=/etc/ld.so.cache" || search[2] != "trying file="+tc.want ||
				slices.ContainsFunc(search, func(l string) bool { return strings.HasPrefix(l, "search path=") }) {
				t.Errorf("the loader did not find libcuda.so.1 in its cache:\n%s", strings.Join(search, "\n"))
			}
			c := readContainerCache(t, rootfs)
			if c.Generator != ldupdate.CacheGenerator() {
				t.Errorf("the cache was generated by %q, want gpu-hook's %q", c.Generator, ldupdate.CacheGenerator())
			}
			for _, old := range before {
				if !slices.ContainsFunc(c.Entries, func(n ldcache.Entry) bool { return n.Name == old.Name && n.Path == old.Path && n.Flags == old.Flags }) {
					t.Errorf("the image's entry %s => %s is gone", old.Name, old.Path)
				}
			}
			if len(before) < len(img.Libraries) {
				t.Errorf("the image's cache has %d entries for %d libraries", len(before), len(img.Libraries))
			}
			if tc.opts.CompatVersion != "" {
				conf, err := os.ReadFile(filepath.Join(rootfs, ldupdate.CompatConf))
				if err != nil || !strings.Contains(string(conf), ldupdate.CompatDir+"\n") {
					t.Errorf("%s: %q, %v; want it kept for an ldconfig the image runs later", ldupdate.CompatConf, conf, err)
				}
			}
		})
	}
}

// readContainerCache parses a rootfs's /etc/ld.so.cache.
func readContainerCache(t *testing.T, rootfs string) *ldcache.Cache {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(rootfs, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ldcache.ParseCache(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLDCacheThroughProc: with runc, the container's /proc is mounted in the rootfs when
// the hook runs, and /proc/1/root is the host's "/". An image linking its ld.so.cache there
// (to have the hook read, or rewrite, the host's) gets neither: the link is not followed
// (a magic link), the hook falls back to the sandboxed ldconfig, the host's cache is
// unchanged and the container's has the injected libraries.
func TestLDCacheThroughProc(t *testing.T) {
	e := newEnv(t, 1)
	hostCache, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Skipf("SKIP: the host has no /etc/ld.so.cache to aim at: %v", err)
	}
	b, _ := imageBundle(t, testimage.Options{Libraries: 20, UsrMerge: true}, "NVIDIA_VISIBLE_DEVICES=0")
	rootfs := filepath.Join(b, "rootfs")
	if err := os.Remove(filepath.Join(rootfs, "etc/ld.so.cache")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/1/root/etc/ld.so.cache", filepath.Join(rootfs, "etc/ld.so.cache")); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, b)
	if r.code != 0 || !strings.Contains(r.stdout, "libcuda.so.1 => "+libDir+"/libcuda.so.1\n") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	after, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil || sha256.Sum256(after) != sha256.Sum256(hostCache) {
		t.Fatalf("the host's /etc/ld.so.cache changed (%v)", err)
	}
	if fi, err := os.Lstat(filepath.Join(rootfs, "etc/ld.so.cache")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the container's /etc/ld.so.cache: %v, %v; want a regular file in place of the link", fi, err)
	}
	if c := readContainerCache(t, rootfs); c.Generator == ldupdate.CacheGenerator() {
		t.Error("the cache was written in-process through a link into /proc")
	}
}

// TestLDCacheNoteInRuncLog: runc drops a successful hook's output, so when the loader cache
// needs ldconfig (here: an image with a library of its own and no cache) the hook appends why
// to the create's --log, where the engine's debug log shows it.
func TestLDCacheNoteInRuncLog(t *testing.T) {
	e := newEnv(t, 1)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "true")
	if err := fakehost.BuildCUDALibrary(filepath.Join(b, "rootfs/usr/lib/x86_64-linux-gnu/libimage.so.1.0"), "libimage.so.1", 12000); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "log.json")
	if r := e.run(t, b, "--log", logPath, "--log-format", "json"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	found := ""
	for _, l := range jsonLines(t, logPath) {
		if msg, _ := l["msg"].(string); strings.HasPrefix(msg, "gpu-hook: loader cache: ran ") {
			found = msg
		}
	}
	if !strings.Contains(found, "over the whole image (slower) because ") {
		t.Errorf("runc's log lacks the hook's note:\n%v", jsonLines(t, logPath))
	}
}

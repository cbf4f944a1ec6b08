package e2e

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// ldcacheHooks returns the update-ldcache hook entries of a bundle's spec.
func ldcacheHooks(t *testing.T, bundle string) []specs.Hook {
	t.Helper()
	s := readSpec(t, bundle)
	if s.Hooks == nil {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(s.Hooks.CreateContainer), func(h specs.Hook) bool {
		return len(h.Args) < 2 || h.Args[1] != "update-ldcache"
	})
}

// loaderCacheLine returns the create's debug line about where the loader cache was updated.
func loaderCacheLine(t *testing.T, logPath string) string {
	t.Helper()
	line := ""
	for _, l := range jsonLines(t, logPath) {
		if msg, _ := l["msg"].(string); strings.HasPrefix(msg, "loader cache: ") {
			line = msg
		}
	}
	return line
}

// TestLDCacheAtCreate: gpu-runtime updates the container's loader cache itself at create and
// leaves the update-ldcache hook out of the spec, wherever what it sees before the mounts is
// what the hook would see after them; elsewhere the hook stays and does it. Either way the
// program in the container finds the injected libcuda.so.1 through /etc/ld.so.cache, and the
// debug log says which it was and why.
func TestLDCacheAtCreate(t *testing.T) {
	testCases := []struct {
		description string
		config      string
		opts        testimage.Options
		spec        func(t *testing.T, bundle string)
		hook        bool   // the hook must stay
		line        string // the debug line
	}{
		{description: "realistic image", opts: testimage.Default(),
			line: "loader cache: written at create, in-process (12 libraries); no update-ldcache hook"},
		{description: "hook.ldcache-at-create = false", config: "[hook]\nldcache-at-create = false\n", opts: testimage.Default(), hook: true,
			line: "loader cache: left to the update-ldcache hook: hook.ldcache-at-create is false"},
		{description: "a volume over /etc/ld.so.conf.d", opts: testimage.Default(), hook: true,
			spec: func(t *testing.T, b string) {
				addMount(t, b, specs.Mount{Destination: "/etc/ld.so.conf.d", Type: "bind", Source: t.TempDir(), Options: []string{"rbind", "ro"}})
			},
			line: `loader cache: left to the update-ldcache hook: something is mounted at "/etc/ld.so.conf.d", and the update reads or writes "/etc/ld.so.conf.d": the hook sees the mount`},
		{description: "a volume inside the libraries' directory, reached through the image's /lib link", opts: testimage.Default(), hook: true,
			spec: func(t *testing.T, b string) {
				addMount(t, b, specs.Mount{Destination: "/lib/x86_64-linux-gnu/plugins", Type: "bind", Source: t.TempDir(), Options: []string{"rbind", "ro"}})
			},
			line: `loader cache: left to the update-ldcache hook: something is mounted at "/lib/x86_64-linux-gnu/plugins", and the update reads or writes "/lib": the hook sees the mount`},
		{description: "an image whose cache ldconfig must rebuild", opts: testimage.Options{Libraries: 20, UsrMerge: true, NoCache: true}, hook: true,
			line: "loader cache: left to the update-ldcache hook: ldconfig must run: the image has no /etc/ld.so.cache and has libraries of its own, such as "},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 2)
			if tc.config != "" {
				replaceInFile(t, e.config, "[hook]\n", tc.config)
			}
			b, _ := imageBundle(t, tc.opts, "NVIDIA_VISIBLE_DEVICES=0", "LD_DEBUG=libs")
			if tc.spec != nil {
				tc.spec(t, b)
			}
			logPath := filepath.Join(t.TempDir(), "log.json")
			id := containerID(t)
			out, err := os.OpenFile(filepath.Join(t.TempDir(), "out"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			r := e.runtime(t, out, "--log", logPath, "--log-format", "json", "create", "--bundle", b, id)
			defer e.runtime(t, nil, "delete", "--force", id)
			if r.code != 0 {
				t.Fatalf("create: exit %d: %s", r.code, r.stderr)
			}
			if line := loaderCacheLine(t, logPath); !strings.HasPrefix(line, tc.line) {
				t.Errorf("debug line %q, want %q", line, tc.line)
			}
			hooks := ldcacheHooks(t, b)
			switch {
			case tc.hook && len(hooks) != 1:
				t.Errorf("want the update-ldcache hook in the spec, got %+v", hooks)
			case !tc.hook && len(hooks) != 0:
				t.Errorf("want no update-ldcache hook in the spec, got %+v", hooks)
			}
			for _, h := range hooks {
				if !filepath.IsAbs(h.Path) || len(h.Env) == 0 {
					t.Errorf("hook without absolute path or env: %+v", h)
				}
			}
			if r := e.runtime(t, nil, "start", id); r.code != 0 {
				t.Fatalf("start: exit %d: %s", r.code, r.stderr)
			}
			waitStopped(t, e, id)
			if got, _ := os.ReadFile(out.Name()); !strings.Contains(string(got), "libcuda.so.1 => "+libDir+"/libcuda.so.1\n") {
				t.Errorf("the program did not open %s/libcuda.so.1: %s", libDir, got)
			}
			c := readContainerCache(t, filepath.Join(b, "rootfs"))
			if !slices.ContainsFunc(c.Entries, func(en ldcache.Entry) bool { return en.Name == "libcuda.so.1" && en.Path == libDir+"/libcuda.so.1" }) {
				t.Errorf("the container's cache has no libcuda.so.1 => %s/libcuda.so.1", libDir)
			}
			if link, err := os.Readlink(filepath.Join(b, "rootfs", libDir, "libcuda.so.1")); err != nil || link != "libcuda.so.550.54.15" {
				t.Errorf("SONAME link libcuda.so.1 -> %q (%v)", link, err)
			}
		})
	}
}

// TestLDCacheAtCreateStaysInRoot: at create gpu-runtime works in the host's mount namespace,
// on a root the image filled. An image whose /etc, /etc/ld.so.cache or library directory is
// a link to a host directory or file (absolute or ../; the image has a directory of the same
// path too) gets its cache and links written inside its root, never on the host. One that
// links them through /proc/1/root, which is runc's host root once /proc is mounted, is left
// to the hook (the update would read through the /proc mount), which refuses the magic link.
// Either way the host's files are byte-for-byte unchanged.
func TestLDCacheAtCreateStaysInRoot(t *testing.T) {
	hostCache, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Skipf("SKIP: the host has no /etc/ld.so.cache to aim at: %v", err)
	}
	const atCreate, toHook = "loader cache: written at create", `loader cache: left to the update-ldcache hook: something is mounted at "/proc`
	for _, tc := range []struct {
		description, path string
		target            func(victim string) string
		line              string
		written           string // where, in the root, the cache or links must be
	}{
		{"/etc absolute", "/etc", func(v string) string { return v }, atCreate, "ld.so.cache"},
		{"/etc relative", "/etc", func(v string) string { return strings.Repeat("../", 12) + strings.TrimPrefix(v, "/") }, atCreate, "ld.so.cache"},
		{"/etc/ld.so.cache absolute", "/etc/ld.so.cache", func(v string) string { return v + "/ld.so.cache" }, atCreate, ""},
		{"library directory absolute", libDir, func(v string) string { return v }, atCreate, "libcuda.so.1"},
		{"/etc/ld.so.cache through /proc/1/root", "/etc/ld.so.cache", func(string) string { return "/proc/1/root/etc/ld.so.cache" }, toHook, ""},
		{"library directory through /proc/1/root", libDir, func(v string) string { return "/proc/1/root" + v }, toHook, ""},
	} {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			victim := t.TempDir()
			writeFile(t, filepath.Join(victim, "sentinel"), "host file")
			writeFile(t, filepath.Join(victim, "ld.so.cache"), "host cache")
			before := snapshot(t, victim)
			b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "echo started")
			rootfs := filepath.Join(b, "rootfs")
			link := filepath.Join(rootfs, tc.path)
			if err := os.RemoveAll(link); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{filepath.Dir(link), filepath.Join(rootfs, victim)} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(tc.target(victim), link); err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if line := loaderCacheLine(t, logPath); !strings.HasPrefix(line, tc.line) {
				t.Errorf("debug line %q, want %q", line, tc.line)
			}
			if tc.line == atCreate && (r.code != 0 || !strings.Contains(r.stdout, "started")) {
				t.Errorf("container did not start: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if after := snapshot(t, victim); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("host directory changed through the image link:\nbefore %v\nafter  %v", before, after)
			}
			if data, _ := os.ReadFile(filepath.Join(victim, "ld.so.cache")); string(data) != "host cache" {
				t.Fatalf("host file rewritten: %q", data)
			}
			if after, err := os.ReadFile("/etc/ld.so.cache"); err != nil || sha256.Sum256(after) != sha256.Sum256(hostCache) {
				t.Fatalf("the host's /etc/ld.so.cache changed (%v)", err)
			}
			if tc.written != "" {
				if _, err := os.Lstat(filepath.Join(rootfs, victim, tc.written)); err != nil {
					t.Errorf("nothing written inside the root where the link leads: %v", err)
				}
			}
		})
	}
}

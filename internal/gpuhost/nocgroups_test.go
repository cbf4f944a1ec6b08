package gpuhost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

func TestNoCgroups(t *testing.T) {
	testCases := []struct {
		description string
		setting     bool
		euid        int
		uidMap      string // "" : no map file
		want        string
		warning     bool
	}{
		{description: "root of the host: cgroups", euid: 0, uidMap: "         0          0 4294967295\n", want: ""},
		{description: "no /proc: cgroups", euid: 0, want: ""},
		{description: "the setting, as the host's root: a warning", setting: true, euid: 0, uidMap: "0 0 4294967295\n", want: "runtime.no-cgroups is true", warning: true},
		{description: "the setting, rootless", setting: true, euid: 1000, uidMap: "0 0 4294967295\n", want: "runtime.no-cgroups is true"},
		{description: "not root", euid: 1000, uidMap: "0 0 4294967295\n", want: "gpu-runtime runs as uid 1000, not root (rootless)"},
		{description: "root of rootless podman's user namespace", euid: 0, uidMap: "         0       1000          1\n         1     100000      65536\n",
			want: "gpu-runtime runs in a user namespace (rootless)"},
		{description: "a user namespace mapping all but one id", euid: 0, uidMap: "0 0 4294967294\n", want: "gpu-runtime runs in a user namespace (rootless)"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "uid_map")
			if tc.uidMap != "" {
				if err := os.WriteFile(file, []byte(tc.uidMap), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			oldEuid, oldFile := geteuid, uidMapFile
			t.Cleanup(func() { geteuid, uidMapFile = oldEuid, oldFile })
			geteuid, uidMapFile = func() int { return tc.euid }, file
			cfg := config.Default()
			cfg.Runtime.NoCgroups = tc.setting
			got, warning := NoCgroups(cfg, nil)
			if got != tc.want {
				t.Errorf("NoCgroups = %q, want %q", got, tc.want)
			}
			if want := map[bool]string{true: NoCgroupsRootfulWarning}[tc.warning]; warning != want {
				t.Errorf("NoCgroups warning = %q, want %q", warning, want)
			}
		})
	}
}

// TestNoCgroupsRootlessSeam: the caller's answer replaces the process's own.
func TestNoCgroupsRootlessSeam(t *testing.T) {
	if got, w := NoCgroups(config.Default(), func() string { return "" }); got != "" || w != "" {
		t.Errorf("NoCgroups with a rootful seam = %q, %q; want nothing", got, w)
	}
	if got, w := NoCgroups(config.Default(), func() string { return "why" }); got != "why" || w != "" {
		t.Errorf("NoCgroups with a rootless seam = %q, %q; want \"why\", no warning", got, w)
	}
}

// TestNoCgroupsRootfulWarningText: the warning names the setting, the problem and the fix.
func TestNoCgroupsRootfulWarningText(t *testing.T) {
	for _, want := range []string{"runtime.no-cgroups is true", "host's root", "device cgroup denies", "set runtime.no-cgroups = false"} {
		if !strings.Contains(NoCgroupsRootfulWarning, want) {
			t.Errorf("warning %q lacks %q", NoCgroupsRootfulWarning, want)
		}
	}
}

func TestRootlessCacheFile(t *testing.T) {
	custom := config.Default()
	custom.Discovery.CacheFile = "/home/u/cache.csv"
	testCases := []struct {
		description string
		cfg         config.Config
		runtimeDir  string
		want        string
	}{
		{"root's default: the user's runtime directory", config.Default(), "/run/user/1000", "/run/user/1000/gpu-runtime/discovery-cache.csv"},
		{"no XDG_RUNTIME_DIR: the default", config.Default(), "", config.Default().Discovery.CacheFile},
		{"a relative XDG_RUNTIME_DIR: the default", config.Default(), "run/user", config.Default().Discovery.CacheFile},
		{"a configured file is kept", custom, "/run/user/1000", "/home/u/cache.csv"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := RootlessCacheFile(tc.cfg, tc.runtimeDir); got != tc.want {
				t.Errorf("RootlessCacheFile = %q, want %q", got, tc.want)
			}
		})
	}
}

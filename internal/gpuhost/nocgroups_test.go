package gpuhost

import (
	"os"
	"path/filepath"
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
	}{
		{description: "root of the host: cgroups", euid: 0, uidMap: "         0          0 4294967295\n", want: ""},
		{description: "no /proc: cgroups", euid: 0, want: ""},
		{description: "the setting", setting: true, euid: 0, uidMap: "0 0 4294967295\n", want: "runtime.no-cgroups is true"},
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
			if got := NoCgroups(cfg, nil); got != tc.want {
				t.Errorf("NoCgroups = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNoCgroupsRootlessSeam: the caller's answer replaces the process's own.
func TestNoCgroupsRootlessSeam(t *testing.T) {
	if got := NoCgroups(config.Default(), func() string { return "" }); got != "" {
		t.Errorf("NoCgroups with a rootful seam = %q, want \"\"", got)
	}
	if got := NoCgroups(config.Default(), func() string { return "why" }); got != "why" {
		t.Errorf("NoCgroups with a rootless seam = %q, want \"why\"", got)
	}
}

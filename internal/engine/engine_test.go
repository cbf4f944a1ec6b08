package engine

import (
	"path/filepath"
	"testing"
)

// TestRuntimeNames: configure takes the names the engines accept (nvidia included, for
// manifests and scripts written for NVIDIA's toolkit) and refuses, with the reason, an
// engine's own runtime and a CRI handler no RuntimeClass can name; unconfigure refuses none
// of the latter.
func TestRuntimeNames(t *testing.T) {
	testCases := []struct {
		engine  Engine
		name    string
		wantErr string // "" accepted
	}{
		{Docker, "nvidia", ""},
		{Containerd, "nvidia", ""},
		{CRIO, "nvidia", ""},
		{Docker, "GPU_1.x", ""},
		{Docker, "runc", `runtime name "runc" is docker's own runtime: choose another name (gpu, or nvidia for what was NVIDIA's runtime), and --set-as-default to make it the default`},
		{Docker, "io.containerd.runc.v2", `runtime name "io.containerd.runc.v2" is docker's own runtime`},
		{Containerd, "runc", `runtime name "runc" is containerd's own runtime`},
		{CRIO, "crun", `runtime name "crun" is crio's own runtime`},
		{Containerd, "GPU_1.x", `runtime name "GPU_1.x" cannot be a Kubernetes RuntimeClass handler: use lowercase letters, digits and '-' (63 at most), starting and ending with a letter or digit`},
		{CRIO, "gpu-", `runtime name "gpu-" cannot be a Kubernetes RuntimeClass handler`},
	}
	for _, tc := range testCases {
		t.Run(string(tc.engine)+" "+tc.name, func(t *testing.T) {
			opts := Options{RuntimeName: tc.name, RuntimePath: testRuntimePath, ConfigPath: filepath.Join(t.TempDir(), "file")}
			_, err := opts.withDefaults(tc.engine, true)
			if tc.wantErr == "" {
				checkErr(t, err, nil)
			} else {
				checkErr(t, err, ErrInvalidOptions, tc.wantErr)
			}
			if _, err := opts.withDefaults(tc.engine, false); err != nil {
				t.Errorf("unconfigure refuses %q: %v", tc.name, err)
			}
		})
	}
}

package dra

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandLine: the command line's errors name the flag and the fix, before anything is
// read or written.
func TestCommandLine(t *testing.T) {
	testCases := []struct {
		description string
		args        []string
		wantErr     string
		usage       bool
		config      string // the configuration file; "": the defaults
	}{
		{"no node name", []string{"--kubeconfig", "/k"}, "usage: --node-name is required: the name of this node, as kubectl get nodes shows it (in a DaemonSet: from spec.nodeName)", true, ""},
		{"relative CDI dir", []string{"--node-name", "n", "--cdi-dir", "cdi"}, `usage: --cdi-dir "cdi": want an absolute path`, true, ""},
		{"unknown flag", []string{"--node", "n"}, "usage: flag provided but not defined: -node (gpu-kubelet-plugin --help)", true, ""},
		{"an argument", []string{"--node-name", "n", "extra"}, `usage: unexpected argument "extra" (gpu-kubelet-plugin --help)`, true, ""},
		{"a kubeconfig that is not there", []string{"--node-name", "n", "--kubeconfig", "/nonexistent/kubeconfig"}, "--kubeconfig /nonexistent/kubeconfig: stat /nonexistent/kubeconfig: no such file or directory", false, ""},
		{"a MIG device named shareable", []string{"--node-name", "n"},
			`config CFG: invalid dra.shared-gpus[1] "MIG-4a2f": want a whole GPU, by index or UUID: MIG devices are never shareable (NVIDIA's driver refuses MPS on MIG); share the MIG device's GPU with MIG mode off, or give MIG devices whole (mig.gpu-runtime.dev)`,
			false, "[dra]\nshared-gpus = [\"0\", \"MIG-4a2f\"]\n"},
		{"shared-gpus a string other than all", []string{"--node-name", "n"},
			`parse config CFG: invalid dra.shared-gpus "0": want an array of GPU indices or UUIDs, such as ["0", "GPU-8f3a…"], or "all"; one GPU is an array too: shared-gpus = ["0"]`,
			false, "[dra]\nshared-gpus = \"0\"\n"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("GPU_RUNTIME_CONFIG", cfg)
			var stdout, stderr bytes.Buffer
			err := Command(context.Background(), tc.args, &stdout, &stderr)
			if want := strings.ReplaceAll(tc.wantErr, "CFG", cfg); err == nil || err.Error() != want || errors.Is(err, ErrUsage) != tc.usage {
				t.Errorf("error:\n got %v\nwant %s (usage: %v)", err, tc.wantErr, tc.usage)
			}
		})
	}
	var stdout bytes.Buffer
	if err := Command(context.Background(), []string{"--help"}, &stdout, &stdout); err != nil || !strings.HasPrefix(stdout.String(), "usage: gpu-kubelet-plugin --node-name NAME [--kubeconfig FILE] [--kubelet-dir DIR]") {
		t.Errorf("--help: %v\n%s", err, stdout.String())
	}
}

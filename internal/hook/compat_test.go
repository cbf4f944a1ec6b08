package hook

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

func TestPreferCompatConfined(t *testing.T) {
	requireRoot(t)
	host := t.TempDir()
	root := t.TempDir()
	lib := "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
	testimage.BuildLib(t, filepath.Join(root, lib), "libcuda.so.1")
	testimage.BuildLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.28.03"), "libcuda.so.1")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The image points ld.so.conf.d at a host directory.
	if err := os.Symlink(host, filepath.Join(root, "etc/ld.so.conf.d")); err != nil {
		t.Fatal(err)
	}
	opts := LDCacheOptions{Options: ldupdate.Options{LDConfig: "/sbin/ldconfig", Libraries: libraries([]string{lib}, nil), DriverVersion: "550.54.15"}}
	_, err := UpdateLDCache(root, opts)
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("wrote to the host through the image's symlink: %v (err %v)", entries, err)
	}
	// Confined, the link dangles inside the root: the hook refuses with a clear error.
	if err == nil || !strings.HasPrefix(err.Error(), "create /etc/ld.so.conf.d in container root: ") {
		t.Fatalf("error = %v", err)
	}
	// With the target present inside the root, the entry lands there.
	if err := os.MkdirAll(filepath.Join(root, host), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := UpdateLDCache(root, opts); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("wrote to the host: %v", entries)
	}
	conf, err := os.ReadFile(filepath.Join(root, host, filepath.Base(ldupdate.CompatConf)))
	if err != nil || !strings.Contains(string(conf), ldupdate.CompatDir) {
		t.Errorf("compat conf inside the root: %q, %v", conf, err)
	}
}

func TestRunMessages(t *testing.T) {
	testCases := []struct {
		description string
		argv0       string
		args        []string
		stdin       string
		wantMsg     string
	}{
		{"docker's hook name means gpu-runtime was bypassed", "/usr/bin/nvidia-container-runtime-hook", []string{"prestart"}, "",
			"gpu-hook: container was created without gpu-runtime: docker ran nvidia-container-runtime-hook for a --gpus container; run it with --runtime=gpu, or set gpu as docker's default-runtime in /etc/docker/daemon.json"},
		{"unknown subcommand", "gpu-hook", []string{"poststart"}, "", `gpu-hook: unknown subcommand "poststart"`},
		{"the requirement check is gpu-runtime's, at create", "gpu-hook", []string{"prestart"}, "", `gpu-hook: unknown subcommand "prestart"`},
		{"no state on stdin", "gpu-hook", []string{"proc-caps"}, "", "gpu-hook: bad hook input: decode container state from stdin: EOF"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var out, errb strings.Builder
			err := Run(tc.argv0, tc.args, strings.NewReader(tc.stdin), &out, &errb)
			if err == nil || "gpu-hook: "+err.Error() != tc.wantMsg {
				t.Fatalf("message = %v\nwant      %s", err, tc.wantMsg)
			}
		})
	}
	if !errors.Is(Run("nvidia-container-runtime-hook", nil, nil, nil, nil), ErrBypassed) {
		t.Error("want ErrBypassed")
	}
}

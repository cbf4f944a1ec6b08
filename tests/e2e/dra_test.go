package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKubeletPluginBinary runs the real gpu-kubelet-plugin (built as make build does) on a
// fake 2-GPU host, against an API server that is not there: its kubelet sockets appear, it
// builds its host view (NVML asked through the real gpu-ctk: its discovery cache appears in
// the state directory) and waits for the API server to publish, and SIGTERM makes it remove
// its sockets and exit 0, having written nothing but its state directory. (Publishing is
// tested against client-go's fake API in internal/dra.)
func TestKubeletPluginBinary(t *testing.T) {
	e := newEnv(t, 2)
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(binDir, "gpu-kubelet-plugin") // next to gpu-ctk, which it asks about NVML
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", plugin, "./cmd/gpu-kubelet-plugin")
	build.Dir, build.Env = strings.TrimSpace(string(root)), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gpu-kubelet-plugin: %v\n%s", err, out)
	}
	dir, err := os.MkdirTemp("", "dra") // short: socket paths hold at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: x}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("[driver]\nroot = %q\ndev-root = %q\nproc-root = %q\nsys-root = %q\n[hook]\npath = %q\n[health]\nfile = %q\n",
		e.host.DriverRoot, e.host.DevRoot, e.host.ProcRoot, e.host.SysRoot, filepath.Join(binDir, "gpu-hook"), filepath.Join(dir, "health.csv"))), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet, cdiDir, state := filepath.Join(dir, "kubelet"), filepath.Join(dir, "cdi"), filepath.Join(dir, "state")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plugin, "--kubeconfig", kubeconfig, "--node-name", "node-a", "--kubelet-dir", kubelet, "--cdi-dir", cdiDir, "--state-dir", state)
	cmd.Env = []string{"GPU_RUNTIME_CONFIG=" + config, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sockets := []string{filepath.Join(kubelet, "plugins_registry", "gpu.gpu-runtime.dev-reg.sock"), filepath.Join(kubelet, "plugins", "gpu.gpu-runtime.dev", "dra.sock")}
	deadline := time.Now().Add(60 * time.Second)
	for {
		up := true
		for _, s := range sockets {
			if fi, err := os.Stat(s); err != nil || fi.Mode()&os.ModeSocket == 0 {
				up = false
			}
		}
		if _, err := os.Stat(filepath.Join(state, "discovery-cache.csv")); up && err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no sockets or no host view within 60s; stderr:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || strings.Contains(stderr.String(), "level=error") {
		t.Errorf("after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	for _, s := range sockets {
		if _, err := os.Lstat(s); err == nil {
			t.Errorf("%s left after SIGTERM", s)
		}
	}
	if entries, _ := os.ReadDir(cdiDir); len(entries) != 0 {
		t.Errorf("CDI dir holds %v with no claim prepared", entries)
	}
	entries, _ := os.ReadDir(state)
	if len(entries) != 1 || entries[0].Name() != "discovery-cache.csv" {
		t.Errorf("state dir holds %v, want only its discovery cache", entries)
	}
}

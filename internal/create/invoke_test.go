package create

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// TestInvokeBrokenConfig: a configuration that does not parse takes down no container that
// needs nothing of it — a create whose container asks for no GPU, or a start — which run
// unchanged through the runtime its [runtime] section names, with a warning; a create that
// asks for GPUs fails with the configuration's error, before runc runs.
func TestInvokeBrokenConfig(t *testing.T) {
	e := newCreateEnv(t)
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[runtime]\nruntimes = [\"/bin/true\"]\n[driver]\nroot = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "GPU_RUNTIME_CONFIG" {
			return cfgPath
		}
		return ""
	}
	run := func(args ...string) (Outcome, string) {
		var stderr bytes.Buffer
		inv, argErr := oci.ParseArgs(args)
		out := Invoke(Process{Args: args, Inv: inv, ArgErr: argErr, Getenv: getenv, Self: "/nonexistent/gpu-runtime", Cwd: e.dir, Stderr: &stderr})
		out.Log.Close()
		return out, stderr.String()
	}
	plain, _ := e.bundle(t, nil, false)
	out, log := run("create", "--bundle", plain.Bundle, "c1")
	if out.Err != nil || out.Runtime != "/bin/true" || !strings.Contains(log, "config unusable; the container asks for no GPU, so it runs unchanged through /bin/true") {
		t.Errorf("a container without GPUs: runtime %q, error %v, log %q", out.Runtime, out.Err, log)
	}
	gpu, _ := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, false)
	before, _ := os.ReadFile(filepath.Join(gpu.Bundle, "config.json"))
	out, _ = run("create", "--bundle", gpu.Bundle, "c2")
	if out.Err == nil || !strings.Contains(out.Err.Error(), "driver.root must be a string, not an integer") {
		t.Errorf("a GPU container: error %v, want the configuration's", out.Err)
	}
	if after, _ := os.ReadFile(filepath.Join(gpu.Bundle, "config.json")); !bytes.Equal(before, after) {
		t.Error("the GPU container's spec was edited")
	}
	// start reads only [runtime]: the broken [driver] is none of its business.
	out, log = run("start", "c1")
	if out.Err != nil || out.Runtime != "/bin/true" || log != "" {
		t.Errorf("start: runtime %q, error %v, log %q", out.Runtime, out.Err, log)
	}
	if err := os.WriteFile(cfgPath, []byte("[runtime]\nruntimes = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, log = run("start", "c1"); !strings.Contains(log, "config unusable; using default runtimes for start") {
		t.Errorf("start with [runtime] broken: log %q", log)
	}
}

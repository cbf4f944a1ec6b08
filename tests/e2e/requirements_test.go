package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
)

// TestRequirementExhaustion: an image's requirement expression of 18,000 unknown-key
// factors (126 KB, under the exec string limit) cost the prestart hook — run in the engine's
// process tree — 8.7 GB and 56 s. Parsing is bounded and linear: the create fails at once
// with a message naming the variable, within 50 MB and 2 s for the whole create.
func TestRequirementExhaustion(t *testing.T) {
	e := newEnv(t, 1)
	expr := strings.Repeat("foo>=1,", 18000)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=" + expr}, "echo container-ran")
	start := time.Now()
	r := e.run(t, b)
	elapsed := time.Since(start)
	want := "malformed requirement NVIDIA_REQUIRE_X="
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "… (126000 bytes): 126000 bytes long, more than the 16384 allowed") {
		t.Fatalf("exit %d; stderr lacks the bounded message:\n%.2000s", r.code, r.stderr)
	}
	if elapsed > 2*time.Second {
		t.Errorf("create took %s, want under 2s", elapsed)
	}
	if r.maxRSS > 50<<20 {
		t.Errorf("peak RSS %d MiB, want under 50", r.maxRSS>>20)
	}
	t.Logf("failed in %s, peak RSS %d MiB", elapsed.Round(time.Millisecond), r.maxRSS>>20)
}

// TestRequirements runs the prestart check through real runc on a host with CUDA 12.4 and
// driver 550.54.15 (GPU 0: arch 8.0 tesla; GPU 1: arch 9.0 nvidia).
func TestRequirements(t *testing.T) {
	const cudaHint = ", please update your driver to a newer version, or use an earlier cuda container"
	testCases := []struct {
		description string
		env         []string
		wantErr     string // "" = container runs
	}{
		{description: "cuda>=99.0 fails with the message users know", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"},
			wantErr: "unsatisfied condition: cuda>=99.0" + cudaHint + " (host: cuda 12.4, driver 550.54.15"},
		{description: "cuda>=12.0 passes on a 12.4 host", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"}},
		{description: "OR: cuda>=99.0 cuda>=12.0 passes", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99.0 cuda>=12.0"}},
		{description: "driver>=999 fails", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_DRIVER=driver>=999"},
			wantErr: "unsatisfied condition: driver>=999 (host: cuda 12.4, driver 550.54.15"},
		{description: "NVIDIA_DISABLE_REQUIRE=true passes", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_DISABLE_REQUIRE=true"}},
		{description: "legacy image with CUDA_VERSION=99.0 fails", env: []string{"CUDA_VERSION=99.0"},
			wantErr: "unsatisfied condition: cuda>=99.0" + cudaHint},
		{description: "legacy image with CUDA_VERSION=12.0 runs", env: []string{"CUDA_VERSION=12.0.1"}},
		{description: "arch checked on every selected GPU", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_ARCH=arch>=9.0"},
			wantErr: "unsatisfied condition: arch>=9.0"},
		{description: "arch passes when only the 9.0 GPU is selected", env: []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"}},
		{description: "brand is case-insensitive", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_BRAND=brand=TESLA"}},
		{description: "malformed expression names it", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>>12"},
			wantErr: `malformed requirement NVIDIA_REQUIRE_CUDA="cuda>>12"`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 2)
			b := e.bundle(t, tc.env, "echo container-ran")
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if tc.wantErr == "" {
				if r.code != 0 || !strings.Contains(r.stdout, "container-ran") {
					t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
				}
				return
			}
			if r.code == 0 || strings.Contains(r.stdout, "container-ran") {
				t.Fatalf("container ran although %q should fail it", tc.wantErr)
			}
			if !strings.Contains(r.stderr, tc.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantErr, r.stderr)
			}
			// runc reports the hook's failure in its --log, where containerd reads it.
			if msg := lastJSONError(t, logPath); !strings.Contains(msg, tc.wantErr) {
				t.Errorf("runc's last log error lacks %q:\n%s", tc.wantErr, msg)
			}
		})
	}
}

// TestCUDAForwardCompat: an image's /usr/local/cuda/compat libcuda newer than the host
// driver is preferred by the loader; an older one is ignored.
func TestCUDAForwardCompat(t *testing.T) {
	testCases := []struct {
		description string
		version     string
		preferred   bool
	}{
		{"newer compat libcuda is preferred", "560.28.03", true},
		{"older compat libcuda is ignored", "535.104.05", false},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "cat /etc/ld.so.conf.d/*.conf 2>/dev/null; echo done")
			compat := filepath.Join(b, "rootfs/usr/local/cuda/compat")
			if err := fakehost.BuildCUDALibrary(filepath.Join(compat, "libcuda.so."+tc.version), "libcuda.so.1", 12060); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("libcuda.so."+tc.version, filepath.Join(compat, "libcuda.so.1")); err != nil {
				t.Fatal(err)
			}
			r := e.run(t, b)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := strings.Contains(r.stdout, "/usr/local/cuda/compat"); got != tc.preferred {
				t.Errorf("ld.so.conf.d entry present = %v, want %v:\n%s", got, tc.preferred, r.stdout)
			}
			entries, err := ldcache.Load(filepath.Join(b, "rootfs/etc/ld.so.cache"))
			if err != nil {
				t.Fatal(err)
			}
			first := ""
			for _, en := range entries {
				if en.Name == "libcuda.so.1" {
					first = en.Path
					break
				}
			}
			want := "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
			if tc.preferred {
				want = "/usr/local/cuda/compat/libcuda.so.1"
			}
			if first != want {
				t.Errorf("loader's first libcuda.so.1 = %q, want %q", first, want)
			}
		})
	}
}

// TestRequirementsAtCreate: a malformed NVIDIA_REQUIRE_* fails the create in gpu-runtime,
// before runc runs (the spec is left as it was, no container exists), and an unknown key's
// warning reaches the runtime log; every line about the container, the error included,
// carries its container_id.
func TestRequirementsAtCreate(t *testing.T) {
	e := newEnv(t, 1)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>>12"}, "echo container-ran")
	before, _ := os.ReadFile(filepath.Join(b, "config.json"))
	logPath := filepath.Join(t.TempDir(), "log.json")
	id := containerID(t)
	r := e.runtime(t, nil, "--log", logPath, "--log-format", "json", "create", "--bundle", b, id)
	defer e.runtime(t, nil, "delete", "--force", id)
	const want = `gpu-runtime: malformed requirement NVIDIA_REQUIRE_CUDA="cuda>>12": `
	if r.code == 0 || !strings.HasPrefix(r.stderr, want) {
		t.Fatalf("exit %d, stderr %q; want it to start with %q", r.code, r.stderr, want)
	}
	wantSpecUnchanged(t, b, before)
	if st := e.runtime(t, nil, "state", id); st.code == 0 {
		t.Errorf("runc created the container: %s", st.stdout)
	}
	lines := jsonLines(t, logPath)
	if len(lines) == 0 || lines[len(lines)-1]["level"] != "error" || lines[len(lines)-1]["container_id"] != id {
		t.Errorf("the error line lacks container_id %q: %v", id, lines)
	}

	b = e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0,foo>=1"}, "echo container-ran")
	logPath = filepath.Join(t.TempDir(), "log.json")
	r = e.run(t, b, "--log", logPath, "--log-format", "json")
	if r.code != 0 || !strings.Contains(r.stdout, "container-ran") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	found := false
	for _, l := range jsonLines(t, logPath) {
		msg, _ := l["msg"].(string)
		if l["level"] == "warning" && strings.HasPrefix(msg, `NVIDIA_REQUIRE_CUDA="cuda>=12.0,foo>=1": unknown key "foo" in factor "foo>=1"`) {
			found = true
			if l["container_id"] == nil {
				t.Errorf("warning without container_id: %v", l)
			}
		}
	}
	if !found {
		t.Errorf("no unknown-key warning in the runtime log:\n%v", jsonLines(t, logPath))
	}
}

// jsonLines reads a JSON-lines log.
func jsonLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	if len(bytes.TrimSpace(data)) == 0 {
		return nil // nothing logged
	}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

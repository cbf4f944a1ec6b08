package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// readSpec decodes a bundle's config.json.
func readSpec(t *testing.T, bundle string) specs.Spec {
	t.Helper()
	var s specs.Spec
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func hasDevice(s specs.Spec, path string, major, minor int64) bool {
	if s.Linux == nil {
		return false
	}
	for _, d := range s.Linux.Devices {
		if d.Path == path && d.Major == major && d.Minor == minor {
			return true
		}
	}
	return false
}

// TestBundleWrites: what a create writes into the bundle keeps what the engine set up.
func TestBundleWrites(t *testing.T) {
	e := newEnv(t, 2)

	t.Run("a stale temporary file of a killed create is removed", func(t *testing.T) {
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "true")
		dead := exec.Command("true")
		if err := dead.Run(); err != nil {
			t.Fatal(err)
		}
		stale := filepath.Join(b, fmt.Sprintf(".config.json.tmp-%d-1", dead.Process.Pid))
		writeFile(t, stale, strings.Repeat("x", 64<<10))
		if r := e.run(t, b); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if _, err := os.Stat(stale); err == nil {
			t.Error("the stale temporary file is still there")
		}
	})

	t.Run("a symlinked config.json stays a link, with its owner", func(t *testing.T) {
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, "true")
		linked := filepath.Join(t.TempDir(), "engine-config.json")
		if err := os.Rename(filepath.Join(b, "config.json"), linked); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(linked, 1234, 5678); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(linked, filepath.Join(b, "config.json")); err != nil {
			t.Fatal(err)
		}
		if r := e.run(t, b); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if fi, err := os.Lstat(filepath.Join(b, "config.json")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("config.json is no longer a symlink: %v %v", fi, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(linked, &st); err != nil || st.Uid != 1234 || st.Gid != 5678 {
			t.Errorf("owner %d:%d (%v), want 1234:5678", st.Uid, st.Gid, err)
		}
		if !hasDevice(readSpec(t, b), "/dev/nvidia1", 195, 1) {
			t.Error("the linked spec was not injected")
		}
	})

	t.Run("an unclean device path is replaced, not kept beside the GPU", func(t *testing.T) {
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, "stat -c '%t %T' /dev/nvidia1")
		editSpec(t, b, func(s map[string]any) {
			linux := s["linux"].(map[string]any)
			linux["devices"] = []any{map[string]any{"path": "/dev//nvidia1", "type": "c", "major": 1, "minor": 3}}
		})
		r := e.run(t, b)
		if r.code != 0 || strings.TrimSpace(r.stdout) != "c3 1" {
			t.Errorf("the container's /dev/nvidia1 is %q (exit %d), want 195:1 (c3 1)\n%s", r.stdout, r.code, r.stderr)
		}
	})

	t.Run("run --bundle '' is the current directory, as for runc", func(t *testing.T) {
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "ls /dev/nvidia0")
		id := containerID(t)
		cmd := exec.Command(filepath.Join(binDir, "gpu-runtime"), "--root", e.stateRoot, "run", "--bundle", "", id)
		cmd.Dir = b
		cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
		out, err := cmd.CombinedOutput()
		_ = e.runtime(t, nil, "delete", "--force", id)
		if err != nil || !strings.Contains(string(out), "/dev/nvidia0") {
			t.Errorf("run --bundle '': %v\n%s", err, out)
		}
	})

	t.Run("restore injects as create does", func(t *testing.T) {
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, "true")
		// There is no checkpoint: runc (or CRIU) fails after gpu-runtime has edited the spec.
		r := e.runtime(t, nil, "restore", "--image-path", t.TempDir(), "--bundle", b, containerID(t))
		if !hasDevice(readSpec(t, b), "/dev/nvidia1", 195, 1) {
			t.Errorf("restore did not inject (exit %d): %s", r.code, r.stderr)
		}
	})
}

// TestPassThroughWithHostileConfig: GPU_RUNTIME_CONFIG naming a FIFO, /dev/zero or a huge
// file neither hangs nor bloats state/delete/kill, which still reach runc (with a warning).
func TestPassThroughWithHostileConfig(t *testing.T) {
	e := newEnv(t, 1)
	fifo := filepath.Join(t.TempDir(), "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(t.TempDir(), "huge.toml")
	writeFile(t, huge, "")
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []string{fifo, "/dev/zero", huge} {
		e.config = cfg
		start := time.Now()
		r := e.runtime(t, nil, "state", "no-such-container")
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: state took %s", cfg, took)
		}
		// runc answers (it was reached): the container does not exist.
		if r.code == 0 || !strings.Contains(r.stderr, "container does not exist") || !strings.Contains(r.stderr, "config unusable; using default runtimes for state") {
			t.Errorf("%s: exit %d\n%s", cfg, r.code, r.stderr)
		}
		if r.maxRSS > 100<<20 {
			t.Errorf("%s: peak RSS %d MiB", cfg, r.maxRSS>>20)
		}
	}
}

package engines

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// podman is a private podman setup: storage root, run root, libpod tmp dir, volumes, events
// and network configs under dir, given by flags and by containers.conf/storage.conf files of
// its own (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF).
type podman struct {
	dir  string
	env  []string
	args []string // global flags
}

var podmanSetup shared[*podman]

func startedPodman(t *testing.T) *podman {
	t.Helper()
	requireTools(t, "podman", "conmon", "runc")
	return podmanSetup.get(t, setupPodman)
}

const podmanImage = "localhost/" + imageName

func setupPodman() (*podman, error) {
	dir := filepath.Join(workDir, "pdm")
	p := &podman{dir: dir}
	if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
		return nil, err
	}
	containersConf := fmt.Sprintf(`[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %q
tmp_dir = %q
static_dir = %q
volume_path = %q
[network]
network_config_dir = %q
`, filepath.Join(dir, "events.log"), filepath.Join(dir, "tmp"), filepath.Join(dir, "root", "libpod"),
		filepath.Join(dir, "root", "volumes"), filepath.Join(dir, "net"))
	storageConf := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "root"), filepath.Join(dir, "runroot"))
	for name, content := range map[string]string{"containers.conf": containersConf, "storage.conf": storageConf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	p.env = []string{"CONTAINERS_CONF=" + filepath.Join(dir, "containers.conf"), "CONTAINERS_STORAGE_CONF=" + filepath.Join(dir, "storage.conf")}
	p.args = []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--cgroup-manager", "cgroupfs", "--events-backend", "file"}
	atExit(func() {
		_ = p.quiet(60*time.Second, "rm", "--all", "--force", "--time", "0")
		if err := enginetest.Release(dir); err != nil {
			fmt.Fprintf(os.Stderr, "engines: clean up after podman: %v\n", err)
		}
	})
	if err := p.quiet(60*time.Second, "import", "--change", `CMD=["/bin/sh"]`, rootfsTar, podmanImage); err != nil {
		return nil, err
	}
	return p, nil
}

// quiet runs a podman command outside any test, for setup and cleanup.
func (p *podman) quiet(timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", append(append([]string{}, p.args...), args...)...)
	cmd.Env = append(os.Environ(), p.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// runProbe runs the probe with podman run and the given flags. podman's default rlimits exceed
// the hard limits here and are refused without CAP_SYS_RESOURCE, hence the --ulimit flags.
func (p *podman) runProbe(t *testing.T, flags ...string) result {
	t.Helper()
	var cidFile string
	return p.runProbeCid(t, &cidFile, flags...)
}

// runProbeCid is runProbe that sets *cidFile to the file podman writes the container's id to.
func (p *podman) runProbeCid(t *testing.T, cidFile *string, flags ...string) result {
	t.Helper()
	return p.runScriptCid(t, cidFile, probe, flags...)
}

// runScriptCid is runProbeCid running script instead of the probe.
func (p *podman) runScriptCid(t *testing.T, cidFile *string, script string, flags ...string) result {
	t.Helper()
	name := containerName()
	*cidFile = filepath.Join(t.TempDir(), "cid")
	t.Cleanup(func() {
		_ = p.quiet(30*time.Second, "rm", "--force", "--time", "0", name)
		// What podman's cleanup failed to delete from runc (see TestPodmanCleanup), so that
		// the host keeps no state of the suite's containers.
		data, err := os.ReadFile(*cidFile)
		if cid := strings.TrimSpace(string(data)); err == nil && cid != "" && !strings.ContainsAny(cid, "/.") {
			if _, err := os.Stat(filepath.Join("/run/runc", cid)); err == nil {
				_ = exec.Command("runc", "delete", "--force", cid).Run()
			}
		}
	})
	args := append(append([]string{}, p.args...), "run", "--rm", "--name", name, "--cidfile", *cidFile, "--network", "none",
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096", "--cgroup-parent", "/"+cgroupParent("podman"))
	args = append(append(args, flags...), podmanImage, "sh", "-c", script)
	return runCmd(t, 90*time.Second, p.env, "", "podman", args...)
}

// TestPodman: podman run --runtime gpu-runtime (case 5).
func TestPodman(t *testing.T) {
	p := startedPodman(t)
	testCases := []engineCase{
		{description: "--runtime gpu-runtime, NVIDIA_VISIBLE_DEVICES=0 gets GPU 0 only",
			flags: []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=0"}, gpus: []int{0}},
		{description: "--runtime gpu-runtime, NVIDIA_VISIBLE_DEVICES=1,0 gets both GPUs",
			flags: []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=1,0"}, gpus: []int{0, 1}},
		{description: "--runtime gpu-runtime without a request gets no GPU",
			flags: []string{"--runtime", wrapper}},
		// podman's default here is crun, which refuses the hybrid cgroup layout of these machines.
		{description: "--runtime runc ignores NVIDIA_VISIBLE_DEVICES",
			flags: []string{"--runtime", "runc", "-e", "NVIDIA_VISIBLE_DEVICES=0"}},
		{description: "unknown device: podman shows gpu-runtime's error",
			flags:   []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=7"},
			wantErr: `unknown device "7" in NVIDIA_VISIBLE_DEVICES`},
	}
	runEngineCases(t, "podman run", p.runProbe, testCases)
}

// TestPodmanCleanup: after `podman run --rm`, the container is gone from the OCI runtime too.
// podman removes it with `<runtime> delete --force ID` run from conmon's exit command with no
// PATH in its environment (and without --runtime-flag values), so the runtime must find runc
// without PATH; otherwise runc's state (/run/runc/ID: podman passes no --root) stays behind for
// every container.
func TestPodmanCleanup(t *testing.T) {
	p := startedPodman(t)
	for _, runtime := range []string{"runc", wrapper} {
		name := map[string]string{"runc": "runc", wrapper: "gpu-runtime"}[runtime]
		t.Run(name+" deletes runc's state", func(t *testing.T) {
			var cidFile string
			r := p.runProbeCid(t, &cidFile, "--runtime", runtime, "-e", "NVIDIA_VISIBLE_DEVICES=0")
			if r.Code != 0 {
				t.Fatalf("podman run: %s", r)
			}
			cid, err := os.ReadFile(cidFile)
			if err != nil || len(strings.TrimSpace(string(cid))) < 12 {
				t.Fatalf("podman run --cidfile: %q, %v", cid, err)
			}
			state := filepath.Join("/run/runc", strings.TrimSpace(string(cid)))
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, err := os.Stat(state); errors.Is(err, fs.ErrNotExist) {
					return
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			logRuntimeTail(t)
			t.Errorf("%s still exists 10s after podman run --rm returned: podman's cleanup (%s delete --force, run without PATH) did not delete the container from runc", state, name)
		})
	}
}

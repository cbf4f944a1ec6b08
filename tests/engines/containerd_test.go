package engines

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ctrNamespace is the containerd namespace of the ctr tests; the CRI uses k8s.io.
const ctrNamespace = "gre"

// containerd is a private containerd: main config, drop-in, root, state, runc state and grpc
// socket under dir.
type containerd struct {
	dir, config, dropIn, sock, crictlConfig string
}

var containerdDaemon shared[*containerd]

func startedContainerd(t *testing.T) *containerd {
	t.Helper()
	requireTools(t, "containerd", "ctr", "containerd-shim-runc-v2", "runc")
	return containerdDaemon.get(t, startContainerd)
}

// containerdMain is the main config the test writes before running gpu-ctk: private paths,
// and what the CRI needs on these machines (see /work/shared/reference/test-machines.md):
// restrict_oom_score_adj (the sandbox's oom_score_adj -998 is refused without
// CAP_SYS_RESOURCE), a local sandbox image, and CNI directories of its own (pods use the
// host network and need no CNI). runc's state goes under dir too (options.Root); gpu-ctk gives
// the gpu runtime the runc runtime's options.
const containerdMain = `version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[4]q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %[6]q
      conf_dir = %[6]q
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[7]q
`

// startContainerd writes containerd's main config, registers gpu-runtime with gpu-ctk,
// starts containerd and imports the images into the CRI's and the ctr tests' namespaces.
func startContainerd() (*containerd, error) {
	dir := filepath.Join(workDir, "ctd")
	c := &containerd{
		dir:          dir,
		config:       filepath.Join(dir, "config.toml"),
		dropIn:       filepath.Join(dir, "conf.d", "99-gpu-runtime.toml"),
		sock:         filepath.Join(dir, "containerd.sock"),
		crictlConfig: filepath.Join(dir, "crictl.yaml"),
	}
	for _, d := range []string{"cni", "pods"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	main := fmt.Sprintf(containerdMain, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock,
		filepath.Join(dir, "opt"), containerdPause, filepath.Join(dir, "cni"), filepath.Join(dir, "runc"))
	if err := os.WriteFile(c.config, []byte(main), 0o644); err != nil {
		return nil, err
	}
	args := []string{"runtime", "configure", "--runtime=containerd", "--config", c.config, "--drop-in", c.dropIn, "--runtime-path", wrapper}
	if out, err := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gpu-ctk %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	crictlYAML := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n", c.sock, c.sock)
	if err := os.WriteFile(c.crictlConfig, []byte(crictlYAML), 0o644); err != nil {
		return nil, err
	}

	ready := func() error { return c.quiet(10*time.Second, "version") }
	daemon, err := startDaemon("containerd", dir, nil, ready, "containerd", "--config", c.config)
	if err != nil {
		return nil, err
	}
	daemon.BeforeStop = c.removeAll
	for _, ns := range []string{"k8s.io", ctrNamespace} {
		if err := c.quiet(60*time.Second, "-n", ns, "images", "import", imageArchive); err != nil {
			return nil, fmt.Errorf("import the images: %w", err)
		}
	}
	return c, nil
}

// quiet runs a ctr command outside any test, for start and stop.
func (c *containerd) quiet(timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.sock}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// removeAll removes the pods and containers still there, while containerd runs.
func (c *containerd) removeAll() {
	if crictl, err := findCrictl(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, crictl, "--config", c.crictlConfig, "rmp", "--all", "--force").Run()
	}
	out, _ := exec.Command("ctr", "--address", c.sock, "-n", ctrNamespace, "containers", "list", "-q").Output()
	for _, id := range strings.Fields(string(out)) {
		_ = c.quiet(30*time.Second, "-n", ctrNamespace, "tasks", "delete", "--force", id)
		_ = c.quiet(30*time.Second, "-n", ctrNamespace, "containers", "delete", id)
	}
}

// ctrRun runs the probe with `ctr run --rm`, with extra ctr run flags.
func (c *containerd) ctrRun(t *testing.T, flags ...string) result {
	t.Helper()
	id := containerName()
	t.Cleanup(func() {
		_ = c.quiet(30*time.Second, "-n", ctrNamespace, "tasks", "delete", "--force", id)
		_ = c.quiet(30*time.Second, "-n", ctrNamespace, "containers", "delete", id)
	})
	// ctr's default spec has no cgroup mount: add one, as docker and the CRI do, so that the
	// probe can read the container's device cgroup rules.
	args := []string{"--address", c.sock, "-n", ctrNamespace, "run", "--rm", "--runtime", "io.containerd.runc.v2",
		"--cgroup", "/" + cgroupParent("ctr") + "/" + id,
		"--mount", "type=cgroup,src=cgroup,dst=/sys/fs/cgroup,options=ro:nosuid:noexec:nodev"}
	args = append(append(args, flags...), containerdImage, id, "sh", "-c", probe)
	return runCmd(t, 90*time.Second, nil, "", "ctr", args...)
}

// TestContainerdCtr: ctr run with gpu-runtime as the runc binary of the runc shim (case 4).
func TestContainerdCtr(t *testing.T) {
	c := startedContainerd(t)
	testCases := []engineCase{
		{description: "--runc-binary gpu-runtime, NVIDIA_VISIBLE_DEVICES=0 gets GPU 0 only",
			flags: []string{"--runc-binary", wrapper, "--env", "NVIDIA_VISIBLE_DEVICES=0"}, gpus: []int{0}},
		{description: "--runc-binary gpu-runtime, NVIDIA_VISIBLE_DEVICES=all gets both GPUs",
			flags: []string{"--runc-binary", wrapper, "--env", "NVIDIA_VISIBLE_DEVICES=all"}, gpus: []int{0, 1}},
		{description: "--runc-binary gpu-runtime without a request gets no GPU",
			flags: []string{"--runc-binary", wrapper}},
		{description: "plain runc ignores NVIDIA_VISIBLE_DEVICES",
			flags: []string{"--env", "NVIDIA_VISIBLE_DEVICES=0"}},
		{description: "unknown device: ctr shows gpu-runtime's error from runc's JSON log",
			flags:   []string{"--runc-binary", wrapper, "--env", "NVIDIA_VISIBLE_DEVICES=7"},
			wantErr: `unknown device "7" in NVIDIA_VISIBLE_DEVICES`},
	}
	runEngineCases(t, "ctr run", c.ctrRun, testCases)
}

// TestContainerdCRI: the Kubernetes path. Pods of runtime handler gpu — the runtime class
// gpu-ctk's drop-in defines — get the GPUs their containers ask for through the CRI, driven by
// crictl (case 4).
func TestContainerdCRI(t *testing.T) {
	c := startedContainerd(t)
	cri := &criClient{c: c, crictl: requireCrictl(t), pods: map[string]string{}}
	t.Cleanup(func() { cri.removePods(t) })

	t.Run("the CRI sees gpu-ctk's runtime and keeps config.toml's CRI settings", func(t *testing.T) {
		var info struct {
			Config struct {
				Containerd struct {
					Runtimes map[string]struct {
						RuntimeType string         `json:"runtimeType"`
						Options     map[string]any `json:"options"`
					} `json:"runtimes"`
				} `json:"containerd"`
				SandboxImage        string `json:"sandboxImage"`
				RestrictOOMScoreAdj bool   `json:"restrictOOMScoreAdj"`
			} `json:"config"`
		}
		out := cri.run(t, "info")
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("decode crictl info: %v\n%s", err, out)
		}
		gpu, ok := info.Config.Containerd.Runtimes["gpu"]
		if !ok || gpu.RuntimeType != "io.containerd.runc.v2" || gpu.Options["BinaryName"] != wrapper {
			t.Errorf("CRI runtime gpu = %+v (present %v), want runtime_type io.containerd.runc.v2 and BinaryName %q", gpu, ok, wrapper)
		}
		if gpu.Options["Root"] != filepath.Join(c.dir, "runc") {
			t.Errorf("CRI runtime gpu has options %v: want runc's Root %q, copied from config.toml's runc runtime", gpu.Options, filepath.Join(c.dir, "runc"))
		}
		if _, ok := info.Config.Containerd.Runtimes["runc"]; !ok {
			t.Errorf("CRI runtime runc lost next to gpu-ctk's drop-in")
		}
		if info.Config.SandboxImage != containerdPause || !info.Config.RestrictOOMScoreAdj {
			t.Errorf("CRI settings of config.toml lost: sandbox_image %q, restrict_oom_score_adj %v", info.Config.SandboxImage, info.Config.RestrictOOMScoreAdj)
		}
	})

	testCases := []struct {
		description string
		handler     string // the pod's runtime handler; "" for containerd's default (runc)
		env         map[string]string
		gpus        []int
		wantErr     string
	}{
		{description: "runtime gpu, NVIDIA_VISIBLE_DEVICES=1 gets GPU 1 only", handler: "gpu",
			env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "1"}, gpus: []int{1}},
		{description: "runtime gpu, NVIDIA_VISIBLE_DEVICES=all gets both GPUs", handler: "gpu",
			env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}, gpus: []int{0, 1}},
		{description: "runtime gpu without a request gets no GPU", handler: "gpu"},
		{description: "the default runtime (runc) ignores NVIDIA_VISIBLE_DEVICES",
			env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "1"}},
		{description: "runtime gpu, unsatisfied requirement fails crictl start", handler: "gpu",
			env:     map[string]string{"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_REQUIRE_CUDA": "cuda>=99.0"},
			wantErr: "unsatisfied condition: cuda>=99.0"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			id := cri.container(t, tc.handler, tc.env)
			r := cri.runCode(t, "start", id)
			if tc.wantErr != "" {
				if r.Code == 0 {
					t.Fatalf("crictl start succeeded, want %q: %s", tc.wantErr, r)
				}
				if !strings.Contains(r.Stderr, tc.wantErr) {
					t.Errorf("crictl start's error lacks %q:\n%s", tc.wantErr, r.Stderr)
				}
				return
			}
			if r.Code != 0 {
				logRuntimeTail(t)
				t.Fatalf("crictl start: %s", r)
			}
			cri.waitExited(t, id)
			wantGPUs(t, cri.run(t, "logs", id), tc.gpus...)
		})
	}
}

// criClient runs crictl against the private containerd and keeps one pod per runtime handler.
type criClient struct {
	c      *containerd
	crictl string
	pods   map[string]string // runtime handler -> pod id
	seq    int
}

func (cri *criClient) runCode(t *testing.T, args ...string) result {
	t.Helper()
	return runCmd(t, 90*time.Second, nil, "", cri.crictl, append([]string{"--config", cri.c.crictlConfig}, args...)...)
}

func (cri *criClient) run(t *testing.T, args ...string) string {
	t.Helper()
	r := cri.runCode(t, args...)
	if r.Code != 0 {
		logRuntimeTail(t)
		t.Fatalf("crictl %s: %s", strings.Join(args, " "), r)
	}
	return strings.TrimSpace(r.Stdout)
}

// writeJSON writes v to a file under the containerd's directory and returns its path.
func (cri *criClient) writeJSON(t *testing.T, name string, v any) string {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(cri.c.dir, "pods", name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// podConfig writes the sandbox config of the handler's pod: host network, so no CNI is needed.
func (cri *criClient) podConfig(t *testing.T, handler string) string {
	t.Helper()
	name := "pod-default"
	if handler != "" {
		name = "pod-" + handler
	}
	logDir := filepath.Join(cri.c.dir, "pods", name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return cri.writeJSON(t, name+".json", map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "gre", "uid": fmt.Sprintf("%s-%d", name, os.Getpid()), "attempt": 0},
		"log_directory": logDir,
		"linux": map[string]any{
			"cgroup_parent":    "/" + cgroupParent("cri"),
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}},
		},
	})
}

// pod returns the pod of the runtime handler ("" for the default runtime), started with
// `crictl runp [--runtime handler]` on first use; removePods removes them.
func (cri *criClient) pod(t *testing.T, handler string) string {
	t.Helper()
	if id, ok := cri.pods[handler]; ok {
		return id
	}
	args := []string{"runp"}
	if handler != "" {
		args = append(args, "--runtime", handler)
	}
	id := cri.run(t, append(args, cri.podConfig(t, handler))...)
	cri.pods[handler] = id
	return id
}

// removePods stops and removes the pods.
func (cri *criClient) removePods(t *testing.T) {
	for _, id := range cri.pods {
		for _, verb := range []string{"stopp", "rmp"} {
			if r := cri.runCode(t, verb, id); r.Code != 0 {
				t.Errorf("crictl %s %s: %s", verb, id, r)
			}
		}
	}
}

// container creates, in the handler's pod, a container running the probe with env.
func (cri *criClient) container(t *testing.T, handler string, env map[string]string) string {
	t.Helper()
	pod := cri.pod(t, handler)
	cri.seq++
	name := fmt.Sprintf("probe-%d", cri.seq)
	var envs []map[string]string
	for k, v := range env {
		envs = append(envs, map[string]string{"key": k, "value": v})
	}
	cfg := cri.writeJSON(t, name+".json", map[string]any{
		"metadata": map[string]any{"name": name},
		"image":    map[string]any{"image": containerdImage},
		"command":  []string{"/bin/sh", "-c", probe},
		"envs":     envs,
		"log_path": name + ".log",
		"linux":    map[string]any{},
	})
	return cri.run(t, "create", pod, cfg, cri.podConfig(t, handler))
}

// waitExited waits until the container has exited, and checks that it exited 0.
func (cri *criClient) waitExited(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st struct {
			Status struct {
				State    string `json:"state"`
				ExitCode int    `json:"exitCode"`
			} `json:"status"`
		}
		out := cri.run(t, "inspect", "-o", "json", id)
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("decode crictl inspect: %v\n%s", err, out)
		}
		if st.Status.State == "CONTAINER_EXITED" {
			if st.Status.ExitCode != 0 {
				t.Fatalf("container exited %d; crictl logs: %s", st.Status.ExitCode, cri.runCode(t, "logs", id))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %s after 60s", id, st.Status.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// findCrictl returns crictl: the build cached by scripts/install-engine-deps.sh, else PATH.
func findCrictl() (string, error) {
	if repoRoot != "" {
		p := filepath.Join(repoRoot, ".cache", "crictl", "crictl")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("crictl")
}

var crictlBuild shared[string]

// requireCrictl returns crictl, building it once (scripts/install-engine-deps.sh --crictl,
// about a minute, needs the Go module proxy) when it is missing.
func requireCrictl(t *testing.T) string {
	t.Helper()
	if p, err := findCrictl(); err == nil {
		return p
	}
	crictlBuild.once.Do(func() {
		out, err := exec.Command(filepath.Join(repoRoot, "scripts", "install-engine-deps.sh"), "--crictl").CombinedOutput()
		if err != nil {
			crictlBuild.err = fmt.Errorf("%v: %s", err, out)
			return
		}
		crictlBuild.val, crictlBuild.err = findCrictl()
	})
	if crictlBuild.err != nil {
		prerequisite(t, "crictl is not installed and building it failed: %v", crictlBuild.err)
	}
	return crictlBuild.val
}

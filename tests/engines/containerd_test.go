package engines

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// ctrNamespace is the containerd namespace of the ctr tests; the CRI uses k8s.io.
const ctrNamespace = "gre"

// containerd is a private containerd: main config, drop-in, root, state, runc state and grpc
// socket under dir. ctr is its client; cgroup names the parent cgroup of its pods
// (cgroupParent).
type containerd struct {
	dir, config, dropIn, sock, crictlConfig string
	ctr, cgroup                             string
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
		ctr:          "ctr",
		cgroup:       "cri",
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
		return nil, fmt.Errorf("gpu-ctk %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.writeCrictlConfig(); err != nil {
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

// writeCrictlConfig writes the config that points crictl at this containerd.
func (c *containerd) writeCrictlConfig() error {
	crictlYAML := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n", c.sock, c.sock)
	return os.WriteFile(c.crictlConfig, []byte(crictlYAML), 0o644)
}

// quiet runs a ctr command outside any test, for start and stop.
func (c *containerd) quiet(timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.ctr, append([]string{"--address", c.sock}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
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
	out, _ := exec.Command(c.ctr, "--address", c.sock, "-n", ctrNamespace, "containers", "list", "-q").Output()
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
						RuntimeType          string         `json:"runtimeType"`
						Options              map[string]any `json:"options"`
						ContainerAnnotations []string       `json:"ContainerAnnotations"`
						PodAnnotations       []string       `json:"PodAnnotations"`
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
		// The CRI passes the device plugin's CDI annotations of a container (not of a pod: see
		// TestContainerdCRICDIAnnotations) to this runtime only.
		if len(gpu.ContainerAnnotations) != 1 || gpu.ContainerAnnotations[0] != "cdi.k8s.io/*" || len(gpu.PodAnnotations) != 0 {
			t.Errorf("CRI runtime gpu passes container annotations %q and pod annotations %q, want [cdi.k8s.io/*] and none", gpu.ContainerAnnotations, gpu.PodAnnotations)
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
			out := cri.runProbe(t, handlerPod(tc.handler), criContainer{env: tc.env}, tc.wantErr)
			if tc.wantErr == "" {
				wantGPUs(t, out, tc.gpus...)
			}
		})
	}
}

// criClient runs crictl against a private containerd and keeps the pods it started.
type criClient struct {
	c      *containerd
	crictl string
	pods   map[string]string // pod name -> pod id
}

// criSeq numbers the CRI containers of the suite: a later test's pod of the same name has the
// same log directory, where a container name used before would find the old log.
var criSeq atomic.Int64

// criPod is a pod sandbox: its name, runtime handler ("" for containerd's default, runc) and
// annotations.
type criPod struct {
	name, handler string
	annotations   map[string]string
}

// handlerPod is the plain pod of a runtime handler.
func handlerPod(handler string) criPod {
	if handler == "" {
		return criPod{name: "pod-default"}
	}
	return criPod{name: "pod-" + handler, handler: handler}
}

// criContainer is a container of a pod: its environment, annotations, CRI CDI_devices (the
// qualified names), and the script it runs (the probe when "").
type criContainer struct {
	env         map[string]string
	annotations map[string]string
	cdiDevices  []string
	script      string
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

// podConfig writes the sandbox config of a pod: host network, so no CNI is needed.
func (cri *criClient) podConfig(t *testing.T, p criPod) string {
	t.Helper()
	logDir := filepath.Join(cri.c.dir, "pods", p.name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return cri.writeJSON(t, p.name+".json", map[string]any{
		"metadata":      map[string]any{"name": p.name, "namespace": "gre", "uid": fmt.Sprintf("%s-%d", p.name, os.Getpid()), "attempt": 0},
		"log_directory": logDir,
		"annotations":   p.annotations,
		"linux": map[string]any{
			"cgroup_parent":    "/" + cgroupParent(cri.c.cgroup),
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}},
		},
	})
}

// pod returns the pod's id, started with `crictl runp [--runtime handler]` on first use;
// removePods removes them.
func (cri *criClient) pod(t *testing.T, p criPod) string {
	t.Helper()
	if id, ok := cri.pods[p.name]; ok {
		return id
	}
	args := []string{"runp"}
	if p.handler != "" {
		args = append(args, "--runtime", p.handler)
	}
	id := cri.run(t, append(args, cri.podConfig(t, p))...)
	cri.pods[p.name] = id
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

// create runs `crictl create` of the container in the pod; it returns the container's id
// and crictl's result.
func (cri *criClient) create(t *testing.T, p criPod, c criContainer) (string, result) {
	t.Helper()
	pod := cri.pod(t, p)
	name := fmt.Sprintf("probe-%d", criSeq.Add(1))
	var envs []map[string]string
	for k, v := range c.env {
		envs = append(envs, map[string]string{"key": k, "value": v})
	}
	// CDI_devices: the CRI field (cri-api ContainerConfig.CDI_devices) the device plugin's
	// cdi-cri strategy and DRA drivers fill; containerd 2.x injects what it names.
	var cdiDevices []map[string]string
	for _, d := range c.cdiDevices {
		cdiDevices = append(cdiDevices, map[string]string{"name": d})
	}
	script := c.script
	if script == "" {
		script = probe
	}
	cfg := cri.writeJSON(t, name+".json", map[string]any{
		"metadata":    map[string]any{"name": name},
		"image":       map[string]any{"image": containerdImage},
		"command":     []string{"/bin/sh", "-c", script},
		"envs":        envs,
		"annotations": c.annotations,
		"CDI_devices": cdiDevices,
		"log_path":    name + ".log",
		"linux":       map[string]any{},
	})
	r := cri.runCode(t, "create", pod, cfg, cri.podConfig(t, p))
	return strings.TrimSpace(r.Stdout), r
}

// runProbe runs the container in the pod to completion (create, start, wait for exit 0) and
// returns its output. With wantErr, it checks that crictl create or start fails with that
// message instead, and returns "".
func (cri *criClient) runProbe(t *testing.T, p criPod, c criContainer, wantErr string) string {
	t.Helper()
	id, r := cri.create(t, p, c)
	if r.Code == 0 {
		r = cri.runCode(t, "start", id)
	}
	if wantErr != "" {
		if r.Code == 0 {
			t.Fatalf("crictl create and start succeeded, want %q: %s", wantErr, r)
		}
		// crictl quotes the runtime's message, escaping its quotes.
		if !strings.Contains(r.Stderr, wantErr) && !strings.Contains(r.Stderr, strings.ReplaceAll(wantErr, `"`, `\"`)) {
			t.Errorf("crictl's error lacks %q:\n%s", wantErr, r.Stderr)
		}
		return ""
	}
	if r.Code != 0 {
		logRuntimeTail(t)
		t.Fatalf("crictl create or start: %s", r)
	}
	cri.waitExited(t, id)
	return cri.run(t, "logs", id)
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
			crictlBuild.err = fmt.Errorf("%w: %s", err, out)
			return
		}
		crictlBuild.val, crictlBuild.err = findCrictl()
	})
	if crictlBuild.err != nil {
		prerequisite(t, "crictl is not installed and building it failed: %v", crictlBuild.err)
	}
	return crictlBuild.val
}

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

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// dockerd (Debian's docker.io or docker-ce) and its client, named by path (enginetest).
var (
	dockerdBin = enginetest.Dockerd()
	dockerBin  = enginetest.DockerClient
)

// dockerd is a private dockerd: its own daemon.json, data root, exec root, pid file and
// socket under dir, no bridge and no iptables (containers run with --network none), and
// nvidia-container-runtime-hook on its PATH as packaging installs it.
type dockerd struct {
	dir, config, sock string
}

// The two dockerds: gpu registered as an extra runtime (docker run --runtime=gpu), and gpu
// as the default runtime (gpu-ctk --set-as-default). Each is started once per test binary.
var dockerFlagDaemon, dockerDefaultDaemon shared[*dockerd]

func dockerWithRuntime(t *testing.T) *dockerd {
	t.Helper()
	requireTools(t, dockerdBin, dockerBin, "containerd", "containerd-shim-runc-v2")
	return dockerFlagDaemon.get(t, func() (*dockerd, error) { return startDockerd("dk", nil, nil) })
}

func dockerWithDefault(t *testing.T) *dockerd {
	t.Helper()
	requireTools(t, dockerdBin, dockerBin, "containerd", "containerd-shim-runc-v2")
	return dockerDefaultDaemon.get(t, func() (*dockerd, error) { return startDockerd("dkd", nil, []string{"--set-as-default"}) })
}

// dockerdKeys are settings every private dockerd needs: deprecated-key-path keeps dockerd
// 20.10 from writing its identity key to /etc/docker/key.json; shutdown-timeout bounds the
// stop; cgroup-parent keeps containers' cgroups under one the suite removes.
func dockerdKeys(dir, name string) map[string]any {
	return map[string]any{"deprecated-key-path": filepath.Join(dir, "key.json"), "shutdown-timeout": 5, "cgroup-parent": "/" + cgroupParent(name)}
}

// startDockerd writes initial as daemon.json (nil: the suite's own, with keys gpu-ctk must
// keep), configures it with gpu-ctk runtime configure --runtime=docker and configureArgs,
// starts dockerd on it and imports img:1.
func startDockerd(name string, initial func(dir string) []byte, configureArgs []string) (*dockerd, error) {
	d := &dockerd{dir: filepath.Join(workDir, name)}
	d.config = filepath.Join(d.dir, "daemon.json")
	d.sock = filepath.Join(d.dir, "docker.sock")
	if err := os.MkdirAll(filepath.Join(d.dir, "client"), 0o755); err != nil {
		return nil, err
	}
	// Settings gpu-ctk must keep (dockerdKeys, and a log level).
	content := []byte(fmt.Sprintf(`{"deprecated-key-path": %q, "shutdown-timeout": 5, "log-level": "info", "cgroup-parent": %q}`,
		filepath.Join(d.dir, "key.json"), "/"+cgroupParent(name)))
	if initial != nil {
		content = initial(d.dir)
	}
	if err := os.WriteFile(d.config, content, 0o644); err != nil {
		return nil, err
	}
	args := append([]string{"runtime", "configure", "--runtime=docker", "--config", d.config, "--runtime-path", wrapper}, configureArgs...)
	if out, err := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gpu-ctk %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	ready := func() error { return d.quiet(10*time.Second, "", "version") }
	daemon, err := startDaemon("dockerd", d.dir, []string{"PATH=" + hookDir + ":" + os.Getenv("PATH")}, ready,
		dockerdBin, "--config-file", d.config,
		"--data-root", filepath.Join(d.dir, "data"), "--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "docker.pid"), "-H", "unix://"+d.sock,
		"--bridge", "none", "--iptables=false", "--ip6tables=false")
	if err != nil {
		return nil, err
	}
	daemon.BeforeStop = func() {
		out, _ := exec.Command(dockerBin, append(d.globalArgs(), "ps", "-aq")...).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = d.quiet(30*time.Second, "", append([]string{"rm", "-f"}, ids...)...)
		}
	}
	if err := d.quiet(60*time.Second, rootfsTar, "import", "--change", `CMD ["/bin/sh"]`, "-", imageName); err != nil {
		return nil, fmt.Errorf("docker import: %w", err)
	}
	return d, nil
}

func (d *dockerd) globalArgs() []string { return []string{"-H", "unix://" + d.sock} }

func (d *dockerd) clientEnv() []string {
	return []string{"DOCKER_CONFIG=" + filepath.Join(d.dir, "client")}
}

// quiet runs a docker command outside any test, for start and stop.
func (d *dockerd) quiet(timeout time.Duration, stdin string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, dockerBin, append(d.globalArgs(), args...)...)
	cmd.Env = append(os.Environ(), d.clientEnv()...)
	if stdin != "" {
		f, err := os.Open(stdin)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdin = f
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (d *dockerd) docker(t *testing.T, args ...string) result {
	t.Helper()
	return runCmd(t, 90*time.Second, d.clientEnv(), "", dockerBin, append(d.globalArgs(), args...)...)
}

var containerSeq atomic.Int64

func containerName() string {
	return fmt.Sprintf("gre-%d-%d", os.Getpid(), containerSeq.Add(1))
}

// runProbe runs the probe in a new container of img:1 with the given docker run flags.
func (d *dockerd) runProbe(t *testing.T, flags ...string) result {
	t.Helper()
	name := containerName()
	t.Cleanup(func() { _ = d.quiet(30*time.Second, "", "rm", "-f", name) })
	args := append([]string{"run", "--rm", "--name", name, "--network", "none"}, flags...)
	return d.docker(t, append(args, imageName, "sh", "-c", probe)...)
}

// info returns dockerd's runtimes and default runtime.
func (d *dockerd) info(t *testing.T) (map[string]struct{ Path string }, string) {
	t.Helper()
	r := d.docker(t, "info", "--format", "{{json .Runtimes}}\n{{.DefaultRuntime}}")
	lines := strings.SplitN(strings.TrimSpace(r.Stdout), "\n", 2)
	if r.Code != 0 || len(lines) != 2 {
		t.Fatalf("docker info: %s", r)
	}
	var runtimes map[string]struct{ Path string }
	if err := json.Unmarshal([]byte(lines[0]), &runtimes); err != nil {
		t.Fatalf("decode docker info's runtimes %q: %v", lines[0], err)
	}
	return runtimes, strings.TrimSpace(lines[1])
}

// checkDaemonJSON checks what gpu-ctk wrote: the runtime, the default runtime, and the keys
// it had to keep.
func checkDaemonJSON(t *testing.T, d *dockerd, wantDefault string) {
	t.Helper()
	data, err := os.ReadFile(d.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Runtimes          map[string]struct{ Path string }
		DefaultRuntime    string `json:"default-runtime"`
		DeprecatedKeyPath string `json:"deprecated-key-path"`
		ShutdownTimeout   int    `json:"shutdown-timeout"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("decode %s: %v\n%s", d.config, err, data)
	}
	if cfg.Runtimes["gpu"].Path != wrapper || cfg.DefaultRuntime != wantDefault || cfg.DeprecatedKeyPath == "" || cfg.ShutdownTimeout != 5 {
		t.Errorf("daemon.json written by gpu-ctk: want runtimes.gpu.path %q, default-runtime %q and the earlier keys kept; got:\n%s", wrapper, wantDefault, data)
	}
	runtimes, def := d.info(t)
	if runtimes["gpu"].Path != wrapper {
		t.Errorf("dockerd's runtime gpu has path %q, want %q (runtimes: %v)", runtimes["gpu"].Path, wrapper, runtimes)
	}
	want := wantDefault
	if want == "" {
		want = "runc" // dockerd's own default
	}
	if def != want {
		t.Errorf("dockerd's default runtime is %q, want %q", def, want)
	}
}

// TestDockerRuntimeFlag: gpu registered in daemon.json by `gpu-ctk runtime configure
// --runtime=docker`, selected per container with --runtime=gpu (case 1).
func TestDockerRuntimeFlag(t *testing.T) {
	d := dockerWithRuntime(t)
	t.Run("daemon.json and dockerd's runtimes", func(t *testing.T) {
		checkDaemonJSON(t, d, "")
	})
	testCases := []engineCase{
		{description: "--runtime=gpu -e NVIDIA_VISIBLE_DEVICES=1 gets GPU 1 only", flags: []string{"--runtime=gpu", "-e", "NVIDIA_VISIBLE_DEVICES=1"}, gpus: []int{1}},
		{description: "--runtime=gpu --gpus all gets both GPUs", flags: []string{"--runtime=gpu", "--gpus", "all"}, gpus: []int{0, 1}},
		{description: "--runtime=gpu without a request gets no GPU", flags: []string{"--runtime=gpu"}},
		{description: "the default runtime (runc) ignores NVIDIA_VISIBLE_DEVICES", flags: []string{"-e", "NVIDIA_VISIBLE_DEVICES=1"}},
	}
	runEngineCases(t, "docker run", d.runProbe, testCases)
	// --gpus without gpu-runtime: dockerd adds nvidia-container-runtime-hook (gpu-hook) and runc
	// runs it; gpu-hook refuses rather than start a container without its GPUs.
	t.Run("--gpus under runc fails and names the fix", func(t *testing.T) {
		r := d.runProbe(t, "--gpus", "all")
		wantRefused(t, "docker run", r, 125, "container was created without gpu-runtime", "--runtime=gpu")
	})
}

// TestDockerDefaultRuntime: gpu as dockerd's default runtime (gpu-ctk --set-as-default) and
// nvidia-container-runtime-hook on dockerd's PATH, so that plain `docker run --gpus` works
// (case 2).
func TestDockerDefaultRuntime(t *testing.T) {
	d := dockerWithDefault(t)
	t.Run("daemon.json and dockerd's runtimes", func(t *testing.T) {
		checkDaemonJSON(t, d, "gpu")
	})
	testCases := []engineCase{
		{description: "--gpus all gets both GPUs", flags: []string{"--gpus", "all"}, gpus: []int{0, 1}},
		{description: `--gpus "device=1" gets GPU 1 only`, flags: []string{"--gpus", `"device=1"`}, gpus: []int{1}},
		{description: "--gpus device=<UUID of GPU 1> gets GPU 1 only", flags: []string{"--gpus", "device=" + host.Options.GPUs[1].UUID}, gpus: []int{1}},
		{description: "--gpus 1 (a count) gets GPU 0", flags: []string{"--gpus", "1"}, gpus: []int{0}},
		{description: "-e NVIDIA_VISIBLE_DEVICES=1 without --gpus gets GPU 1", flags: []string{"-e", "NVIDIA_VISIBLE_DEVICES=1"}, gpus: []int{1}},
		{description: "a container asking for no GPU is unaffected"},
		{description: "--runtime=runc ignores NVIDIA_VISIBLE_DEVICES", flags: []string{"--runtime=runc", "-e", "NVIDIA_VISIBLE_DEVICES=all"}},
	}
	runEngineCases(t, "docker run", d.runProbe, testCases)
}

// TestDockerErrors: a failure of gpu-runtime or of its requirement check reaches the docker
// user in docker run's error, and the container never runs (case 3). gpu-runtime writes its own
// errors to runc's --log in runc's JSON format, where containerd's shim reads the message.
func TestDockerErrors(t *testing.T) {
	testCases := []struct {
		description string
		daemon      func(*testing.T) *dockerd
		flags       []string
		want        []string
	}{
		{description: "unsatisfied requirement (--gpus all, gpu the default runtime)", daemon: dockerWithDefault,
			flags: []string{"-e", "NVIDIA_REQUIRE_CUDA=cuda>=99.0", "--gpus", "all"},
			want: []string{"unsatisfied condition: cuda>=99.0",
				"please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)"}},
		{description: "unknown device (--runtime=gpu)", daemon: dockerWithRuntime,
			flags: []string{"--runtime=gpu", "-e", "NVIDIA_VISIBLE_DEVICES=7"},
			want:  []string{`unknown device "7"`, "this host has GPUs 0 (" + host.Options.GPUs[0].UUID + "), 1 (" + host.Options.GPUs[1].UUID + ")"}},
		{description: "unknown device UUID (gpu the default runtime)", daemon: dockerWithDefault,
			flags: []string{"-e", "NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000"},
			want:  []string{`unknown device "GPU-00000000-0000-0000-0000-000000000000"`}},
		{description: "--gpus 3 on a two-GPU host names the flag and the count", daemon: dockerWithDefault,
			flags: []string{"--gpus", "3"},
			want: []string{"unknown device: docker run --gpus 3 asked for 3 GPUs, and this host has GPUs 0 (" + host.Options.GPUs[0].UUID + "), 1 (" + host.Options.GPUs[1].UUID + ")",
				"use --gpus 2 or fewer, --gpus all, or --gpus device=<index or UUID>"}},
		{description: `--gpus "device=5" names the flag`, daemon: dockerWithDefault,
			flags: []string{"--gpus", `"device=5"`},
			want:  []string{`unknown device "5" in docker run --gpus device=5: this host has GPUs 0 (`}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			requireSetup(t)
			d := tc.daemon(t)
			r := d.runProbe(t, tc.flags...)
			// 125: docker itself failed (here: the runtime's create), not the container.
			wantRefused(t, "docker run", r, 125, tc.want...)
		})
	}
}

// TestDockerBrokenConfig: a config.toml that does not parse must not take down every
// container of a host where gpu is docker's default runtime: a container that asks for no GPU
// runs (and gpu-runtime logs a warning), a GPU container fails with the config error.
func TestDockerBrokenConfig(t *testing.T) {
	requireSetup(t)
	d := dockerWithDefault(t)
	good, err := os.ReadFile(runtimeConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(runtimeConfig, good, 0o644); err != nil {
			t.Errorf("restore %s: %v", runtimeConfig, err)
		}
	})
	// A bad value in [driver]: [runtime], with its log-file, still reads.
	broken := strings.Replace(string(good), "[driver]\n", "[driver]\nproc-root = \"relative\"\n", 1)
	if err := os.WriteFile(runtimeConfig, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	logBefore, _ := os.ReadFile(runtimeLog)

	wantRan(t, "docker run without GPUs", d.runProbe(t))
	logAfter, _ := os.ReadFile(runtimeLog)
	if added := strings.TrimPrefix(string(logAfter), string(logBefore)); !strings.Contains(added, "config unusable; the container asks for no GPU, so it runs unchanged through ") ||
		!strings.Contains(added, `invalid driver.proc-root \"relative\"`) {
		t.Errorf("gpu-runtime's log lacks the warning:\n%s", added)
	}
	wantRefused(t, "docker run with a GPU", d.runProbe(t, "-e", "NVIDIA_VISIBLE_DEVICES=0"), 125, "gpu-runtime: config "+runtimeConfig+`: invalid driver.proc-root "relative": want an absolute path`)

	// Not even TOML: the same, with the default runtimes (the warning goes to runc's log).
	if err := os.WriteFile(runtimeConfig, []byte("[runtime\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantRan(t, "docker run without GPUs, config not TOML", d.runProbe(t))
	wantRefused(t, "docker run with a GPU, config not TOML", d.runProbe(t, "-e", "NVIDIA_VISIBLE_DEVICES=0"), 125, "gpu-runtime: parse config "+runtimeConfig)
}

// nvidiaCTKDaemonJSON is daemon.json as `nvidia-ctk runtime configure --runtime=docker
// --set-as-default` writes it (keys sorted, four-space indent, NVIDIA's runtime as "args" and
// "path"), with the suite's own keys.
func nvidiaCTKDaemonJSON(dir, name string) []byte {
	cfg := dockerdKeys(dir, name)
	cfg["default-runtime"] = "nvidia"
	cfg["runtimes"] = map[string]any{"nvidia": map[string]any{"args": []string{}, "path": "nvidia-container-runtime"}}
	data, err := json.MarshalIndent(cfg, "", "    ")
	if err != nil {
		panic(err)
	}
	return data
}

// TestDockerMigrationFromNVIDIA: on a daemon.json NVIDIA's toolkit configured (runtime
// "nvidia", the default), gpu-ctk runtime configure --runtime-name nvidia --set-as-default
// makes gpu-runtime dockerd's "nvidia" runtime and default, so docker run --runtime=nvidia and
// plain docker run get GPUs from it; unconfigure then gives daemon.json back byte for byte,
// with no backup left, and a reloaded dockerd has NVIDIA's runtime as its default again.
func TestDockerMigrationFromNVIDIA(t *testing.T) {
	requireSetup(t)
	requireTools(t, dockerdBin, dockerBin, "containerd", "containerd-shim-runc-v2")
	const name = "dkn"
	var before []byte
	d, err := startDockerd(name, func(dir string) []byte {
		before = nvidiaCTKDaemonJSON(dir, name)
		return before
	}, []string{"--runtime-name", "nvidia", "--set-as-default"})
	if err != nil {
		t.Fatal(err)
	}
	runtimes, def := d.info(t)
	if runtimes["nvidia"].Path != wrapper || def != "nvidia" {
		t.Fatalf("after configure, dockerd's runtime nvidia is %q and its default %q; want %q and nvidia", runtimes["nvidia"].Path, def, wrapper)
	}
	runEngineCases(t, "docker run", d.runProbe, []engineCase{
		{description: "plain docker run -e NVIDIA_VISIBLE_DEVICES=1 gets GPU 1", flags: []string{"-e", "NVIDIA_VISIBLE_DEVICES=1"}, gpus: []int{1}},
		{description: "--runtime=nvidia --gpus all gets both GPUs", flags: []string{"--runtime=nvidia", "--gpus", "all"}, gpus: []int{0, 1}},
	})

	// gpu-ctk loaded tells gpu-runtime by its path in dockerd's /info, whatever its name.
	pid, err := os.ReadFile(filepath.Join(d.dir, "docker.pid"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"DOCKER_HOST=unix://" + d.sock, "CONTAINERD_ADDRESS=" + filepath.Join(d.dir, "no-containerd.sock")}
	r := runCmd(t, 30*time.Second, env, "", filepath.Join(binDir, "gpu-ctk"), "loaded")
	if want := fmt.Sprintf("the running dockerd (pid %s) has the runtime \"nvidia\" loaded, \"nvidia\" as its default runtime: systemctl restart docker\n", strings.TrimSpace(string(pid))); r.Code != 0 || r.Stdout != want {
		t.Errorf("gpu-ctk loaded: %s\nwant %q", r, want)
	}

	r = runCmd(t, 30*time.Second, nil, "", filepath.Join(binDir, "gpu-ctk"), "runtime", "unconfigure", "--runtime=docker", "--config", d.config, "--runtime-name", "nvidia")
	if r.Code != 0 || !strings.Contains(r.Stdout, "restored "+d.config+" as it was before configure") {
		t.Fatalf("gpu-ctk runtime unconfigure: %s", r)
	}
	if after, err := os.ReadFile(d.config); err != nil || string(after) != string(before) {
		t.Errorf("daemon.json after unconfigure (err %v):\n%s\nwant, as NVIDIA's toolkit left it:\n%s", err, after, before)
	}
	if backups, _ := filepath.Glob(d.config + ".bak.*"); len(backups) != 0 {
		t.Errorf("backups left: %v", backups)
	}
	// dockerd reloads runtimes and default-runtime on SIGHUP (systemctl reload docker).
	if r := runCmd(t, 10*time.Second, nil, "", "kill", "-HUP", strings.TrimSpace(string(pid))); r.Code != 0 {
		t.Fatalf("kill -HUP dockerd: %s", r)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtimes, def = d.info(t)
		if runtimes["nvidia"].Path == "nvidia-container-runtime" && def == "nvidia" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after unconfigure and a reload, dockerd's runtime nvidia is %q and its default %q; want nvidia-container-runtime and nvidia", runtimes["nvidia"].Path, def)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// NVIDIA's own "nvidia" is not gpu-runtime: gpu-ctk loaded lists nothing.
	if r := runCmd(t, 30*time.Second, env, "", filepath.Join(binDir, "gpu-ctk"), "loaded"); r.Code != 0 || r.Stdout != "" {
		t.Errorf("gpu-ctk loaded with NVIDIA's nvidia loaded: %s, want nothing", r)
	}
}

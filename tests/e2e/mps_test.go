package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// mpsProbe prints what a share's container sees: its NVIDIA nodes, its CUDA_MPS_* variables,
// its pipe directory, the device of its /dev/shm, and the marker files in /dev/shm; then it
// leaves a marker of its own there.
const mpsProbe = `
for f in /dev/nvidia*; do [ -c "$f" ] && echo "dev $f"; done
env | grep '^CUDA_MPS_' | sed 's/^/env /'
[ -S /tmp/nvidia-mps/control ] && echo pipe-control
echo "shm $(stat -c %d /dev/shm)"
for f in /dev/shm/marker-*; do [ -e "$f" ] && echo "seen $f"; done
touch /dev/shm/marker-$MARK
echo probe-done
`

// mpsEnv is a fake host with two MPS shares on GPU 0 (large 80 %, small 20 %) and one for
// uid 1000, started with gpu-ctk mps start and stopped when the test ends.
func mpsEnv(t *testing.T) (*env, string) {
	t.Helper()
	e, root := mpsConfigured(t)
	if out, code := gpuCTK(t, e, "mps", "start", "large", "small"); code != 0 || !strings.Contains(out, "large: started (pid ") || !strings.Contains(out, "small: started (pid ") {
		t.Fatalf("gpu-ctk mps start: exit %d\n%s", code, out)
	}
	return e, root
}

// mpsConfigured is mpsEnv before gpu-ctk mps start: the shares are configured, and stopped
// when the test ends.
func mpsConfigured(t *testing.T) (*env, string) {
	t.Helper()
	return mpsConfiguredOn(t, newEnv(t, 2))
}

// mpsOwnHost is mpsConfigured on a fake host of the test's own, whose driver files it may
// change.
func mpsOwnHost(t *testing.T) (*env, string) {
	t.Helper()
	requireE2E(t)
	dir := t.TempDir()
	h, err := fakehost.Build(filepath.Join(dir, "host"), fakehost.Default(2))
	if err != nil {
		t.Fatalf("build fake host: %v", err)
	}
	e := &env{host: h, dir: dir, config: filepath.Join(dir, "config.toml"), stateRoot: filepath.Join(dir, "runc-state")}
	return mpsConfiguredOn(t, e)
}

// mpsConfiguredOn writes e's config with the shares of mpsConfigured.
func mpsConfiguredOn(t *testing.T, e *env) (*env, string) {
	t.Helper()
	root := filepath.Join(e.dir, "mps")
	e.writeConfig(t, fmt.Sprintf(`[mps]
root = %q
[mps.shares.large]
devices = ["0"]
active-thread-percentage = 80
pinned-memory-limit = "60GiB"
[mps.shares.small]
devices = [%q]
active-thread-percentage = 20
pinned-memory-limit = "16G"
[mps.shares.user]
devices = ["1"]
uid = 1000
`, root, e.host.Options.GPUs[0].UUID))
	t.Cleanup(func() {
		if out, code := gpuCTK(t, e, "mps", "stop"); code != 0 {
			t.Errorf("gpu-ctk mps stop: exit %d\n%s", code, out)
		}
	})
	return e, root
}

// ctkCombined runs gpu-ctk with e's config and returns its stdout and stderr together.
func ctkCombined(t *testing.T, e *env, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...)
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestMPS: each share's daemon got exactly its defaults and GPUs and its own /dev/shm; a
// container on a share sees only that share's GPU, pipe directory and shared memory, with
// CUDA_MPS_PIPE_DIRECTORY set and its own CUDA_MPS_* settings gone.
func TestMPS(t *testing.T) {
	e, root := mpsEnv(t)
	gpu0 := e.host.Options.GPUs[0].UUID
	for share, want := range map[string]string{
		"large": "start CUDA_VISIBLE_DEVICES=" + gpu0 + "\nshm SHM\ncmd set_default_active_thread_percentage 80\ncmd set_default_device_pinned_mem_limit 0 60G\n",
		"small": "start CUDA_VISIBLE_DEVICES=" + gpu0 + "\nshm SHM\ncmd set_default_active_thread_percentage 20\ncmd set_default_device_pinned_mem_limit 0 16G\n",
	} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(root, share, "shm"), &st); err != nil {
			t.Fatal(err)
		}
		log, _ := os.ReadFile(filepath.Join(root, share, "log", "control.log"))
		want = strings.Replace(want, "SHM", fmt.Sprintf("%d:%d", st.Dev, st.Ino), 1)
		if string(log) != want {
			t.Errorf("share %s: the daemon's log:\n%s\nwant\n%s", share, log, want)
		}
	}
	// gpu-ctk mps start again: still running, defaults set again.
	if out, code := gpuCTK(t, e, "mps", "start", "large"); code != 0 || out != "large: already running\n" {
		t.Errorf("second start: exit %d: %q", code, out)
	}

	run := func(share, mark string, env ...string) facts {
		t.Helper()
		b := e.bundle(t, append([]string{"NVIDIA_MPS_SHARE=" + share, "MARK=" + mark}, env...), mpsProbe)
		r := e.run(t, b)
		if r.code != 0 || !strings.Contains(r.stdout, "probe-done") {
			t.Fatalf("share %s: exit %d\n%s\n%s", share, r.code, r.stdout, r.stderr)
		}
		return facts(lines(r.stdout))
	}
	shmDev := func(share string) string {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(root, share, "shm"), &st); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("shm %d", st.Dev)
	}
	f := run("large", "large", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G")
	for _, want := range []string{"dev /dev/nvidia0", "dev /dev/nvidiactl", "env CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "pipe-control", shmDev("large")} {
		if !f[want] {
			t.Errorf("large: missing %q:\n%s", want, dumpFacts(f))
		}
	}
	for _, not := range []string{"dev /dev/nvidia1", "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G"} {
		if f[not] {
			t.Errorf("large: %q in the container:\n%s", not, dumpFacts(f))
		}
	}
	f = run("small", "small")
	if !f[shmDev("small")] || f["seen /dev/shm/marker-large"] || f[shmDev("large")] {
		t.Errorf("small sees large's shared memory, or not its own:\n%s", dumpFacts(f))
	}
	if _, err := os.Stat(filepath.Join(root, "large", "shm", "marker-large")); err != nil {
		t.Errorf("the large container's /dev/shm is not the share's tmpfs: %v", err)
	}
	f = run("large", "again")
	if !f["seen /dev/shm/marker-large"] || f["seen /dev/shm/marker-small"] {
		t.Errorf("a second large container does not share large's memory alone:\n%s", dumpFacts(f))
	}

	// A runtime handler whose configuration forces a share: its containers join it, whatever
	// they ask.
	replaceInFile(t, e.config, "[mps]\n", "[mps]\nshare = \"small\"\n")
	f = run("large", "forced", "NVIDIA_VISIBLE_DEVICES=all")
	if !f[shmDev("small")] || f[shmDev("large")] {
		t.Errorf("mps.share = small: the container did not join small:\n%s", dumpFacts(f))
	}
}

// TestMPSErrors: every refusal names the share and the fix.
func TestMPSErrors(t *testing.T) {
	e, _ := mpsEnv(t)
	testCases := []struct {
		description string
		env         []string
		uid         int
		want        string
	}{
		{"an unknown share", []string{"NVIDIA_MPS_SHARE=huge"}, 0,
			`unknown MPS share "huge" in NVIDIA_MPS_SHARE: the configured shares are large, small, user`},
		{"a share not started", []string{"NVIDIA_MPS_SHARE=user"}, 1000,
			`MPS share "user" is not running: start it with gpu-ctk mps start user`},
		{"another user", []string{"NVIDIA_MPS_SHARE=large"}, 1000,
			`MPS share "large" serves uid 0, and the container runs as uid 1000: MPS servers are per user; run the container as uid 0, or give it a share whose uid is 1000`},
		{"a GPU outside the share", []string{"NVIDIA_MPS_SHARE=large", "NVIDIA_VISIBLE_DEVICES=1"}, 0,
			`GPU 1 (` + e.host.Options.GPUs[1].UUID + `) in NVIDIA_VISIBLE_DEVICES is not in MPS share "large", which has GPU 0 (` + e.host.Options.GPUs[0].UUID + `)`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			b := e.bundle(t, tc.env, "echo ran")
			if tc.uid != 0 {
				editSpec(t, b, func(s map[string]any) {
					s["process"].(map[string]any)["user"] = map[string]any{"uid": tc.uid, "gid": tc.uid}
				})
			}
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if msg := lastJSONError(t, logPath); r.code == 0 || msg != "gpu-runtime: plan GPU injection: "+tc.want {
				t.Errorf("exit %d, error %q\nwant %q", r.code, msg, tc.want)
			}
		})
	}
	// A share whose daemon died is not running.
	if out, code := gpuCTK(t, e, "mps", "stop", "small"); code != 0 || !strings.HasPrefix(out, "small: stopped (pid ") {
		t.Errorf("stop small: exit %d: %q", code, out)
	}
	b := e.bundle(t, []string{"NVIDIA_MPS_SHARE=small"}, "echo ran")
	logPath := filepath.Join(t.TempDir(), "log.json")
	if r := e.run(t, b, "--log", logPath, "--log-format", "json"); r.code == 0 || lastJSONError(t, logPath) != `gpu-runtime: plan GPU injection: MPS share "small" is not running: start it with gpu-ctk mps start small` {
		t.Errorf("a stopped share: exit %d: %q", r.code, lastJSONError(t, logPath))
	}
	if out, code := gpuCTK(t, e, "mps", "status", "small"); code != 0 || !strings.HasPrefix(out, "small: stopped (not started): gpu-ctk mps start small\n") {
		t.Errorf("status: exit %d: %q", code, out)
	}
	cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), "mps", "start", "huge")
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), `unknown MPS share "huge": the configured shares are large, small, user`) {
		t.Errorf("start huge: exit %d: %s", cmd.ProcessState.ExitCode(), out)
	}
}

// TestMPSUnit: the packaged gpu-runtime-mps@.service runs gpu-ctk mps start and stop with
// arguments this gpu-ctk accepts: its ExecStart and ExecStop, %i a share, start and stop it.
func TestMPSUnit(t *testing.T) {
	e, _ := mpsEnv(t)
	if out, code := gpuCTK(t, e, "mps", "stop"); code != 0 {
		t.Fatalf("stop: %s", out)
	}
	unit, err := os.ReadFile("../../packaging/systemd/gpu-runtime-mps@.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ key, want string }{{"ExecStart=", "large: started (pid "}, {"ExecStop=", "large: stopped (pid "}} {
		var argv []string
		for _, line := range strings.Split(string(unit), "\n") {
			if rest, ok := strings.CutPrefix(line, step.key); ok {
				argv = strings.Fields(strings.ReplaceAll(rest, "%i", "large"))
			}
		}
		if len(argv) < 2 || argv[0] != "/usr/bin/gpu-ctk" {
			t.Fatalf("%s%q", step.key, argv)
		}
		out, code := gpuCTK(t, e, argv[1:]...)
		if code != 0 || !strings.HasPrefix(out, step.want) {
			t.Errorf("%s %q: exit %d: %q", step.key, argv, code, out)
		}
	}
}

// TestMPSLogDirectory: gpu-ctk mps start writes in a share's log directory as root, and the
// daemon writes its logs there as root. A link or FIFO planted there — by the share's user,
// to whom an older gpu-ctk gave the directory — is refused with a message naming it, never
// followed (no file appears in a root-only directory) nor waited on; the directory is root's
// again, and the share starts once they are removed.
func TestMPSLogDirectory(t *testing.T) {
	e, root := mpsConfigured(t)
	logDir := filepath.Join(root, "large", "log")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(logDir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	rootOnly := filepath.Join(e.dir, "root-only")
	if err := os.Mkdir(rootOnly, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(rootOnly, "created"), filepath.Join(logDir, "gpu-ctk.log")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(logDir, "server.log"), 0o666); err != nil {
		t.Fatal(err)
	}
	out, code := ctkCombined(t, e, "mps", "start", "large")
	want := "gpu-ctk: MPS share \"large\": log directory " + logDir + ": gpu-ctk.log is a symbolic link; server.log is not a regular file: remove them " +
		"(gpu-ctk and the MPS daemon write there as root; an older gpu-ctk let the share's user write there too)\n"
	if code != 1 || out != want {
		t.Errorf("start with planted files: exit %d\n%s\nwant\n%s", code, out, want)
	}
	if _, err := os.Lstat(filepath.Join(rootOnly, "created")); err == nil {
		t.Error("gpu-ctk created a file in a root-only directory through a link in the share's log directory")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(logDir, &st); err != nil || st.Uid != 0 || st.Mode&0o7777 != 0o755 {
		t.Errorf("log directory: uid %d, mode %o (%v); want root's, 0755", st.Uid, st.Mode&0o7777, err)
	}
	for _, n := range []string{"gpu-ctk.log", "server.log"} {
		if err := os.Remove(filepath.Join(logDir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := gpuCTK(t, e, "mps", "start", "large"); code != 0 || !strings.HasPrefix(out, "large: started (pid ") {
		t.Errorf("start after removing them: exit %d: %q", code, out)
	}
}

// tenantScript is a tenant on an MPS share trying its daemon's control interface: with its
// own copy of the front end (/mine), the pipe directory it was given, and whatever is there.
const tenantScript = `
ls -A /tmp/nvidia-mps | sed 's/^/entry /'
command -v nvidia-cuda-mps-control >/dev/null && echo driver-front-end
echo get_default_active_thread_percentage | /mine/nvidia-cuda-mps-control | sed 's/^/query /'
printf 'set_default_active_thread_percentage 100\nset_default_device_pinned_mem_limit 0 80G\nquit\n' | /mine/nvidia-cuda-mps-control | sed 's/^/reply /'
for f in control control_privileged control_lock log nvidia-cuda-mps-control.pid; do rm /tmp/nvidia-mps/$f 2>/dev/null && echo "removed $f"; done
ln -s / /tmp/nvidia-mps/planted 2>/dev/null && echo planted
[ -S /tmp/nvidia-mps/control ] && echo control-still-there
echo probe-done
`

// TestMPSTenantCannotControl: a share's container, root with CAP_DAC_OVERRIDE (docker's
// default) and its own copy of nvidia-cuda-mps-control, sees only its daemon's control
// socket, read-only: it can query the daemon but not raise the share's defaults, end the
// daemon, remove or plant anything there; the driver's front end is not injected; the daemon
// runs on with the share's defaults, and the next tenant's container starts.
func TestMPSTenantCannotControl(t *testing.T) {
	e, root := mpsEnv(t)
	b := e.bundle(t, []string{"NVIDIA_MPS_SHARE=small", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}, tenantScript)
	mine := filepath.Join(b, "rootfs", "mine")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", filepath.Join(e.host.BinDir, "nvidia-cuda-mps-control"), mine).CombinedOutput(); err != nil {
		t.Fatalf("copy the front end: %v: %s", err, out)
	}
	editSpec(t, b, func(s map[string]any) {
		caps := s["process"].(map[string]any)["capabilities"].(map[string]any)
		for k, v := range caps {
			caps[k] = append(v.([]any), "CAP_DAC_OVERRIDE", "CAP_FOWNER")
		}
	})
	r := e.run(t, b)
	if r.code != 0 || !strings.Contains(r.stdout, "probe-done") {
		t.Fatalf("tenant: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	f := facts(lines(r.stdout))
	for _, want := range []string{
		"entry control", "query 20", "control-still-there",
		"reply set_default_active_thread_percentage: not permitted on this connection",
		"reply set_default_device_pinned_mem_limit: not permitted on this connection",
		"reply quit: not permitted on this connection",
	} {
		if !f[want] {
			t.Errorf("tenant: missing %q:\n%s", want, r.stdout)
		}
	}
	for l := range f {
		if (strings.HasPrefix(l, "entry ") && l != "entry control") || strings.HasPrefix(l, "removed ") || l == "planted" || l == "driver-front-end" {
			t.Errorf("tenant: %q:\n%s", l, r.stdout)
		}
	}

	log, _ := os.ReadFile(filepath.Join(root, "small", "log", "control.log"))
	for _, not := range []string{"cmd set_default_active_thread_percentage 100", "cmd set_default_device_pinned_mem_limit 0 80G", "cmd quit"} {
		if strings.Contains(string(log), not+"\n") {
			t.Errorf("the tenant's %q reached share small's daemon:\n%s", not, log)
		}
	}
	if out, code := gpuCTK(t, e, "mps", "status", "small"); code != 0 || !strings.HasPrefix(out, "small: running, pid ") {
		t.Errorf("after the tenant: status %d: %q", code, out)
	}
	query := exec.Command(filepath.Join(e.host.BinDir, "nvidia-cuda-mps-control"))
	query.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(root, "small", "pipe")}
	query.Stdin = strings.NewReader("get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\n")
	if out, err := query.CombinedOutput(); err != nil || string(out) != "20\n16G\n" {
		t.Errorf("share small's defaults after the tenant: %v: %q, want 20 and 16G", err, out)
	}
	next := e.run(t, e.bundle(t, []string{"NVIDIA_MPS_SHARE=small", "MARK=next"}, mpsProbe))
	if next.code != 0 || !strings.Contains(next.stdout, "probe-done") || !strings.Contains(next.stdout, "pipe-control") {
		t.Errorf("the next tenant: exit %d\n%s\n%s", next.code, next.stdout, next.stderr)
	}
}

// TestMPSCDI: on an MPS share — forced by the runtime's mps.share, or asked for — devices
// named by CDI, in NVIDIA_VISIBLE_DEVICES or by the device plugin's cdi/ volume mount, get
// what native ones get: only the share's GPU, its client view and tmpfs, none of their own
// CUDA_MPS_* settings; a CDI device that brings another GPU is refused, naming the device,
// the share and the fix, and the spec is left as it was.
func TestMPSCDI(t *testing.T) {
	e, root := mpsEnv(t)
	dir := t.TempDir()
	data, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	base := string(data) + fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n[request]\naccept-device-list-as-volume-mounts = true\n", dir)
	if err := os.WriteFile(e.config, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := ctkCombined(t, e, "cdi", "generate", "--output", filepath.Join(dir, "nvidia.yaml")); code != 0 {
		t.Fatalf("gpu-ctk cdi generate: exit %d\n%s", code, out)
	}
	forced := strings.Replace(base, "[mps]\n", "[mps]\nshare = \"small\"\n", 1)
	gpu0, gpu1 := e.host.Options.GPUs[0].UUID, e.host.Options.GPUs[1].UUID
	shmDev := func(share string) string {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(root, share, "shm"), &st); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("shm %d", st.Dev)
	}
	refusal := func(device, share string) string {
		return `gpu-runtime: plan GPU injection: CDI device "` + device + `" gives GPU 1 (` + gpu1 + `), not in MPS share "small"` + share +
			`, which has GPU 0 (` + gpu0 + `): a CDI device comes whole; ask only for the share's GPUs (their CDI devices, or NVIDIA_VISIBLE_DEVICES=0)`
	}
	const forcedNote = " (mps.share: every GPU container of this runtime joins it)"
	testCases := []struct {
		description string
		config      string
		env         []string
		mount       string // a /dev/null mount under /var/run/nvidia-container-devices/cdi/
		want        string // the error; "" when the container runs on share small
	}{
		{description: "forced share, all GPUs by CDI name", config: forced, env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"}, want: refusal("nvidia.com/gpu=all", forcedNote)},
		{description: "forced share, all GPUs by cdi/ volume mount", config: forced, mount: "nvidia.com/gpu=all", want: refusal("nvidia.com/gpu=all", forcedNote)},
		{description: "forced share, another GPU beside the share's", config: forced, env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,nvidia.com/gpu=1"}, want: refusal("nvidia.com/gpu=1", forcedNote)},
		{description: "forced share, its GPU by CDI name", config: forced, env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"}},
		{description: "forced share, its GPU by cdi/ volume mount", config: forced, mount: "nvidia.com/gpu=0"},
		{description: "asked for, another GPU by CDI name", config: base, env: []string{"NVIDIA_MPS_SHARE=small", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}, want: refusal("nvidia.com/gpu=1", "")},
		{description: "asked for, its GPU by CDI name", config: base, env: []string{"NVIDIA_MPS_SHARE=small", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if err := os.WriteFile(e.config, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append([]string{"MARK=cdi", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"}, tc.env...)
			b := e.bundle(t, env, mpsProbe)
			if tc.mount != "" {
				addMountRaw(t, b, "/dev/null", "/var/run/nvidia-container-devices/cdi/"+tc.mount)
			}
			before, _ := os.ReadFile(filepath.Join(b, "config.json"))
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if tc.want != "" {
				if msg := lastJSONError(t, logPath); r.code == 0 || msg != tc.want {
					t.Errorf("exit %d, error %q\nwant %q", r.code, msg, tc.want)
				}
				wantSpecUnchanged(t, b, before)
				return
			}
			if r.code != 0 || !strings.Contains(r.stdout, "probe-done") {
				t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			f := facts(lines(r.stdout))
			for _, want := range []string{"dev /dev/nvidia0", "env CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "pipe-control", shmDev("small")} {
				if !f[want] {
					t.Errorf("missing %q:\n%s", want, dumpFacts(f))
				}
			}
			for _, not := range []string{"dev /dev/nvidia1", "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", shmDev("large")} {
				if f[not] {
					t.Errorf("%q in the container:\n%s", not, dumpFacts(f))
				}
			}
		})
	}
}

// restartProbe, in a share's container, waits for the test to mark its share's client view
// after gpu-ctk mps stop and start (a file "restarted" there, which the container sees only
// if what it has mounted is the client view on the host), then prints the control socket it
// finds: what a client connecting after the restart finds. The inode of the old socket may
// be reused by the new one: only the mark tells them apart.
const restartProbe = `
[ -S /tmp/nvidia-mps/control ] && echo "socket before"
echo started
i=0
while [ $i -lt 300 ]; do
  if [ -e /tmp/nvidia-mps/restarted ]; then
    [ -S /tmp/nvidia-mps/control ] && echo "socket after $(stat -c %i /tmp/nvidia-mps/control)"
    exit 0
  fi
  sleep 0.05
  i=$((i+1))
done
echo "no mark"
`

// TestMPSRestart: a container that joined a share before gpu-ctk mps stop and start sees
// the new daemon's control socket in its pipe directory: the client view it has mounted is
// the one gpu-ctk links the new socket into, not a directory removed from the host.
func TestMPSRestart(t *testing.T) {
	e, root := mpsEnv(t)
	b := e.bundle(t, []string{"NVIDIA_MPS_SHARE=small"}, restartProbe)
	id := containerID(t)
	out, err := os.OpenFile(filepath.Join(t.TempDir(), "stdout"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if r := e.runtime(t, out, "create", "--bundle", b, id); r.code != 0 {
		t.Fatalf("create: exit %d: %s", r.code, r.stderr)
	}
	defer e.runtime(t, nil, "delete", "--force", id)
	if r := e.runtime(t, nil, "start", id); r.code != 0 {
		t.Fatalf("start: exit %d: %s", r.code, r.stderr)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if data, _ := os.ReadFile(out.Name()); strings.Contains(string(data), "started\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the container did not start its probe")
		}
	}
	if out, code := gpuCTK(t, e, "mps", "stop", "small"); code != 0 || !strings.HasPrefix(out, "small: stopped (pid ") {
		t.Fatalf("stop small: exit %d: %q", code, out)
	}
	if out, code := gpuCTK(t, e, "mps", "start", "small"); code != 0 || !strings.HasPrefix(out, "small: started (pid ") {
		t.Fatalf("start small: exit %d: %q", code, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "small", "pipe", "control"), &st); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(root, "small", "client", "restarted")
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(mark)
	waitStopped(t, e, id)
	data, _ := os.ReadFile(out.Name())
	if want := fmt.Sprintf("socket before\nstarted\nsocket after %d\n", st.Ino); string(data) != want {
		t.Errorf("the container does not see the restarted daemon's control socket:\n%s\nwant\n%s", data, want)
	}
}

// refusingFrontEnd is an nvidia-cuda-mps-control whose daemon is the fake's (at %[1]s) and
// whose front end answers set_default_active_thread_percentage as the real one answers a
// command the daemon refused: the daemon's error on stdout, exit status 0.
const refusingFrontEnd = `#!/bin/sh
case "$1" in -f|-d) exec %[1]q "$@";; esac
while IFS= read -r line; do
  case "$line" in
  set_default_active_thread_percentage*) echo "Invalid active thread percentage";;
  *) printf '%%s\n' "$line" | %[1]q || exit;;
  esac
done
`

// TestMPSDefaultsRefused: a daemon that refuses a share's active thread percentage, its
// front end printing why and exiting 0, fails gpu-ctk mps start with what it answered; the
// share's containers are not given its control socket, and are refused.
func TestMPSDefaultsRefused(t *testing.T) {
	e, root := mpsOwnHost(t)
	control := filepath.Join(e.host.BinDir, "nvidia-cuda-mps-control")
	real := filepath.Join(e.dir, "real", "nvidia-cuda-mps-control")
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(control, real); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(control, []byte(fmt.Sprintf(refusingFrontEnd, real)), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := ctkCombined(t, e, "mps", "start", "large")
	want := `gpu-ctk: MPS share "large": the daemon of MPS share "large" did not take active-thread-percentage 80: get_default_active_thread_percentage answers "100", ` +
		`and to the settings it answered "Invalid active thread percentage"; see ` + filepath.Join(root, "large", "log") + "\n"
	if code != 1 || out != want {
		t.Errorf("start: exit %d\n%s\nwant\n%s", code, out, want)
	}
	if entries, err := os.ReadDir(filepath.Join(root, "large", "client")); err != nil || len(entries) != 0 {
		t.Errorf("the client view holds %v (%v)", entries, err)
	}
	if out, code := gpuCTK(t, e, "mps", "status", "large"); code != 0 || !strings.HasPrefix(out, "large: stopped (its client view "+filepath.Join(root, "large", "client")+" holds no control socket yet): gpu-ctk mps start large\n") {
		t.Errorf("status: exit %d: %q", code, out)
	}
	b := e.bundle(t, []string{"NVIDIA_MPS_SHARE=large"}, "echo ran")
	logPath := filepath.Join(t.TempDir(), "log.json")
	if r := e.run(t, b, "--log", logPath, "--log-format", "json"); r.code == 0 || !strings.HasPrefix(lastJSONError(t, logPath), `gpu-runtime: plan GPU injection: MPS share "large" is not running`) {
		t.Errorf("a container on the share: exit %d: %q", r.code, lastJSONError(t, logPath))
	}
}

// TestMPSStopWithoutControl: gpu-ctk mps stop stops a share whose driver no longer has
// nvidia-cuda-mps-control (removed, or a driver root without MPS programs): the daemon is
// ended by signal, at once. gpu-ctk mps start needs it, and says so.
func TestMPSStopWithoutControl(t *testing.T) {
	e, _ := mpsOwnHost(t)
	if out, code := gpuCTK(t, e, "mps", "start", "large"); code != 0 || !strings.HasPrefix(out, "large: started (pid ") {
		t.Fatalf("start: exit %d: %q", code, out)
	}
	var pid int
	if out, _ := gpuCTK(t, e, "mps", "status", "large"); !strings.HasPrefix(out, "large: running, pid ") {
		t.Fatalf("status: %q", out)
	} else if _, err := fmt.Sscanf(out, "large: running, pid %d", &pid); err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(e.host.BinDir, "nvidia-cuda-mps-control")
	if err := os.Rename(control, control+".gone"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, code := ctkCombined(t, e, "mps", "stop", "large"); code != 0 || out != fmt.Sprintf("large: stopped (pid %d)\n", pid) {
		t.Errorf("stop: exit %d: %q", code, out)
	}
	t.Logf("stopped in %s", time.Since(start))
	// Ended: gone, or a zombie its new parent has not reaped yet.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Errorf("the daemon (pid %d) still runs: %s", pid, stat)
	}
	if out, code := gpuCTK(t, e, "mps", "status", "large"); code != 0 || !strings.HasPrefix(out, "large: stopped (not started): gpu-ctk mps start large\n") {
		t.Errorf("status: exit %d: %q", code, out)
	}
	out, code := ctkCombined(t, e, "mps", "start", "large")
	if want := "gpu-ctk: nvidia-cuda-mps-control not found under driver root \"" + e.host.DriverRoot + "\": install the driver's MPS programs, or set driver.root\n"; code != 1 || out != want {
		t.Errorf("start: exit %d\n%s\nwant\n%s", code, out, want)
	}
}

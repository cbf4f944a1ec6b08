package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/clustertest"
	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// The shared-GPU tests run the suite's gpu-kubelet-plugin with GPU 0 shared
// (dra.shared-gpus = ["0"]) and the claims' MPS daemons under the suite's directory
// (dra.mps-root): pods whose claims of shared-gpu.gpu-runtime.dev ask for compute and memory
// land on GPU 0 together, each with an MPS control daemon (the fake host's) of its own.

const sharedClass = "shared-gpu.gpu-runtime.dev"

// sharedMPSRoot is dra.mps-root of the plugin's shared configuration.
func sharedMPSRoot() string { return filepath.Join(draState.dir, "mps") }

// requireSharedDRA returns the plugin running with GPU 0 shared.
func requireSharedDRA(t *testing.T) *clustertest.DRAPlugin {
	t.Helper()
	requireCluster(t)
	if draState.dir == "" {
		draState.dir = filepath.Join(cluster.Dir, "dra") // sharedMPSRoot before the first start
	}
	return requireDRAWith(t, fmt.Sprintf("[dra]\nshared-gpus = [\"0\"]\nmps-root = %q\n", sharedMPSRoot()))
}

// mpsLeft says what the shared claims' MPS daemons left under dra.mps-root: a daemon that
// runs, a mount, a directory (pid file, log, pipes).
func mpsLeft() []string {
	if draState.dir == "" {
		return nil
	}
	root := sharedMPSRoot()
	var left []string
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if st := mps.Check(config.MPSConfig{Root: root, Shares: map[string]config.MPSShare{e.Name(): {}}}, e.Name()); st.Running {
			left = append(left, fmt.Sprintf("MPS daemon %d of share %s", st.PID, e.Name()))
		}
		left = append(left, "MPS share directory "+filepath.Join(root, e.Name()))
	}
	for _, m := range enginetest.MountsUnder(root) {
		left = append(left, "mount "+m)
	}
	return left
}

// sharedRequest is a claim's devices: a share of a shared GPU with compute percent and
// memory ("" asks for none: the whole GPU's).
func sharedRequest(compute int, memory string) string {
	capacity := fmt.Sprintf("compute: %q", fmt.Sprint(compute))
	if memory != "" {
		capacity += ", memory: " + memory
	}
	return fmt.Sprintf("      requests:\n      - name: gpu\n        exactly:\n          deviceClassName: %s\n          count: 1\n          capacity: {requests: {%s}}\n", sharedClass, capacity)
}

// mpsProbe prints the container's MPS variables and what it sees of the MPS pipe directory
// (inode and name of each entry).
const mpsProbe = `; env | grep '^CUDA_MPS_' | sort | sed 's/^/mpsenv /'; ls -Ai ` + plan.MPSPipeDir + ` | sed 's/^/pipe /'; echo mps-end`

// sharePID is the pid of the running MPS daemon of the claim with uid.
func sharePID(t *testing.T, uid string) int {
	t.Helper()
	st := mps.Check(config.MPSConfig{Root: sharedMPSRoot(), Shares: map[string]config.MPSShare{uid: {}}}, uid)
	if !st.Running {
		t.Fatalf("the MPS daemon of claim %s does not run: %s", uid, st.Why)
	}
	return st.PID
}

// wantShare checks a running shared pod: it got GPU 0, its container's MPS variables are its
// claim's (whatever its own env said), its pipe directory holds only its own daemon's control
// socket, and that daemon was given the claim's limits.
func wantShare(t *testing.T, p claimPod, gpu0 string, pct int, memGi int) string {
	t.Helper()
	out := waitOutput(t, p.name, "mps-end")
	if devs := allocatedDevices(t, p.name); !slices.Equal(devs, []string{gpu0}) {
		t.Fatalf("pod %s was allocated %v, want the shared GPU 0 %s", p.name, devs, gpu0)
	}
	enginetest.WantGPUs(t, cluster.Host, out, 0)
	uid := claimUID(t, p.name)
	var env, pipe []string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "mpsenv "); ok {
			env = append(env, v)
		}
		if v, ok := strings.CutPrefix(l, "pipe "); ok {
			pipe = append(pipe, strings.Join(strings.Fields(v), " "))
		}
	}
	wantEnv := []string{
		fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", pct),
		fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dG", memGi),
		"CUDA_MPS_PIPE_DIRECTORY=" + plan.MPSPipeDir,
	}
	if !slices.Equal(env, wantEnv) {
		t.Errorf("pod %s: MPS environment\n got %q\nwant %q", p.name, env, wantEnv)
	}
	var ino unix.Stat_t
	control := filepath.Join(sharedMPSRoot(), uid, "client", mps.ControlSocket)
	if err := unix.Stat(control, &ino); err != nil {
		t.Fatalf("pod %s: its claim's client view: %v", p.name, err)
	}
	if want := []string{fmt.Sprintf("%d %s", ino.Ino, mps.ControlSocket)}; !slices.Equal(pipe, want) {
		t.Errorf("pod %s sees in %s %q, want only its own daemon's %q (%s)", p.name, plan.MPSPipeDir, pipe, want, control)
	}
	log, err := os.ReadFile(filepath.Join(sharedMPSRoot(), uid, "log", "control.log"))
	if err != nil {
		t.Fatalf("pod %s: its daemon's log: %v", p.name, err)
	}
	for _, line := range []string{
		"start CUDA_VISIBLE_DEVICES=" + cluster.Host.Options.GPUs[0].UUID,
		fmt.Sprintf("cmd set_default_active_thread_percentage %d", pct),
		fmt.Sprintf("cmd set_default_device_pinned_mem_limit 0 %dG", memGi),
	} {
		if !strings.Contains(string(log), line+"\n") {
			t.Errorf("pod %s: its daemon's log lacks %q:\n%s", p.name, line, log)
		}
	}
	return uid
}

// TestSharedGPU: with GPU 0 shared, a pod asking compute 80 and 60Gi and one asking 20 and
// 16Gi (scaled to the fake GPU's memory) land on GPU 0, each with a daemon of its own that
// has its limits — the 20 % pod's container sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 and
// another pipe directory, and gets its claim's — and each sees only its own daemon's control
// socket, through which the fake front end can neither raise its share nor stop it; a pod
// asking 30 more stays Pending with the scheduler's reason until the 80 % pod is deleted.
// GPU 0 marked unhealthy taints the shared device. The plugin SIGKILLed with two shared
// claims prepared and started again finds their daemons (same pids); deleting the pods
// unprepares both claims and leaves no daemon, mount or pid file.
func TestSharedGPU(t *testing.T) {
	requireSharedDRA(t)
	g := cluster.Host.Options.GPUs[0]
	gpu0 := deviceName(g.UUID)
	largeGi, smallGi := 60, 16
	if total := g.TotalMemoryMiB() >> 10; total < largeGi+smallGi {
		largeGi, smallGi = total*60/80, total*16/80
	}
	large := newClaimPod("shared-80", sharedRequest(80, fmt.Sprintf("%dGi", largeGi)))
	small := newClaimPod("shared-20", sharedRequest(20, fmt.Sprintf("%dGi", smallGi)))
	large.script = probe + mpsProbe + stayAfterProbe
	small.script = large.script
	small.env = []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "CUDA_MPS_PIPE_DIRECTORY=/elsewhere"}
	applyClaimPod(t, large)
	applyClaimPod(t, small)
	uidLarge := wantShare(t, large, gpu0, 80, largeGi)
	uidSmall := wantShare(t, small, gpu0, 20, smallGi)

	// A tenant's front end, through the client view its container gets.
	for _, s := range []struct {
		uid string
		pct int
	}{{uidLarge, 80}, {uidSmall, 20}} {
		pid := sharePID(t, s.uid)
		frontEnd := exec.Command(filepath.Join(cluster.Host.BinDir, mps.ControlName))
		frontEnd.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(sharedMPSRoot(), s.uid, "client")}
		frontEnd.Stdin = strings.NewReader("set_default_active_thread_percentage 100\nquit\nget_default_active_thread_percentage\n")
		out, err := frontEnd.CombinedOutput()
		want := fmt.Sprintf("set_default_active_thread_percentage: not permitted on this connection\nquit: not permitted on this connection\n%d\n", s.pct)
		if err != nil || string(out) != want {
			t.Errorf("claim %s: a tenant's control commands: %v\n got %q\nwant %q", s.uid, err, out, want)
		}
		if again := sharePID(t, s.uid); again != pid {
			t.Errorf("claim %s: daemon %d replaced by %d", s.uid, pid, again)
		}
	}

	// 80 + 20 is the whole GPU: 30 more waits until the 80 % pod is gone.
	more := newClaimPod("shared-30", sharedRequest(30, fmt.Sprintf("%dGi", smallGi)))
	more.script = large.script
	applyClaimPod(t, more)
	wantUnschedulable(t, more.name)
	deletePod(t, large.name)
	uidMore := wantShare(t, more, gpu0, 30, smallGi)

	// The GPU marked unhealthy: its shared device is tainted.
	t.Cleanup(func() { gpuCtk(t, "health", "clear", "all") })
	gpuCtk(t, "health", "mark", g.UUID, "--reason", "fan failure (cluster test)")
	took := waitTaint(t, gpu0, []string{clustertest.DRADriver + "/unhealthy=fan-failure--cluster-test:NoSchedule"}, 15*time.Second)
	t.Logf("shared device tainted %.1f s after gpu-ctk health mark", took.Seconds())
	gpuCtk(t, "health", "clear", g.UUID)
	waitTaint(t, gpu0, nil, 15*time.Second)

	// The plugin killed and started again: the two claims' daemons are found, not restarted.
	pids := []int{sharePID(t, uidSmall), sharePID(t, uidMore)}
	draState.plugin.Kill()
	plugin, err := cluster.StartDRAPluginWith(draState.dir, draState.stateDir, draState.extra)
	if err != nil {
		draState.plugin, draState.err = nil, err
		t.Fatalf("restart gpu-kubelet-plugin: %v", err)
	}
	draState.plugin = plugin
	if now := []int{sharePID(t, uidSmall), sharePID(t, uidMore)}; !slices.Equal(now, pids) {
		t.Errorf("after the plugin's restart the daemons are %v, want %v (found again)", now, pids)
	}
	for _, p := range []claimPod{small, more} {
		if phase := strings.TrimSpace(kubectl(t, "", "get", "pod", p.name, "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount}")); phase != "Running 0" {
			t.Errorf("after the plugin's restart pod %s is %q, want Running 0 (phase, restarts)", p.name, phase)
		}
	}
	deletePod(t, small.name)
	deletePod(t, more.name)
	if left := waitClaimsGone(30 * time.Second); len(left) > 0 {
		t.Errorf("deleting the pods left %q", left)
	}
	if left := mpsLeft(); len(left) > 0 {
		t.Errorf("unprepare left %q", left)
	}
	for _, pid := range pids {
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(data), mps.ControlName) {
			t.Errorf("daemon %d still runs after unprepare", pid)
		}
	}
}

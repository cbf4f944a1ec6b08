package dra

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// TestMain lets the test binary be the shared claims' MPS launcher (Options.MPSLauncher), as
// gpu-ctk is on a node: `<binary> mps __daemon <shm> <control>` becomes the fake host's
// nvidia-cuda-mps-control with the claim's tmpfs as its /dev/shm (internal/mps.Daemon).
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "mps" && os.Args[2] == mps.DaemonCommand {
		err := mps.Daemon(os.Args[3:])
		fmt.Fprintln(os.Stderr, "mps daemon:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// shortTempDir is a temporary directory with a short path: an MPS daemon's socket path, under
// it, holds at most 107 bytes.
func shortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// requireMPS skips, loudly, where the claims' daemons cannot run: their tmpfs needs root.
func requireMPS(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: a shared claim's MPS daemon mounts a tmpfs: run this test as root")
	}
}

// sharedClaim is a claim allocated a share of device (what the scheduler records with
// consumable capacity: consumedCapacity and a share ID); memory "" consumes none.
func sharedClaim(uid, name, device string, compute int64, memory string) *resourceapi.ResourceClaim {
	c := claim(uid, name, []string{device})
	r := &c.Status.Allocation.Devices.Results[0]
	r.ShareID = ptr.To(types.UID("share-" + uid))
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{CapacityCompute: *resource.NewQuantity(compute, resource.DecimalSI)}
	if memory != "" {
		r.ConsumedCapacity[CapacityMemory] = resource.MustParse(memory)
	}
	return c
}

// sharedFixture is the fixture with GPU 0 shared, and stopping every daemon a test leaves.
func sharedFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	requireMPS(t)
	f := newFixture(t)
	f.cfg.DRA.SharedGPUs = []string{"0"}
	t.Cleanup(func() {
		names, _ := mps.Found(config.MPSConfig{Root: f.cfg.DRA.MPSRoot})
		for _, n := range names {
			_, _ = mps.Stop(config.MPSConfig{Root: f.cfg.DRA.MPSRoot}, n, mps.Options{})
		}
	})
	return f, strings.ToLower(f.fh.Options.GPUs[0].UUID)
}

func prepareOK(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), claims)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if res[c.UID].Err != nil {
			t.Fatalf("prepare %s: %v", c.Name, res[c.UID].Err)
		}
	}
	return res
}

// daemonLog is what the fake MPS control daemon of a claim logged.
func daemonLog(t *testing.T, f *fixture, uid string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.cfg.DRA.MPSRoot, uid, "log", "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func daemonPID(t *testing.T, f *fixture, uid string) int {
	t.Helper()
	st := mps.Check(config.MPSConfig{Root: f.cfg.DRA.MPSRoot, Shares: map[string]config.MPSShare{uid: {}}}, uid)
	if !st.Running {
		t.Fatalf("the daemon of claim %s does not run: %s", uid, st.Why)
	}
	return st.PID
}

const (
	uidLarge = "0a1b2c3d-0000-4000-8000-000000000080"
	uidSmall = "0a1b2c3d-0000-4000-8000-000000000020"
)

// TestPrepareSharedClaims: two claims of one shared GPU, 80 % / 60Gi and 20 % / 16Gi, get a
// daemon each whose log shows exactly its own limits; each claim's CDI device mounts only its
// own client view (the daemon's control socket, not control_privileged) and tmpfs, carries no
// MPS program, and — applied by the CDI library, as containerd does — replaces the
// container's own CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100.
func TestPrepareSharedClaims(t *testing.T) {
	f, gpu0 := sharedFixture(t)
	d := f.driver(t)
	large, small := sharedClaim(uidLarge, "large", gpu0, 80, "60Gi"), sharedClaim(uidSmall, "small", gpu0, 20, "16Gi")
	res := prepareOK(t, d, large, small)

	for _, tc := range []struct {
		uid, other, pct, mem, bytes string
	}{
		{uidLarge, uidSmall, "80", "60G", "64424509440"},
		{uidSmall, uidLarge, "20", "16G", "17179869184"},
	} {
		log := daemonLog(t, f, tc.uid)
		for _, line := range []string{
			"start CUDA_VISIBLE_DEVICES=" + f.fh.Options.GPUs[0].UUID,
			"cmd set_default_active_thread_percentage " + tc.pct,
			"cmd set_default_device_pinned_mem_limit 0 " + tc.mem,
		} {
			if !strings.Contains(log, line+"\n") {
				t.Errorf("claim %s: the daemon's log lacks %q:\n%s", tc.uid, line, log)
			}
		}
		if n := strings.Count(log, "cmd set_default_active_thread_percentage"); n != 1 {
			t.Errorf("claim %s: %d percentages set, want 1:\n%s", tc.uid, n, log)
		}

		spec := readSpec(t, filepath.Join(f.cdiDir, cdiFileName(types.UID(tc.uid))))
		if len(spec.Devices) != 1 {
			t.Fatalf("claim %s: %d CDI devices", tc.uid, len(spec.Devices))
		}
		id := res[types.UID(tc.uid)].Devices[0].CDIDeviceIDs[0]
		if id != CDIKind+"="+tc.uid+"-"+gpu0 {
			t.Errorf("claim %s: CDI device %s", tc.uid, id)
		}
		// The consumed memory, also as the per-cgroup GPU memory limit: set at createRuntime,
		// cleared at poststop.
		base := []string{"gpu-hook", "memory-limit", "--ctk", "/usr/bin/gpu-ctk", "--driver-root", "/", "--device", f.fh.Options.GPUs[0].UUID, "--timeout", "30"}
		var hooks []string
		for _, h := range append(spec.ContainerEdits.Hooks, spec.Devices[0].ContainerEdits.Hooks...) {
			if len(h.Args) > 1 && h.Args[1] == "memory-limit" {
				hooks = append(hooks, h.HookName+" "+h.Path+" "+strings.Join(h.Args, " "))
			}
		}
		wantHooks := []string{
			"createRuntime /usr/bin/gpu-hook " + strings.Join(base, " ") + " --bytes " + tc.bytes,
			"poststop /usr/bin/gpu-hook " + strings.Join(base, " ") + " --clear",
		}
		if !reflect.DeepEqual(hooks, wantHooks) {
			t.Errorf("claim %s: memory-limit hooks\n got %q\nwant %q", tc.uid, hooks, wantHooks)
		}
		root := filepath.Join(f.cfg.DRA.MPSRoot, tc.uid)
		var mounts []string
		for _, m := range append(spec.ContainerEdits.Mounts, spec.Devices[0].ContainerEdits.Mounts...) {
			mounts = append(mounts, m.HostPath+" -> "+m.ContainerPath)
			if strings.Contains(m.HostPath, tc.other) || strings.Contains(m.HostPath, "/pipe") {
				t.Errorf("claim %s mounts %s: another claim's, or a daemon's pipe directory", tc.uid, m.HostPath)
			}
			if b := filepath.Base(m.ContainerPath); b == "nvidia-cuda-mps-control" || b == "nvidia-cuda-mps-server" {
				t.Errorf("claim %s mounts the MPS program %s", tc.uid, m.ContainerPath)
			}
		}
		for _, want := range []string{filepath.Join(root, "client") + " -> " + plan.MPSPipeDir, filepath.Join(root, "shm") + " -> /dev/shm"} {
			if !slices.Contains(mounts, want) {
				t.Errorf("claim %s: mounts lack %s:\n%s", tc.uid, want, strings.Join(mounts, "\n"))
			}
		}
		// What the container sees at /tmp/nvidia-mps: the control socket, nothing else.
		entries, _ := os.ReadDir(filepath.Join(root, "client"))
		if len(entries) != 1 || entries[0].Name() != mps.ControlSocket || entries[0].Type() != fs.ModeSocket {
			t.Errorf("claim %s: client view holds %v, want only the socket %s", tc.uid, entries, mps.ControlSocket)
		}
		if !mounted(t, filepath.Join(root, "shm")) {
			t.Errorf("claim %s: its tmpfs is not mounted", tc.uid)
		}

		// A tenant with its own copy of the front end, as root, through what it is given (the
		// client view): it may query, not raise its share nor end the daemon. (Given the
		// daemon's pipe directory instead, root's front end reaches control_privileged.)
		frontEnd := exec.Command(filepath.Join(f.fh.DriverRoot, "usr", "bin", mps.ControlName))
		frontEnd.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(root, "client")}
		frontEnd.Stdin = strings.NewReader("set_default_active_thread_percentage 100\nset_active_thread_percentage 1 100\nquit\nget_default_active_thread_percentage\n")
		out, err := frontEnd.CombinedOutput()
		wantOut := "set_default_active_thread_percentage: not permitted on this connection\nset_active_thread_percentage: not permitted on this connection\nquit: not permitted on this connection\n" + tc.pct + "\n"
		if err != nil || string(out) != wantOut {
			t.Errorf("claim %s: a tenant's control commands: %v\n got %q\nwant %q", tc.uid, err, out, wantOut)
		}
		daemonPID(t, f, tc.uid) // still runs

		// The container's own variables, as a hostile tenant sets them, replaced.
		oci := &specs.Spec{Process: &specs.Process{Env: []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "CUDA_MPS_PIPE_DIRECTORY=/elsewhere", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G", "PATH=/bin"}}}
		if err := spec.GetDevice(tc.uid + "-" + gpu0).ApplyEdits(oci); err != nil {
			t.Fatal(err)
		}
		want := []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + tc.pct, "CUDA_MPS_PIPE_DIRECTORY=" + plan.MPSPipeDir, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=" + tc.mem, "PATH=/bin"}
		if !reflect.DeepEqual(oci.Process.Env, want) {
			t.Errorf("claim %s: container env\n got %v\nwant %v", tc.uid, oci.Process.Env, want)
		}
	}
}

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	m, err := mountinfo.Mounted(dir)
	return err == nil && m
}

// TestSharedClaimsRestart: a restarted plugin finds the two claims' daemons running (the same
// pids: not started twice) and answers their prepare again; a daemon that died is started
// again by the next prepare, with its limits; unprepare stops both, leaving no mount, pid
// file or directory, and is idempotent. A daemon no prepared claim owns (a plugin killed
// before its checkpoint) is stopped by the next plugin.
func TestSharedClaimsRestart(t *testing.T) {
	f, gpu0 := sharedFixture(t)
	large, small := sharedClaim(uidLarge, "large", gpu0, 80, "60Gi"), sharedClaim(uidSmall, "small", gpu0, 20, "16Gi")
	prepareOK(t, f.driver(t), large, small)
	pidLarge, pidSmall := daemonPID(t, f, uidLarge), daemonPID(t, f, uidSmall)

	restarted := f.driver(t)
	prepareOK(t, restarted, large, small)
	if a, b := daemonPID(t, f, uidLarge), daemonPID(t, f, uidSmall); a != pidLarge || b != pidSmall {
		t.Errorf("after a restart: pids %d %d, want %d %d (found again, not started twice)", a, b, pidLarge, pidSmall)
	}

	// The small claim's daemon dies; its next prepare starts it again.
	if err := unix.Kill(pidSmall, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed daemon gone", func() (bool, string) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d/cmdline", pidSmall))
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pidSmall))
		return err != nil || strings.Contains(string(data), ") Z"), "still there"
	})
	prepareOK(t, restarted, small)
	if again := daemonPID(t, f, uidSmall); again == pidSmall {
		t.Error("the dead daemon was not started again")
	}
	if n := strings.Count(daemonLog(t, f, uidSmall), "cmd set_default_active_thread_percentage 20\n"); n != 2 {
		t.Errorf("the restarted daemon: percentage set %d times in all, want 2", n)
	}

	for range 2 {
		out, err := restarted.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: large.UID}, {UID: small.UID}})
		if err != nil || out[large.UID] != nil || out[small.UID] != nil {
			t.Fatalf("unprepare: %v %v", err, out)
		}
	}
	for _, pid := range []int{pidLarge} {
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(data), mps.ControlName) {
			t.Errorf("daemon %d still runs after unprepare", pid)
		}
	}
	if entries, _ := os.ReadDir(f.cfg.DRA.MPSRoot); len(entries) != 0 {
		t.Errorf("after unprepare %s holds %v", f.cfg.DRA.MPSRoot, entries)
	}
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(f.cfg.DRA.MPSRoot))
	if err != nil || len(infos) != 0 {
		t.Errorf("after unprepare, mounts under %s: %v %v", f.cfg.DRA.MPSRoot, infos, err)
	}

	// A daemon whose claim was never checkpointed is stopped by the next plugin.
	prepareOK(t, restarted, large)
	orphan := daemonPID(t, f, uidLarge)
	if err := os.Remove(filepath.Join(f.stateDir, CheckpointFile)); err != nil {
		t.Fatal(err)
	}
	f.driver(t)
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", orphan)); err == nil && strings.Contains(string(data), mps.ControlName) {
		t.Errorf("the orphaned daemon %d still runs after a restart", orphan)
	}
	if _, err := os.Stat(filepath.Join(f.cfg.DRA.MPSRoot, uidLarge)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the orphaned daemon's directory is left: %v", err)
	}
}

// TestSharedPrepareErrors: allocations a shared GPU cannot honour fail naming the claim and
// the fix.
func TestSharedPrepareErrors(t *testing.T) {
	f, gpu0 := sharedFixture(t)
	gpu1 := strings.ToLower(f.fh.Options.GPUs[1].UUID)
	d := f.driver(t)
	noCapacity := claim("uid-nocap", "nocap", []string{gpu0})
	shareOfWhole := sharedClaim("uid-whole", "whole", gpu1, 50, "")
	two := sharedClaim("uid-two", "two", gpu0, 50, "")
	two.Status.Allocation.Devices.Results = append(two.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "gpu1", Driver: DriverName, Pool: "node-a", Device: gpu1})
	tooMuch := sharedClaim("uid-much", "much", gpu0, 50, "100Gi")
	g0 := fmt.Sprintf("0 (%s)", f.fh.Options.GPUs[0].UUID)
	want := map[types.UID]string{
		noCapacity.UID:   `ResourceClaim default/nocap was allocated shared GPU ` + g0 + ` without a consumed "compute" capacity or a share ID: the cluster does not do consumable capacity (enable the DRAConsumableCapacity feature gate on Kubernetes 1.34-1.35), or the claim does not use DeviceClass shared-gpu.gpu-runtime.dev`,
		shareOfWhole.UID: `ResourceClaim default/whole was allocated a share of ` + gpu1 + `, which this node does not share (dra.shared-gpus): delete the pod so that the claim is allocated again`,
		two.UID:          `ResourceClaim default/two was allocated shared GPU ` + g0 + ` and 1 other devices: a claim of a shared GPU has that one device (an MPS client connects to one daemon, at /tmp/nvidia-mps): ask for the other devices in claims of their own`,
		tooMuch.UID:      `ResourceClaim default/much was allocated 100Gi of shared GPU ` + g0 + `'s memory: want more than 0 and at most its 81920Mi`,
	}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{noCapacity, shareOfWhole, two, tooMuch})
	if err != nil {
		t.Fatal(err)
	}
	for uid, w := range want {
		if got := res[uid].Err; got == nil || got.Error() != w {
			t.Errorf("claim %s: %v\nwant %s", uid, got, w)
		}
	}
	if got := d.Prepared(); len(got) != 0 {
		t.Errorf("prepared %v after failures", got)
	}
	if entries, _ := os.ReadDir(f.cfg.DRA.MPSRoot); len(entries) != 0 {
		t.Errorf("failed prepares left %v under %s", entries, f.cfg.DRA.MPSRoot)
	}

	// A daemon that cannot be started again fails the claim's prepare, naming it.
	c := sharedClaim(uidSmall, "small", gpu0, 20, "16Gi")
	prepareOK(t, d, c)
	pid := daemonPID(t, f, uidSmall)
	control := filepath.Join(f.fh.DriverRoot, "usr", "bin", mps.ControlName)
	if _, err := os.Stat(control); err != nil {
		t.Fatalf("the fake host's %s: %v", mps.ControlName, err)
	}
	if err := os.Rename(control, control+".gone"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Rename(control+".gone", control) }()
	_ = unix.Kill(pid, unix.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	res, err = d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	wantErr := fmt.Sprintf(`ResourceClaim default/small: MPS control daemon of shared GPU %s: %s not found under driver root %q: install the driver's MPS programs (shared GPUs need them), or set driver.root`,
		f.fh.Options.GPUs[0].UUID, mps.ControlName, f.fh.DriverRoot)
	if err != nil || res[c.UID].Err == nil || res[c.UID].Err.Error() != wantErr {
		t.Errorf("prepare with its daemon dead and no MPS program: %v %v\nwant %s", err, res[c.UID].Err, wantErr)
	}
}

// TestSharedResources: a shared GPU is published once, as a shared-gpu with
// allowMultipleAllocations and the compute and memory capacities with their request
// policies, never also whole; marked unhealthy, it is tainted; a shared-gpus entry naming a
// GPU in MIG mode or one the node lacks is a warning, and shares nothing.
func TestSharedResources(t *testing.T) {
	f := newFixture(t)
	f.cfg.DRA.SharedGPUs = []string{"0", "2", "7"}
	d := f.driver(t)
	res, warnings, err := d.Resources()
	if err != nil {
		t.Fatal(err)
	}
	g := f.fh.Options.GPUs
	wantWarnings := []string{
		fmt.Sprintf(`dra.shared-gpus[1] "2": GPU 2 (%s) is in MIG mode: it is not shared (MIG devices are never shareable); its MIG devices are published whole`, g[2].UUID),
		`dra.shared-gpus[2] "7": this node has no such GPU; nothing is shared for it`,
	}
	if !reflect.DeepEqual(warnings, wantWarnings) {
		t.Errorf("warnings\n got %q\nwant %q", warnings, wantWarnings)
	}
	want := f.wantDevices()
	want[0].Attributes["type"] = str(TypeSharedGPU)
	want[0].AllowMultipleAllocations = ptr.To(true)
	q := func(n int64, f resource.Format) *resource.Quantity { return resource.NewQuantity(n, f) }
	memBytes := int64(g[0].TotalMemoryMiB()) << 20
	want[0].Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapacityCompute: {Value: *q(100, resource.DecimalSI), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: q(100, resource.DecimalSI),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(10, resource.DecimalSI), Max: q(100, resource.DecimalSI), Step: q(10, resource.DecimalSI)}}},
		CapacityMemory: {Value: *q(memBytes, resource.BinarySI), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: q(memBytes, resource.BinarySI),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(1<<30, resource.BinarySI), Max: q(memBytes, resource.BinarySI), Step: q(1<<30, resource.BinarySI)}}},
	}
	got := res.Pools["node-a"].Slices[0].Devices
	if len(got) != len(want) {
		t.Fatalf("%d devices, want %d (a shared GPU published once)", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("device %s:\n got %+v\nwant %+v", want[i].Name, got[i], want[i])
		}
	}
	f.mark(t, g[0].UUID, "Xid 79: GPU has fallen off the bus", 79)
	wantTaints := map[string][]resourceapi.DeviceTaint{strings.ToLower(g[0].UUID): {{Key: TaintKey, Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
	if got := taints(t, d); !reflect.DeepEqual(got, wantTaints) {
		t.Errorf("shared GPU marked: taints %+v, want %+v", got, wantTaints)
	}
}

// TestMPSLimit: consumed memory as MPS takes it, never more than consumed.
func TestMPSLimit(t *testing.T) {
	for in, want := range map[int64]string{60 << 30: "60G", 16 << 30: "16G", 1536 << 20: "1536M", (1 << 30) + 1: "1024M", 0: "", 100: "1M"} {
		if got := mpsLimit(in); got != want {
			t.Errorf("mpsLimit(%s) = %q, want %q", strconv.FormatInt(in, 10), got, want)
		}
	}
}

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpu-runtime/gpu-runtime/internal/clustertest"
	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// The DRA tests run the real gpu-kubelet-plugin (built as make build builds it) as a host
// process for the cluster's node — the node's credentials, the kubelet's root directory, the
// CDI directory containerd reads, a state directory of its own — one process for the whole
// suite (restarted by TestDRAPluginRestart and TestSharedGPU, and by requireDRAWith for a
// test that wants another configuration: shared_test.go's GPU 0 shared), and pods that ask
// for GPUs by ResourceClaim, without a RuntimeClass: containerd injects the CDI devices the
// plugin returns, plain runc runs the container.

// draState is the suite's plugin: started by the first DRA test, stopped by TestMain.
var draState struct {
	plugin         *clustertest.DRAPlugin
	dir, stateDir  string
	err            error
	started        bool
	host, cdi, etc snapshot // what the plugin must not write, before it started
	extra          string   // what the running plugin's configuration adds to gpu-runtime's
}

const (
	gpuClass = "gpu.gpu-runtime.dev"
	migClass = "mig.gpu-runtime.dev"
	attr     = `device.attributes["gpu.gpu-runtime.dev"]`
	// claimFilePrefix starts the name of the plugin's CDI spec files (one per claim).
	claimFilePrefix = "gpu.gpu-runtime.dev-claim-"
)

// requireDRA starts the plugin once and returns it; a plugin running with another
// configuration (requireSharedDRA's) is restarted with gpu-runtime's as it is.
func requireDRA(t *testing.T) *clustertest.DRAPlugin {
	t.Helper()
	return requireDRAWith(t, "")
}

// requireDRAWith returns the plugin running with extra appended to gpu-runtime's
// configuration (clustertest.StartDRAPluginWith): started once, restarted on the same state
// directory, once no claim is prepared, when it runs with other extra.
func requireDRAWith(t *testing.T, extra string) *clustertest.DRAPlugin {
	t.Helper()
	c := requireCluster(t)
	if !draState.started {
		draState.started = true
		draState.dir = filepath.Join(c.Dir, "dra")
		draState.stateDir = filepath.Join(draState.dir, "state")
		draState.host = takeSnapshot(c.Host.Dir, nil)
		draState.cdi = takeSnapshot(c.CDIDir, isClaimFile)
		draState.etc = takeSnapshot("/etc/cdi", nil)
		start := time.Now()
		draState.extra = extra
		draState.plugin, draState.err = c.StartDRAPluginWith(draState.dir, draState.stateDir, extra)
		if draState.err == nil {
			t.Logf("gpu-kubelet-plugin registered and published in %.1f s", time.Since(start).Seconds())
		}
	}
	if draState.err != nil {
		t.Fatalf("start gpu-kubelet-plugin: %v", draState.err)
	}
	if draState.extra != extra {
		if left := waitClaimsGone(30 * time.Second); len(left) > 0 {
			t.Fatalf("gpu-kubelet-plugin is to restart with another configuration, but holds %q", left)
		}
		draState.plugin.Stop()
		start := time.Now()
		draState.extra = extra
		draState.plugin, draState.err = c.StartDRAPluginWith(draState.dir, draState.stateDir, extra)
		if draState.err != nil {
			t.Fatalf("restart gpu-kubelet-plugin with another configuration: %v", draState.err)
		}
		t.Logf("gpu-kubelet-plugin restarted with another configuration in %.1f s", time.Since(start).Seconds())
	}
	return draState.plugin
}

// stopDRA stops the plugin (SIGTERM) and returns what it left: its sockets, CDI spec files,
// checkpoint entries; it deletes the node's ResourceSlices.
func stopDRA() []string {
	if draState.plugin == nil {
		return nil
	}
	// Pods are gone; the kubelet unprepares their claims right after.
	left := waitClaimsGone(30 * time.Second)
	draState.plugin.Stop()
	draState.plugin = nil
	left = append(left, mpsLeft()...)
	for _, s := range []string{
		filepath.Join(cluster.KubeletDir, "plugins_registry", clustertest.DRADriver+"-reg.sock"),
		filepath.Join(cluster.KubeletDir, "plugins", clustertest.DRADriver, "dra.sock"),
	} {
		if _, err := os.Lstat(s); err == nil {
			left = append(left, "plugin socket "+s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := cluster.Kubectl(ctx, "", "delete", "resourceslices", "--field-selector", "spec.driver="+clustertest.DRADriver); err != nil {
		left = append(left, fmt.Sprintf("delete the ResourceSlices: %v: %s", err, out))
	}
	return left
}

// waitClaimsGone waits until no claim is prepared (no CDI spec file of the plugin, no
// checkpoint entry) and returns what remains after timeout.
func waitClaimsGone(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		left := preparedLeft()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func preparedLeft() []string {
	var left []string
	files, _ := filepath.Glob(filepath.Join(cluster.CDIDir, claimFilePrefix+"*"))
	for _, f := range files {
		left = append(left, "CDI spec "+f)
	}
	for uid := range checkpointClaims() {
		left = append(left, "checkpoint entry "+uid)
	}
	return left
}

// checkpointClaims returns the claims the plugin's checkpoint holds, by UID.
func checkpointClaims() map[string]json.RawMessage {
	data, err := os.ReadFile(filepath.Join(draState.stateDir, "checkpoint.json"))
	if err != nil {
		return nil
	}
	var cp struct {
		Claims map[string]json.RawMessage `json:"claims"`
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return map[string]json.RawMessage{"(unreadable checkpoint: " + err.Error() + ")": nil}
	}
	return cp.Claims
}

func isClaimFile(name string) bool { return strings.HasPrefix(filepath.Base(name), claimFilePrefix) }

// snapshot is a directory tree: each path's type, mode, size, modification time and link
// target.
type snapshot map[string]string

func takeSnapshot(dir string, skip func(string) bool) snapshot {
	s := snapshot{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s[p] = "error " + err.Error()
			}
			return nil
		}
		if skip != nil && skip(p) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		v := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.IsDir() {
			v = fmt.Sprintf("%v", fi.Mode()) // a spec file created and removed changes its time
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			v += " -> " + target
		}
		s[p] = v
		return nil
	})
	return s
}

// diff says what changed from s to now.
func (s snapshot) diff(now snapshot) []string {
	var out []string
	for p, v := range now {
		if was, ok := s[p]; !ok {
			out = append(out, "created "+p)
		} else if was != v {
			out = append(out, fmt.Sprintf("changed %s: %s, was %s", p, v, was))
		}
	}
	for p := range s {
		if _, ok := now[p]; !ok {
			out = append(out, "removed "+p)
		}
	}
	slices.Sort(out)
	return out
}

// claimPod is a pod whose container c asks for the devices of one claim, made from a
// ResourceClaimTemplate of the same name.
type claimPod struct {
	name    string
	devices string // the claim's spec.devices, as YAML indented by 6
	script  string
	env     []string // the container's environment, NAME=value
}

// request is a claim's devices: one request "gpu" of count devices of class, with CEL
// selectors (each ANDed), then extra YAML at the devices level (constraints, config).
func request(class string, count int, selectors []string, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "      requests:\n      - name: gpu\n        exactly:\n          deviceClassName: %s\n          count: %d\n", class, count)
	if len(selectors) > 0 {
		b.WriteString("          selectors:\n")
		for _, s := range selectors {
			fmt.Fprintf(&b, "          - cel: {expression: %q}\n", s)
		}
	}
	b.WriteString(extra)
	return b.String()
}

func newClaimPod(prefix, devices string) claimPod {
	return claimPod{name: fmt.Sprintf("%s-%d", prefix, podSeq.Add(1)), devices: devices, script: probe + stayAfterProbe}
}

func (p claimPod) yaml() string {
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: %[1]s}
spec:
  spec:
    devices:
%[2]s---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: %[1]s}
  containers:
  - name: c
    image: %[3]s
    imagePullPolicy: Never
    command: ["sh", "-c", %[4]q]
%[5]s    resources:
      claims:
      - name: gpu
`, p.name, p.devices, clustertest.Busybox, p.script, p.envYAML())
}

// envYAML is the container's env, as YAML indented by 4; "" for none.
func (p claimPod) envYAML() string {
	if len(p.env) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("    env:\n")
	for _, e := range p.env {
		name, value, _ := strings.Cut(e, "=")
		fmt.Fprintf(&b, "    - {name: %q, value: %q}\n", name, value)
	}
	return b.String()
}

// applyClaimPod creates the template and the pod, and deletes both when the test ends.
func applyClaimPod(t *testing.T, p claimPod) {
	t.Helper()
	kubectl(t, p.yaml(), "apply", "-f", "-")
	t.Cleanup(func() {
		deletePod(t, p.name)
		kubectl(t, "", "delete", "resourceclaimtemplate", p.name, "--ignore-not-found")
	})
}

// allocatedDevices returns the names of the devices allocated to the pod's claim, sorted.
func allocatedDevices(t *testing.T, name string) []string {
	t.Helper()
	claim := strings.TrimSpace(kubectl(t, "", "get", "pod", name, "-o", "jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}"))
	if claim == "" {
		t.Fatalf("pod %s has no ResourceClaim:\n%s", name, describe(t, name))
	}
	devs := strings.Fields(kubectl(t, "", "get", "resourceclaim", claim, "-o", "jsonpath={.status.allocation.devices.results[*].device}"))
	slices.Sort(devs)
	return devs
}

// claimUID is the UID of the pod's claim.
func claimUID(t *testing.T, name string) string {
	t.Helper()
	claim := strings.TrimSpace(kubectl(t, "", "get", "pod", name, "-o", "jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}"))
	return strings.TrimSpace(kubectl(t, "", "get", "resourceclaim", claim, "-o", "jsonpath={.metadata.uid}"))
}

// deviceName is the name the plugin publishes a device with UUID uuid under.
func deviceName(uuid string) string { return strings.ToLower(uuid) }

// gpuOfDevice returns the index of the whole GPU a device name stands for.
func gpuOfDevice(t *testing.T, name string) int {
	t.Helper()
	for _, g := range cluster.Host.Options.GPUs {
		if deviceName(g.UUID) == name {
			return g.Index
		}
	}
	t.Fatalf("device %q is not a whole GPU of the host", name)
	return -1
}

// nodeSlices returns the node's ResourceSlices of the driver.
func nodeSlices(t *testing.T) []resourceapi.ResourceSlice {
	t.Helper()
	out := kubectl(t, "", "get", "resourceslices", "--field-selector", "spec.driver="+clustertest.DRADriver+",spec.nodeName="+cluster.NodeName, "-o", "json")
	var list resourceapi.ResourceSliceList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl get resourceslices: %v", err)
	}
	return list.Items
}

// sliceTaints returns the taints of each published device, by device name.
func sliceTaints(t *testing.T) map[string][]resourceapi.DeviceTaint {
	t.Helper()
	out := map[string][]resourceapi.DeviceTaint{}
	for _, s := range nodeSlices(t) {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d.Taints
		}
	}
	return out
}

// TestDRASlices: the node's ResourceSlices list exactly the fake host's whole GPUs (0 and 1)
// and the MIG devices of GPU 2 (in MIG mode, so not itself), each with every attribute
// internal/dra's tests expect — the PCIe root and NUMA node read from the fake sysfs — and no
// taint.
func TestDRASlices(t *testing.T) {
	requireDRA(t)
	h := cluster.Host
	gpus := h.Options.GPUs
	type want struct {
		attrs  map[string]any
		memory int64
	}
	wants := map[string]want{}
	common := func(g fakehost.GPU) map[string]any {
		return map[string]any{
			"minor": int64(g.Minor), "productName": g.Name, "brand": map[int]string{fakehost.BrandTesla: "tesla", fakehost.BrandNVIDIA: "nvidia"}[g.Brand],
			"architecture": map[int]string{8: "Ampere", 9: "Hopper"}[g.CCMajor], "cudaComputeCapability": fmt.Sprintf("v%d.%d.0", g.CCMajor, g.CCMinor),
			"driverVersion": "v" + h.Options.DriverVersion, "cudaDriverVersion": fmt.Sprintf("v%d.%d.0", h.Options.CUDAVersion/1000, h.Options.CUDAVersion%1000/10),
			"pcieBusID": g.BusID, "resource.kubernetes.io/pcieRoot": fakehost.PCIeRootOf(g), "numaNode": int64(g.NUMANode),
		}
	}
	for _, g := range gpus {
		if g.MIGCurrent {
			continue
		}
		a := common(g)
		a["type"], a["uuid"], a["index"] = "gpu", g.UUID, int64(g.Index)
		wants[deviceName(g.UUID)] = want{a, int64(g.TotalMemoryMiB()) << 20}
	}
	for _, m := range h.MIGDevices() {
		a := common(gpus[m.GPU])
		a["type"], a["uuid"], a["index"], a["parentIndex"], a["parentUUID"], a["profile"] = "mig", m.UUID, int64(m.Index), int64(m.GPU), gpus[m.GPU].UUID, m.Profile
		wants[deviceName(m.UUID)] = want{a, int64(m.MemoryMiB) << 20}
	}
	if len(wants) != 4 {
		t.Fatalf("the cluster's fake host has %d devices, this test expects 2 whole GPUs and 2 MIG devices", len(wants))
	}
	seen := map[string]bool{}
	for _, s := range nodeSlices(t) {
		if s.Spec.Pool.Name != cluster.NodeName || s.Spec.NodeName == nil || *s.Spec.NodeName != cluster.NodeName {
			t.Errorf("slice %s: pool %q, node %v: want both %q", s.Name, s.Spec.Pool.Name, s.Spec.NodeName, cluster.NodeName)
		}
		for _, d := range s.Spec.Devices {
			w, ok := wants[d.Name]
			if !ok {
				t.Errorf("published device %s is not a healthy GPU or MIG device of the host", d.Name)
				continue
			}
			if seen[d.Name] {
				t.Errorf("device %s published twice", d.Name)
			}
			seen[d.Name] = true
			got := map[string]any{}
			for k, v := range d.Attributes {
				switch {
				case v.StringValue != nil:
					got[string(k)] = *v.StringValue
				case v.IntValue != nil:
					got[string(k)] = *v.IntValue
				case v.VersionValue != nil:
					got[string(k)] = "v" + *v.VersionValue
				case v.BoolValue != nil:
					got[string(k)] = *v.BoolValue
				}
			}
			if g, wj := fmt.Sprint(sortedMap(got)), fmt.Sprint(sortedMap(w.attrs)); g != wj {
				t.Errorf("device %s attributes:\n got %s\nwant %s", d.Name, g, wj)
			}
			if m, ok := d.Capacity["memory"]; !ok || m.Value.Value() != w.memory {
				t.Errorf("device %s capacity %v, want memory %d", d.Name, d.Capacity, w.memory)
			}
			if len(d.Taints) > 0 {
				t.Errorf("device %s of a healthy host has taints %+v", d.Name, d.Taints)
			}
		}
	}
	for n := range wants {
		if !seen[n] {
			t.Errorf("device %s (%v) is not published", n, wants[n].attrs["uuid"])
		}
	}
}

// sortedMap writes a map with its keys sorted.
func sortedMap(m map[string]any) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(out)
	return out
}

// wantUnschedulable waits until the scheduler says the pod's claims cannot be allocated and
// checks that the pod is still Pending.
func wantUnschedulable(t *testing.T, name string) {
	t.Helper()
	d := waitEvent(t, name, "cannot allocate all claims")
	if !strings.Contains(d, "FailedScheduling") {
		t.Errorf("the pod's events do not show the scheduler's FailedScheduling:\n%s", d)
	}
	if phase := strings.TrimSpace(kubectl(t, "", "get", "pod", name, "-o", "jsonpath={.status.phase}")); phase != "Pending" {
		t.Errorf("pod %s is %s, want Pending", name, phase)
	}
}

// TestDRAOneGPU: a pod whose claim asks for one gpu.gpu-runtime.dev device runs without a
// RuntimeClass and sees exactly the GPU allocated — its /dev/nvidiaN, its cgroup rule,
// libcuda.so.1 in ld.so.cache, nvidia-smi — a second such pod gets the other GPU, and a
// third, on a node with two whole GPUs, stays Pending with the scheduler's reason.
func TestDRAOneGPU(t *testing.T) {
	requireDRA(t)
	one := request(gpuClass, 1, nil, "")
	p1, p2, p3 := newClaimPod("dra-one", one), newClaimPod("dra-one", one), newClaimPod("dra-one", one)
	applyClaimPod(t, p1)
	applyClaimPod(t, p2)
	var got []int
	for _, p := range []claimPod{p1, p2} {
		out := waitOutput(t, p.name, "probe-end")
		devs := allocatedDevices(t, p.name)
		if len(devs) != 1 {
			t.Fatalf("pod %s was allocated %v, want one GPU", p.name, devs)
		}
		i := gpuOfDevice(t, devs[0])
		wantGPUsDRA(t, out, i)
		got = append(got, i)
	}
	if got[0] == got[1] {
		t.Errorf("both pods got GPU %d", got[0])
	}
	applyClaimPod(t, p3)
	wantUnschedulable(t, p3.name)
}

// wantGPUsDRA checks a probe's output: exactly the GPUs, and nvidia-smi runs.
func wantGPUsDRA(t *testing.T, out string, gpus ...int) {
	t.Helper()
	enginetest.WantGPUs(t, cluster.Host, out, gpus...)
	wantNVIDIASMI(t, out, len(gpus) > 0)
}

// anyClass is a DeviceClass of every device of the driver, whole GPU or MIG device, for the
// placement tests' claims that choose among both kinds.
const anyClass = "any.gpu-runtime.test"

func applyAnyClass(t *testing.T) {
	t.Helper()
	kubectl(t, fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: %s}
spec:
  selectors:
  - cel: {expression: 'device.driver == "%s"'}
`, anyClass, clustertest.DRADriver), "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "deviceclass", anyClass, "--ignore-not-found") })
}

// uuidIn is a CEL selector of the devices with one of the UUIDs.
func uuidIn(uuids ...string) string {
	q := make([]string, len(uuids))
	for i, u := range uuids {
		q[i] = fmt.Sprintf("%q", u)
	}
	return fmt.Sprintf("%s.uuid in [%s]", attr, strings.Join(q, ", "))
}

const samePCIeRoot = "      constraints:\n      - {requests: [gpu], matchAttribute: resource.kubernetes.io/pcieRoot}\n"

// TestDRASelection: a CEL selector on productName gets the GPU of that product; a claim for
// two devices on one PCIe root (matchAttribute resource.kubernetes.io/pcieRoot) gets GPUs 0
// and 1, the only pair on one root among GPU 0, GPU 1 and a MIG device of GPU 2, and stays
// Pending when it may choose only among GPU 0 and that MIG device (roots pci0000:00 and
// pci0000:40); a claim of mig.gpu-runtime.dev by profile gets that MIG device: its GPU's
// node and its GPU and compute instance capability nodes, nothing else.
func TestDRASelection(t *testing.T) {
	requireDRA(t)
	h := cluster.Host
	gpus := h.Options.GPUs
	var mig fakehost.MIGInfo
	for _, m := range h.MIGDevices() {
		if m.Profile == "1g.10gb" {
			mig = m
		}
	}
	if gpus[0].Name == gpus[1].Name || fakehost.PCIeRootOf(gpus[0]) != fakehost.PCIeRootOf(gpus[1]) ||
		mig.UUID == "" || fakehost.PCIeRootOf(gpus[mig.GPU]) == fakehost.PCIeRootOf(gpus[0]) {
		t.Fatal("the cluster's fake host is not the one these tests are written for: GPUs 0 and 1 of different products on one PCIe root, a 1g.10gb MIG device on another")
	}
	t.Run("CEL selector on productName", func(t *testing.T) {
		p := newClaimPod("dra-cel", request(gpuClass, 1, []string{fmt.Sprintf("%s.productName == %q", attr, gpus[1].Name)}, ""))
		applyClaimPod(t, p)
		out := waitOutput(t, p.name, "probe-end")
		if devs := allocatedDevices(t, p.name); !slices.Equal(devs, []string{deviceName(gpus[1].UUID)}) {
			t.Fatalf("allocated %v, want GPU 1 (%s)", devs, gpus[1].Name)
		}
		wantGPUsDRA(t, out, 1)
	})
	applyAnyClass(t)
	t.Run("two devices on one PCIe root", func(t *testing.T) {
		p := newClaimPod("dra-root", request(anyClass, 2, []string{uuidIn(gpus[0].UUID, mig.UUID, gpus[1].UUID)}, samePCIeRoot))
		applyClaimPod(t, p)
		out := waitOutput(t, p.name, "probe-end")
		want := []string{deviceName(gpus[0].UUID), deviceName(gpus[1].UUID)}
		slices.Sort(want)
		if devs := allocatedDevices(t, p.name); !slices.Equal(devs, want) {
			t.Fatalf("allocated %v, want GPUs 0 and 1 %v (one PCIe root)", devs, want)
		}
		wantGPUsDRA(t, out, 0, 1)
	})
	t.Run("no two devices on one PCIe root: Pending", func(t *testing.T) {
		p := newClaimPod("dra-noroot", request(anyClass, 2, []string{uuidIn(gpus[0].UUID, mig.UUID)}, samePCIeRoot))
		applyClaimPod(t, p)
		wantUnschedulable(t, p.name)
	})
	t.Run("MIG device by profile", func(t *testing.T) {
		p := newClaimPod("dra-mig", request(migClass, 1, []string{fmt.Sprintf("%s.profile == %q", attr, mig.Profile)}, ""))
		p.script = enginetest.CDIProbe + stayAfterProbe
		applyClaimPod(t, p)
		out := waitOutput(t, p.name, "probe-done")
		if devs := allocatedDevices(t, p.name); !slices.Equal(devs, []string{deviceName(mig.UUID)}) {
			t.Fatalf("allocated %v, want the %s MIG device %s", devs, mig.Profile, mig.UUID)
		}
		wantMIGNodes(t, out, mig)
		if !strings.Contains(out, "ldcache-libcuda\n") {
			t.Errorf("libcuda.so.1 is not in the pod's loader cache:\n%s", out)
		}
	})
}

// gpuCtk runs gpu-ctk with the cluster's configuration.
func gpuCtk(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(cluster.GPUBin, "gpu-ctk"), args...)
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+cluster.RuntimeConfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpu-ctk %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// waitTaint waits until the device's taints in the slices are want (by key=value:effect)
// and returns how long that took.
func waitTaint(t *testing.T, device string, want []string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var got []string
		for _, tn := range sliceTaints(t)[device] {
			got = append(got, fmt.Sprintf("%s=%s:%s", tn.Key, tn.Value, tn.Effect))
		}
		if slices.Equal(got, want) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("device %s has taints %q after %s, want %q", device, got, timeout, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDRAHealth: `gpu-ctk health mark` of GPU 0 taints its device in the slice within
// seconds (the plugin polls the health file every 2 s), and a pod that can only have GPU 0
// is not scheduled; `gpu-ctk health clear` lifts the taint, without a plugin restart, and
// the same pod then runs with GPU 0.
func TestDRAHealth(t *testing.T) {
	requireDRA(t)
	g := cluster.Host.Options.GPUs[0]
	t.Cleanup(func() { gpuCtk(t, "health", "clear", "all") })
	gpuCtk(t, "health", "mark", g.UUID, "--reason", "fan failure (cluster test)")
	took := waitTaint(t, deviceName(g.UUID), []string{clustertest.DRADriver + "/unhealthy=fan-failure--cluster-test:NoSchedule"}, 15*time.Second)
	t.Logf("taint published %.1f s after gpu-ctk health mark", took.Seconds())
	p := newClaimPod("dra-sick", request(gpuClass, 1, []string{uuidIn(g.UUID)}, ""))
	applyClaimPod(t, p)
	wantUnschedulable(t, p.name)
	gpuCtk(t, "health", "clear", g.UUID)
	took = waitTaint(t, deviceName(g.UUID), nil, 15*time.Second)
	t.Logf("taint lifted %.1f s after gpu-ctk health clear", took.Seconds())
	out := waitOutput(t, p.name, "probe-end")
	wantGPUsDRA(t, out, 0)
}

// TestDRAPluginRestart: the plugin SIGKILLed while a pod's claim is prepared and started
// again on the same state directory: the pod keeps running, the checkpoint and the CDI
// directory hold the claim once, and deleting the pod unprepares it through the new
// process — no spec file, no checkpoint entry left.
func TestDRAPluginRestart(t *testing.T) {
	requireDRA(t)
	p := newClaimPod("dra-restart", request(gpuClass, 1, nil, ""))
	applyClaimPod(t, p)
	waitOutput(t, p.name, "probe-end")
	uid := claimUID(t, p.name)
	spec := filepath.Join(cluster.CDIDir, claimFilePrefix+uid+".json")
	if _, err := os.Stat(spec); err != nil {
		t.Fatalf("the claim's CDI spec: %v", err)
	}
	draState.plugin.Kill()
	plugin, err := cluster.StartDRAPluginWith(draState.dir, draState.stateDir, draState.extra)
	if err != nil {
		draState.plugin, draState.err = nil, err
		t.Fatalf("restart gpu-kubelet-plugin: %v", err)
	}
	draState.plugin = plugin
	if phase := strings.TrimSpace(kubectl(t, "", "get", "pod", p.name, "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount}")); phase != "Running 0" {
		t.Errorf("after the plugin's restart the pod is %q, want Running 0 (phase, restarts)", phase)
	}
	if left := preparedLeft(); len(left) != 2 || !slices.Contains(left, "CDI spec "+spec) || !slices.Contains(left, "checkpoint entry "+uid) {
		t.Errorf("after the restart the plugin holds %q, want the claim's spec and checkpoint entry once", left)
	}
	deletePod(t, p.name)
	if left := waitClaimsGone(30 * time.Second); len(left) > 0 {
		t.Errorf("deleting the pod left %q", left)
	}
}

// TestDRABadConfig: a claim whose opaque configuration for the driver has an unknown key,
// or an unknown capability, fails its prepare; the kubelet's event on the pod carries the
// plugin's message naming it, and no spec is written.
func TestDRABadConfig(t *testing.T) {
	requireDRA(t)
	testCases := []struct {
		description, params, want string
	}{
		{description: "unknown key", params: `{capability: compute}`,
			want: `unknown key "capability": the keys are capabilities`},
		{description: "unknown capability", params: `{capabilities: "compute,bogus"}`,
			want: `unknown capability "bogus" in capabilities "compute,bogus"`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			config := fmt.Sprintf("      config:\n      - requests: [gpu]\n        opaque: {driver: %s, parameters: %s}\n", clustertest.DRADriver, tc.params)
			p := newClaimPod("dra-bad", request(gpuClass, 1, nil, config))
			applyClaimPod(t, p)
			d := waitEvent(t, p.name, tc.want)
			if !strings.Contains(d, "opaque configuration of driver "+clustertest.DRADriver+" (from the claim") {
				t.Errorf("the event does not say which configuration:\n%s", d)
			}
			if left := preparedLeft(); len(left) > 0 {
				t.Errorf("a failed prepare left %q", left)
			}
		})
	}
}

// TestDRAWritesNowhereElse: after every DRA test, the fake host's tree, the CDI directory
// (but for the plugin's own claim files) and /etc/cdi are as they were before the plugin
// started: it wrote nothing but its spec files, its state directory and its sockets.
func TestDRAWritesNowhereElse(t *testing.T) {
	requireDRA(t)
	for _, s := range []struct {
		what   string
		before snapshot
		now    snapshot
	}{
		{"the fake host", draState.host, takeSnapshot(cluster.Host.Dir, nil)},
		{"the CDI directory", draState.cdi, takeSnapshot(cluster.CDIDir, isClaimFile)},
		{"/etc/cdi", draState.etc, takeSnapshot("/etc/cdi", nil)},
	} {
		if d := s.before.diff(s.now); len(d) > 0 {
			t.Errorf("%s changed while gpu-kubelet-plugin ran:\n  %s", s.what, strings.Join(d, "\n  "))
		}
	}
	if files, _ := filepath.Glob("/var/run/cdi/" + claimFilePrefix + "*"); len(files) > 0 {
		t.Errorf("claim specs in /var/run/cdi, not the --cdi-dir given: %v", files)
	}
}

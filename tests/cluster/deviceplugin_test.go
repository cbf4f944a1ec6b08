package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

var (
	pluginBuild struct {
		once sync.Once
		path string
		err  error
	}
	// plugin is the device plugin running now; starting another stops it once the new one is
	// registered, so the kubelet never sees the resource without a plugin.
	plugin    *enginetest.Daemon
	pluginSeq int
)

// startPlugin runs tests/cmd/gpu-device-plugin with a device-list strategy (MIG strategy
// mixed) and waits until the kubelet has listed its devices.
func startPlugin(t *testing.T, strategy string) {
	t.Helper()
	pluginBuild.once.Do(func() {
		pluginBuild.path = filepath.Join(cluster.Dir, "bin", "gpu-device-plugin")
		cmd := exec.Command("go", "build", "-o", pluginBuild.path, "./tests/cmd/gpu-device-plugin")
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		if err != nil {
			pluginBuild.err = fmt.Errorf("build the device plugin: %w: %s", err, out)
		}
	})
	if pluginBuild.err != nil {
		t.Fatal(pluginBuild.err)
	}
	pluginSeq++
	dir := filepath.Join(cluster.Dir, fmt.Sprintf("plugin-%d", pluginSeq))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready")
	d, err := enginetest.StartDaemon("gpu-device-plugin", dir, []string{"GPU_RUNTIME_CONFIG=" + cluster.RuntimeConfig},
		func() error { _, err := os.Stat(ready); return err },
		pluginBuild.path, "--device-list-strategy", strategy, "--mig-strategy", "mixed",
		"--gpu-ctk", filepath.Join(cluster.GPUBin, "gpu-ctk"), "--ready", ready,
		"--name", fmt.Sprintf("gpu-runtime-test-%d-%d", os.Getpid(), pluginSeq))
	if err != nil {
		t.Fatal(err)
	}
	stopPlugin()
	plugin = d
}

func stopPlugin() {
	if plugin != nil {
		plugin.Stop()
		plugin = nil
	}
}

// allocated returns the device ids the kubelet allocated to the pod's container c, from its
// device manager's checkpoint.
func allocated(t *testing.T, name string) []string {
	t.Helper()
	uid := kubectl(t, "", "get", "pod", name, "-o", "jsonpath={.metadata.uid}")
	data, err := os.ReadFile(filepath.Join(pluginapi.DevicePluginPath, "kubelet_internal_checkpoint"))
	if err != nil {
		t.Fatalf("read the kubelet's device checkpoint: %v", err)
	}
	var cp struct {
		Data struct {
			PodDeviceEntries []struct {
				PodUID, ContainerName, ResourceName string
				DeviceIDs                           map[string][]string
			}
		}
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		t.Fatalf("read the kubelet's device checkpoint: %v", err)
	}
	var ids []string
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID == uid && e.ContainerName == "c" {
			for _, l := range e.DeviceIDs {
				ids = append(ids, l...)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// gpuIndex returns the index of the fake host's GPU with uuid.
func gpuIndex(t *testing.T, uuid string) int {
	t.Helper()
	for _, g := range cluster.Host.Options.GPUs {
		if g.UUID == uuid {
			return g.Index
		}
	}
	t.Fatalf("the kubelet allocated %q, not a GPU of the host", uuid)
	return -1
}

// specMounts are the container paths of the mounts of the spec the harness generated.
func specMounts(t *testing.T) []string {
	t.Helper()
	spec, err := cdi.ReadSpec(filepath.Join(cluster.CDIDir, "nvidia.yaml"), 0)
	if err != nil {
		t.Fatalf("read the node's CDI spec: %v", err)
	}
	var out []string
	for _, m := range spec.ContainerEdits.Mounts {
		out = append(out, m.ContainerPath)
	}
	return out
}

// TestDevicePlugin: a pod with resources.limits nvidia.com/gpu: 1 gets exactly the GPU the
// kubelet allocated, under each of the device plugin's device-list strategies — through
// gpu-runtime (RuntimeClass gpu; volume mounts accepted, as the node's config says) and, for
// the CDI strategies, through containerd's own CDI with plain runc: the cdi-annotations case
// without a RuntimeClass is containerd applying a container's cdi.k8s.io annotation.
func TestDevicePlugin(t *testing.T) {
	c := requireCluster(t)
	testCases := []struct {
		strategy     string
		runtimeClass string
		cdi          bool // the devices come from the CDI spec (control, UVM and modeset nodes)
	}{
		{strategy: "envvar", runtimeClass: "gpu"},
		{strategy: "volume-mounts", runtimeClass: "gpu"},
		{strategy: "cdi-annotations", runtimeClass: "gpu", cdi: true},
		{strategy: "cdi-cri", runtimeClass: "gpu", cdi: true},
		{strategy: "cdi-annotations", cdi: true},
		{strategy: "cdi-cri", cdi: true},
	}
	for _, tc := range testCases {
		class := tc.runtimeClass
		if class == "" {
			class = "none (runc)"
		}
		t.Run(fmt.Sprintf("%s, RuntimeClass %s", tc.strategy, class), func(t *testing.T) {
			startPlugin(t, tc.strategy)
			p := newPod("dp")
			p.runtimeClass = tc.runtimeClass
			p.limits = map[string]string{"nvidia.com/gpu": "1"}
			if tc.cdi {
				p.script = enginetest.CDIProbe
			}
			out := runPod(t, p)
			ids := allocated(t, p.name)
			if len(ids) != 1 {
				t.Fatalf("the kubelet allocated %v to the pod, want one GPU", ids)
			}
			if tc.cdi {
				enginetest.WantCDIDevices(t, c.Host, out, enginetest.CDIWant{GPUs: []int{gpuIndex(t, ids[0])}, Mounts: specMounts(t)})
			} else {
				enginetest.WantGPUs(t, c.Host, out, gpuIndex(t, ids[0]))
			}
		})
	}
}

// TestDevicePluginMIGMixed: with the MIG strategy mixed, a pod asking for
// nvidia.com/mig-1g.10gb gets that MIG device — its GPU's node and its GPU and compute
// instance capability nodes — and nothing of the other GPUs or instances.
func TestDevicePluginMIGMixed(t *testing.T) {
	c := requireCluster(t)
	var mig fakehost.MIGInfo
	for _, m := range c.Host.MIGDevices() {
		if m.Profile == "1g.10gb" {
			mig = m
		}
	}
	if mig.UUID == "" {
		t.Fatal("the fake host has no 1g.10gb MIG device")
	}
	startPlugin(t, "envvar")
	p := newPod("mig")
	p.runtimeClass = "gpu"
	p.limits = map[string]string{"nvidia.com/mig-1g.10gb": "1"}
	p.script = enginetest.CDIProbe
	out := runPod(t, p)
	if ids := allocated(t, p.name); !slices.Equal(ids, []string{mig.UUID}) {
		t.Errorf("the kubelet allocated %v, want [%s]", ids, mig.UUID)
	}
	wantMIGNodes(t, out, mig)
}

// TestDevicePluginUnhealthyGPU: a GPU `gpu-ctk health mark` took out of service is refused
// when the pod's container is created, with the reason in the pod's events (the plugin, like
// NVIDIA's, knows nothing of the health file; every whole GPU is marked, so whichever the
// kubelet allocates is refused).
func TestDevicePluginUnhealthyGPU(t *testing.T) {
	c := requireCluster(t)
	ctk := func(args ...string) {
		cmd := exec.Command(filepath.Join(c.GPUBin, "gpu-ctk"), args...)
		cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+c.RuntimeConfig)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gpu-ctk %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { ctk("health", "clear", "all") })
	for _, g := range c.Host.Options.GPUs {
		if !g.MIGCurrent {
			ctk("health", "mark", g.UUID, "--reason", "fan failure (cluster test)")
		}
	}
	startPlugin(t, "envvar")
	p := newPod("sick")
	p.runtimeClass = "gpu"
	p.limits = map[string]string{"nvidia.com/gpu": "1"}
	apply(t, p)
	d := waitEvent(t, p.name, "fan failure (cluster test)")
	if !strings.Contains(d, "unhealthy device") || !strings.Contains(d, "gpu-ctk health clear") {
		t.Errorf("the pod's events do not say the device is unhealthy and how to return it:\n%s", d)
	}
}

// TestDevicePluginMultiTenant: on a node set for tenants who must not pick their GPUs
// (request.accept-envvar-when-unprivileged = false, the README's multi-tenant setting), a pod's
// own NVIDIA_VISIBLE_DEVICES gives it nothing, while the volume-mounts strategy — mounts only
// the kubelet can make — still gives the pod exactly the GPU allocated.
func TestDevicePluginMultiTenant(t *testing.T) {
	c := requireCluster(t)
	if err := c.SetMultiTenant(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.SetMultiTenant(false); err != nil {
			t.Error(err)
		}
	})
	t.Run("a pod's own NVIDIA_VISIBLE_DEVICES is ignored", func(t *testing.T) {
		p := newPod("tenant-env")
		p.runtimeClass = "gpu"
		p.env = map[string]string{"NVIDIA_VISIBLE_DEVICES": "0"}
		enginetest.WantGPUs(t, c.Host, runPod(t, p))
	})
	t.Run("volume-mounts still give the allocated GPU", func(t *testing.T) {
		startPlugin(t, "volume-mounts")
		p := newPod("tenant-vm")
		p.runtimeClass = "gpu"
		p.limits = map[string]string{"nvidia.com/gpu": "1"}
		out := runPod(t, p)
		ids := allocated(t, p.name)
		if len(ids) != 1 {
			t.Fatalf("the kubelet allocated %v to the pod, want one GPU", ids)
		}
		enginetest.WantGPUs(t, c.Host, out, gpuIndex(t, ids[0]))
	})
}

// wantMIGNodes: the probe's output (enginetest.CDIProbe) lists exactly the nodes of MIG device
// mig — its GPU's node and its two capability nodes — and the control and UVM nodes.
func wantMIGNodes(t *testing.T, out string, mig fakehost.MIGInfo) {
	t.Helper()
	want := []string{
		fmt.Sprintf("/dev/nvidia%d", mig.GPUMinor),
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", mig.GICapMinor),
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", mig.CICapMinor),
		"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl",
	}
	slices.Sort(want)
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "dev" {
			got = append(got, f[1])
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("device nodes in the pod:\n  got  %q\n  want %q\noutput:\n%s", got, want, out)
	}
}

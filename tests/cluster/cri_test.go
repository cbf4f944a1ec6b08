package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// TestTwoPodsOneGPU: two pods of RuntimeClass gpu run at once on the same GPU, each with it,
// and deleting them leaves no mount of theirs on the host (volumes, rootfs, sandbox network
// namespace and shm).
func TestTwoPodsOneGPU(t *testing.T) {
	c := requireCluster(t)
	var pods []pod
	for range 2 {
		p := newPod("shared")
		p.runtimeClass = "gpu"
		p.env = map[string]string{"NVIDIA_VISIBLE_DEVICES": "0"}
		p.script = probe + stayAfterProbe
		apply(t, p)
		pods = append(pods, p)
	}
	var ids []string
	for _, p := range pods {
		waitPod(t, p.name, 90*time.Second, "Running")
		out := waitOutput(t, p.name, "probe-end")
		enginetest.WantGPUs(t, c.Host, out, 0)
		ids = append(ids, podIDs(t, p.name)...)
	}
	for _, p := range pods {
		if phase := kubectl(t, "", "get", "pod", p.name, "-o", "jsonpath={.status.phase}"); phase != "Running" {
			t.Errorf("pod %s is %s while the other runs on the same GPU, want Running", p.name, phase)
		}
	}
	if len(mountsNaming(ids)) == 0 {
		t.Fatalf("no host mount names the running pods' ids %v: the check below would prove nothing", ids)
	}
	for _, p := range pods {
		deletePod(t, p.name)
	}
	if left := mountsNaming(ids); len(left) > 0 {
		t.Errorf("after deleting the pods, host mounts still name them:\n  %s", strings.Join(left, "\n  "))
	}
}

// podIDs returns the pod's UID and its container's id.
func podIDs(t *testing.T, name string) []string {
	t.Helper()
	uid := kubectl(t, "", "get", "pod", name, "-o", "jsonpath={.metadata.uid}")
	cid := kubectl(t, "", "get", "pod", name, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	_, cid, _ = strings.Cut(cid, "://")
	if uid == "" || cid == "" {
		t.Fatalf("pod %s: uid %q, container id %q", name, uid, cid)
	}
	return []string{uid, cid}
}

// mountsNaming lists the host's mount points that contain any of ids.
func mountsNaming(ids []string) []string {
	infos, _ := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) {
		for _, id := range ids {
			if strings.Contains(m.Mountpoint, id) {
				return false, false
			}
		}
		return true, false
	})
	var out []string
	for _, m := range infos {
		out = append(out, m.Mountpoint)
	}
	return out
}

// TestPodAnnotationIsNotContainerAnnotation: containerd's CDI reads a container's cdi.k8s.io
// annotations, which only the kubelet sets (from a device plugin's answer: TestDevicePlugin's
// cdi-annotations cases); a pod's own annotation of that form gives it no device.
func TestPodAnnotationIsNotContainerAnnotation(t *testing.T) {
	c := requireCluster(t)
	p := newPod("podannot")
	p.annotations = map[string]string{"cdi.k8s.io/tenant_x": "nvidia.com/gpu=0"}
	p.script = enginetest.CDIProbe
	out := runPod(t, p)
	enginetest.WantCDIDevices(t, c.Host, out, enginetest.CDIWant{})
}

// TestDRAServed: the cluster serves DRA's API (resource.k8s.io/v1) with the gates the DRA work
// builds on (consumable capacity, partitionable devices, device taints) on in the apiserver.
func TestDRAServed(t *testing.T) {
	requireCluster(t)
	kubectl(t, "", "get", "deviceclasses.v1.resource.k8s.io")
	metrics := kubectl(t, "", "get", "--raw", "/metrics")
	for _, gate := range []string{"DRAConsumableCapacity", "DRAPartitionableDevices", "DRADeviceTaints"} {
		found := false
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, `kubernetes_feature_enabled{name="`+gate+`"`) {
				found = true
				if !strings.HasSuffix(line, " 1") {
					t.Errorf("feature gate %s is off in the apiserver: %s", gate, line)
				}
			}
		}
		if !found {
			t.Errorf("the apiserver's metrics do not list the feature gate %s", gate)
		}
	}
}

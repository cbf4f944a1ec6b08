package cluster

import (
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// TestRuntimeClass: pods of RuntimeClass "gpu" (packaging/kubernetes/runtimeclass.yaml, the
// containerd runtime gpu-ctk registered) get exactly the GPUs NVIDIA_VISIBLE_DEVICES names.
func TestRuntimeClass(t *testing.T) {
	c := requireCluster(t)
	testCases := []struct {
		description string
		env         map[string]string
		gpus        []int
	}{
		{description: "NVIDIA_VISIBLE_DEVICES=1 gets /dev/nvidia1 only, its cgroup rule, libcuda and nvidia-smi",
			env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "1"}, gpus: []int{1}},
		{description: "without NVIDIA_VISIBLE_DEVICES no NVIDIA node",
			env: nil},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p := newPod("rc")
			p.runtimeClass, p.env = "gpu", tc.env
			out := runPod(t, p)
			enginetest.WantGPUs(t, c.Host, out, tc.gpus...)
			wantNVIDIASMI(t, out, len(tc.gpus) > 0)
		})
	}
}

// TestRuntimeClassUnknownGPU: a pod asking for a GPU the node does not have never starts, and
// gpu-runtime's message, naming the token and the GPUs that exist, is in its events.
func TestRuntimeClassUnknownGPU(t *testing.T) {
	requireCluster(t)
	p := newPod("rc-unknown")
	p.runtimeClass = "gpu"
	p.env = map[string]string{"NVIDIA_VISIBLE_DEVICES": "7"}
	apply(t, p)
	d := waitEvent(t, p.name, `unknown device "7" in NVIDIA_VISIBLE_DEVICES`)
	if !strings.Contains(d, "this host has GPUs 0") {
		t.Errorf("the event does not list the GPUs that exist:\n%s", d)
	}
	if phase := kubectl(t, "", "get", "pod", p.name, "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Errorf("pod phase %q, want Pending (its container never created)", phase)
	}
}

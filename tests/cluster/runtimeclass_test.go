package cluster

import (
	"strings"
	"testing"
	"time"

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

// TestRuntimeClassUnknownGPU: a pod asking for a GPU the node does not have never runs: its
// container fails to start (restartPolicy Never: the pod fails), and gpu-runtime's message,
// naming the token and the GPUs that exist, is in its events and its container's state.
func TestRuntimeClassUnknownGPU(t *testing.T) {
	requireCluster(t)
	p := newPod("rc-unknown")
	p.runtimeClass = "gpu"
	p.env = map[string]string{"NVIDIA_VISIBLE_DEVICES": "7"}
	apply(t, p)
	const msg = `unknown device "7" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-`
	d := waitEvent(t, p.name, msg)
	if !strings.Contains(d, "OCI runtime create failed: gpu-runtime: ") {
		t.Errorf("the event does not say gpu-runtime refused the create:\n%s", d)
	}
	waitPod(t, p.name, 60*time.Second, "Failed")
	state := kubectl(t, "", "get", "pod", p.name, "-o", "jsonpath={.status.containerStatuses[0].state.terminated.reason}: {.status.containerStatuses[0].state.terminated.message}")
	if !strings.HasPrefix(state, "StartError: ") || !strings.Contains(state, msg) {
		t.Errorf("the container's state %q, want a StartError with gpu-runtime's message", state)
	}
}

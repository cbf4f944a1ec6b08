package plan

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDockerDeviceListBounded: errors that name docker's --gpus device=<list> in the user's
// words show a list of 100,000 tokens cut, not whole (a 600 KB message before).
func TestDockerDeviceListBounded(t *testing.T) {
	tokens := manyTokens(100000)
	list := "1," + tokens
	cut := list[:256] + fmt.Sprintf("… (%d bytes)", len(list))
	h := healthHost()
	h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79)
	r := req(t, "NVIDIA_VISIBLE_DEVICES="+list, "NVIDIA_DRIVER_CAPABILITIES=utility")
	r.DockerGPUs = true
	_, err := Build(r, h, nil)
	want := `unknown device "t0", "t1", "t2", "t3", "t4" and 99995 more in docker run --gpus device=` + cut + `: this host has GPUs 0 (GPU-aaaa, in MIG mode), 1 (GPU-bbbb), 2 (GPU-cccc), 3 (GPU-dddd)` + "\n" +
		`unhealthy device: "1" in docker run --gpus device=` + cut + ` names GPU 1 (GPU-bbbb): ` + xid79 + `; ask for another device, or ` + clearFix + `GPU-bbbb`
	if err == nil || err.Error() != want {
		t.Fatalf("error (%d bytes) =\n%.2000s\nwant\n%s", len(fmt.Sprint(err)), err, want)
	}
	if len(err.Error()) > 2048 {
		t.Errorf("an error of %d bytes", len(err.Error()))
	}
	if strings.Count(err.Error(), "t99999") != 0 {
		t.Error("the last token is in the message")
	}
}

// TestDockerCountOnMIGHost (issue 25 item 10): docker run --gpus N on a host whose first N GPUs
// include one in MIG mode fails with one error in the flag's words — what --gpus N selected,
// which GPU is in MIG mode, and the flags that work — never naming NVIDIA_VISIBLE_DEVICES,
// which the user did not set; --gpus 3 on a two-GPU host is one error, not two joined.
func TestDockerCountOnMIGHost(t *testing.T) {
	const ways = `; ask for whole GPUs not in MIG mode: --gpus device=1, or MIG devices: --gpus '"device=0:0,0:1,0:2"' (this host has MIG devices 0:0 (MIG-0000, 3g.40gb), 0:1 (MIG-1111, 2g.20gb), 0:2 (MIG-2222, 1g.10gb)), or --gpus all (every GPU not in MIG mode and every MIG device)`
	testCases := []struct {
		description string
		devices     string
		want        string
		is          []error
	}{
		{description: "--gpus 1", devices: "0",
			want: `GPU in MIG mode requested whole: docker run --gpus 1 selects GPU 0; GPU 0 (GPU-aaaa) is in MIG mode and cannot be given whole` + ways,
			is:   []error{ErrMIGEnabled}},
		{description: "--gpus 2", devices: "0,1",
			want: `GPU in MIG mode requested whole: docker run --gpus 2 selects the first 2 GPUs, 0 and 1; GPU 0 (GPU-aaaa) is in MIG mode and cannot be given whole` + ways,
			is:   []error{ErrMIGEnabled}},
		{description: "--gpus 3: one error", devices: "0,1,2",
			want: `unknown device: docker run --gpus 3 asked for 3 GPUs, and this host has GPUs 0 (GPU-aaaa, in MIG mode), 1 (GPU-bbbb); GPU 0 (GPU-aaaa) is in MIG mode and cannot be given whole` + ways,
			is:   []error{ErrMIGEnabled, ErrUnknownDevice}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			r := req(t, "NVIDIA_VISIBLE_DEVICES="+tc.devices, "NVIDIA_DRIVER_CAPABILITIES=utility")
			r.DockerGPUs = true
			_, err := Build(r, migHost(), nil)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error =\n%v\nwant\n%s", err, tc.want)
			}
			for _, is := range tc.is {
				if !errors.Is(err, is) {
					t.Errorf("error does not wrap %v", is)
				}
			}
		})
	}
	// The same list from NVIDIA_VISIBLE_DEVICES (no docker hook) keeps naming the variable.
	_, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0,1", "NVIDIA_DRIVER_CAPABILITIES=utility"), migHost(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), `GPU in MIG mode requested whole: "0" in NVIDIA_VISIBLE_DEVICES names GPU 0`) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=0,1: error %v", err)
	}
}

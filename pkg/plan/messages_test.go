package plan

import (
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

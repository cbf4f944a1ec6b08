package discover_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// TestFindFeatureNodes: the DGX/HGX feature nodes of a fake host are found with their device
// numbers; the InfiniBand directory's other nodes are not NVIDIA's features' and are left out.
func TestFindFeatureNodes(t *testing.T) {
	opts := fakehost.Default(1)
	opts.Features = fakehost.Features{GDS: 2, MOFED: 2, GDRCopy: true, NVSwitches: 1}
	h := fakehost.BuildT(t, opts)
	if err := os.WriteFile(filepath.Join(h.DevRoot, "dev/infiniband/umad0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dn, err := discover.FindDeviceNodes(h.DevRoot)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p, n := range dn.Nodes {
		if !strings.HasPrefix(p, "/dev/nvidia") || strings.Contains(p, "-fs") || strings.Contains(p, "nvswitch") {
			got = append(got, fmt.Sprintf("%s %d:%d", p, n.Major, n.Minor))
		}
	}
	slices.Sort(got)
	want := []string{
		"/dev/gdrdrv 232:0", "/dev/infiniband/rdma_cm 10:58", "/dev/infiniband/uverbs0 231:192", "/dev/infiniband/uverbs1 231:193",
		"/dev/nvidia-fs0 233:0", "/dev/nvidia-fs1 233:1", "/dev/nvidia-nvswitch0 234:0", "/dev/nvidia-nvswitchctl 234:255",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("feature nodes:\n got %q\nwant %q", got, want)
	}
	if len(dn.Invalid) != 0 {
		t.Errorf("invalid: %v", dn.Invalid)
	}
	procDevices, err := os.ReadFile(filepath.Join(h.ProcRoot, fakehost.ProcDevicesRel))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"231 infiniband_verbs\n", "232 gdrdrv\n", "233 nvidia-fs\n", "234 nvidia-nvswitch\n"} {
		if !strings.Contains(string(procDevices), line) {
			t.Errorf("/proc/devices has no %q:\n%s", line, procDevices)
		}
	}
}

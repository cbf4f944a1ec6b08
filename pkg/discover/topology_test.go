package discover_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

func TestReadTopology(t *testing.T) {
	h := fakehost.BuildFilesT(t, fakehost.Default(3))
	testCases := []struct {
		description string
		busID       string
		want        discover.Topology
	}{
		{"GPU 0 under the first root", "00000000:07:00.0", discover.Topology{PCIeRoot: "pci0000:00", NUMANode: 0}},
		{"GPU 1 beside it", "00000000:0F:00.0", discover.Topology{PCIeRoot: "pci0000:00", NUMANode: 0}},
		{"GPU 2 under another root and NUMA node", "00000000:47:00.0", discover.Topology{PCIeRoot: "pci0000:40", NUMANode: 1}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := discover.ReadTopology(h.SysRoot, tc.busID)
			if err != nil || got != tc.want {
				t.Errorf("ReadTopology(%s) = %+v, %v; want %+v", tc.busID, got, err, tc.want)
			}
		})
	}
}

func TestReadTopologyRefuses(t *testing.T) {
	root := t.TempDir()
	links := filepath.Join(root, "sys/bus/pci/devices")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	// A link out of sys/devices, and a numa_node that is a FIFO (a read would block).
	if err := os.Symlink("../../../../etc/0000:07:00.0", filepath.Join(links, "0000:07:00.0")); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(root, "sys/devices/pci0000:00/0000:00:01.0/0000:0f:00.0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:01.0/0000:0f:00.0", filepath.Join(links, "0000:0f:00.0")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "numa_node"), []byte("one\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description, busID, wantErr string
	}{
		{"not a bus id", "07:00", `PCI bus id "07:00" is not of the form 00000000:07:00.0`},
		{"no such device", "00000000:47:00.0", "PCI device 0000:47:00.0: readlink " + links + "/0000:47:00.0: no such file or directory: check driver.sys-root"},
		{"link out of sys/devices", "00000000:07:00.0", "PCI device 0000:07:00.0: " + links + "/0000:07:00.0 links to " + root + "/etc/0000:07:00.0, not to /sys/devices/pci<domain>:<bus>/…/0000:07:00.0"},
		{"bad numa_node", "00000000:0F:00.0", `PCI device 0000:0f:00.0: NUMA node "one" is not a number`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := discover.ReadTopology(root, tc.busID)
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ReadTopology(%s) error:\n got %v\nwant %s", tc.busID, err, tc.wantErr)
			}
		})
	}
}

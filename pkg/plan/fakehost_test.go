package plan

import (
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
)

// TestBuildAgainstFakeRoots plans against real discovery of a fake driver root and device
// root (NVML facts taken from the fake host's options: one NVML load per process is
// exercised elsewhere).
func TestBuildAgainstFakeRoots(t *testing.T) {
	opts := fakehost.Default(8)
	h := fakehost.BuildT(t, opts)
	files, err := discover.FindDriverFiles(h.DriverRoot, opts.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := discover.FindDeviceNodes(h.DevRoot)
	if err != nil {
		t.Fatal(err)
	}
	var gpus []discover.GPU
	for _, g := range opts.GPUs {
		gpus = append(gpus, discover.GPU{Index: g.Index, Minor: g.Minor, UUID: g.UUID})
	}
	host := Host{Driver: discover.Driver{Version: opts.DriverVersion, GPUs: gpus}, Files: files, Devices: nodes}

	testCases := []struct {
		description string
		env         []string
		nodes       int
		libraries   int
	}{
		{"all GPUs, default capabilities", []string{"NVIDIA_VISIBLE_DEVICES=all"}, 8 + 3, 3 + 9},
		{"GPU 7 by UUID, utility", []string{"NVIDIA_VISIBLE_DEVICES=" + opts.GPUs[7].UUID, "NVIDIA_DRIVER_CAPABILITIES=utility"}, 1 + 1, 3},
		{"all capabilities", []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"}, 1 + 4, len(fakehost.Libraries(opts.DriverVersion))},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p, err := Build(req(t, tc.env...), host, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Edits.DeviceNodes) != tc.nodes {
				t.Errorf("nodes = %d, want %d: %v", len(p.Edits.DeviceNodes), tc.nodes, paths(p.Edits.DeviceNodes, func(n edits.DeviceNode) string { return n.Path }))
			}
			libs := 0
			for _, m := range p.Edits.Mounts {
				if !strings.HasPrefix(m.HostPath, h.DriverRoot+"/") {
					t.Errorf("mount source %s outside the driver root", m.HostPath)
				}
				if strings.Contains(m.ContainerPath, ".so.") {
					libs++
					if strings.Contains(m.ContainerPath, fakehost.DecoyDriverVersion) || strings.Contains(m.ContainerPath, "libfoo") {
						t.Errorf("decoy mounted: %s", m.ContainerPath)
					}
				}
			}
			if libs != tc.libraries {
				t.Errorf("libraries = %d, want %d", libs, tc.libraries)
			}
		})
	}
}

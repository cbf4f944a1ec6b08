package dra

import (
	"fmt"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

func TestSemVer(t *testing.T) {
	testCases := []struct {
		description, in, want string
		ok                    bool
	}{
		{"a driver version", "550.54.15", "550.54.15", true},
		{"a leading zero (535.104.05)", "535.104.05", "535.104.5", true},
		{"a CUDA version", "12.4", "12.4.0", true},
		{"a compute capability", "8.0", "8.0.0", true},
		{"empty", "", "", false},
		{"not numbers", "550.x", "", false},
		{"four parts", "1.2.3.4", "", false},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, ok := SemVer(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("SemVer(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDeviceName(t *testing.T) {
	for in, want := range map[string]string{
		"GPU-6a45d08a-8e63-43d9-5184-a5f2272bbd4e":         "gpu-6a45d08a-8e63-43d9-5184-a5f2272bbd4e",
		"MIG-20c8056b-6cb9-26db-bb82-a26efd881c92":         "mig-20c8056b-6cb9-26db-bb82-a26efd881c92",
		"MIG-GPU-6a45d08a-8e63-43d9-5184-a5f2272bbd4e/1/0": "mig-gpu-6a45d08a-8e63-43d9-5184-a5f2272bbd4e-1-0",
	} {
		if got := DeviceName(in); got != want {
			t.Errorf("DeviceName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestResourcesSlices: a node with more devices than a slice may hold (64 with taints)
// publishes them in several slices of one pool, in order; a node without any, one empty slice.
func TestResourcesSlices(t *testing.T) {
	var host plan.Host
	for i := range 70 {
		host.Driver.GPUs = append(host.Driver.GPUs, discover.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%04d", i)})
	}
	res, _ := Resources("node-a", host, config.Default())
	slices := res.Pools["node-a"].Slices
	if len(slices) != 2 || len(slices[0].Devices) != 64 || len(slices[1].Devices) != 6 || slices[1].Devices[0].Name != "gpu-0064" {
		t.Errorf("70 GPUs: %d slices", len(slices))
	}
	res, _ = Resources("node-a", plan.Host{}, config.Default())
	if s := res.Pools["node-a"].Slices; len(s) != 1 || len(s[0].Devices) != 0 {
		t.Errorf("no GPUs: %+v", s)
	}
}

package nvmlinfo

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// One NVML load per test process: go-nvml binds symbols process-wide. GPU 0 is in MIG mode
// with four MIG devices, two sharing a GPU instance; GPU 1 is MIG-capable with MIG off; a
// third GPU is excluded by the driver.
func TestQuery(t *testing.T) {
	opts := fakehost.Default(3)
	opts.GPUs[2].Excluded = true
	if err := opts.GPUs[0].AddMIGDevices("1c.3g.40gb", "2c.3g.40gb", "2g.20gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	opts.GPUs[1].PersistenceDisabled = true
	h := fakehost.BuildFilesT(t, opts)
	opts = h.Options
	d, err := Query(h.DriverRoot)
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != "550.54.15" || d.CUDAVersion != "12.4" {
		t.Errorf("driver %q cuda %q", d.Version, d.CUDAVersion)
	}
	if want := filepath.Join(h.LibDir, "libnvidia-ml.so.550.54.15"); d.NVMLPath != want {
		t.Errorf("NVMLPath = %s, want %s (resolved inside the driver root)", d.NVMLPath, want)
	}
	if len(d.GPUs) != 2 {
		t.Fatalf("gpus = %+v", d.GPUs)
	}
	for i, g := range d.GPUs {
		o := opts.GPUs[i]
		want := discover.GPU{Index: o.Index, Minor: o.Minor, UUID: o.UUID, Name: o.Name, BusID: o.BusID,
			ComputeCapability: map[int]string{8: "8.0", 9: "9.0"}[o.CCMajor], Brand: map[int]string{fakehost.BrandTesla: "tesla", fakehost.BrandNVIDIA: "nvidia"}[o.Brand],
			MIGCapable: o.MIGCapable, MIGCurrent: o.MIGCurrent, MIGPending: o.MIGPending,
			Persistence: map[bool]string{false: "enabled", true: "disabled"}[o.PersistenceDisabled]}
		for _, m := range h.MIGDevices() {
			if m.GPU == o.Index {
				want.MIGDevices = append(want.MIGDevices, discover.MIGDevice{Index: m.Index, UUID: m.UUID, GI: m.GI, CI: m.CI,
					Profile: m.Profile, MemoryMiB: m.MemoryMiB})
			}
		}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("gpu %d = %+v\nwant %+v", i, g, want)
		}
	}
	if want := []discover.ExcludedGPU{{UUID: opts.GPUs[2].UUID, BusID: opts.GPUs[2].BusID}}; !reflect.DeepEqual(d.Excluded, want) {
		t.Errorf("excluded = %+v, want %+v", d.Excluded, want)
	}
}

func TestQueryNVMLInitFailure(t *testing.T) {
	// A library that exists but is not loadable reports dlopen's reason.
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("not an ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Query(root)
	if !errors.Is(err, discover.ErrNVMLNotFound) || !strings.Contains(err.Error(), "load "+lib+": ") || !strings.HasSuffix(err.Error(), "; set driver.root in the gpu-runtime config (/etc/gpu-runtime/config.toml) to where the NVIDIA driver is installed") {
		t.Errorf("error = %v", err)
	}
}

func TestProfileName(t *testing.T) {
	const a100 = 81920 << 20
	testCases := []struct {
		c, g   int
		memMiB uint64
		me     bool
		want   string
	}{
		{1, 1, 9728, false, "1g.10gb"},
		{1, 1, 9728, true, "1g.10gb+me"},
		{3, 3, 40192, false, "3g.40gb"},
		{1, 3, 40192, false, "1c.3g.40gb"},
		{7, 7, 80896, false, "7g.80gb"},
	}
	for _, tc := range testCases {
		if got := ProfileName(tc.c, tc.g, MIGMemoryGB(a100, tc.memMiB), tc.me); got != tc.want {
			t.Errorf("%+v: %s", tc, got)
		}
	}
}

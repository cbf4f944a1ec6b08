package nvmlinfo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// One NVML load per test process: go-nvml binds symbols process-wide.
func TestQuery(t *testing.T) {
	opts := fakehost.Default(2)
	h := fakehost.BuildT(t, opts)
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
			ComputeCapability: map[int]string{8: "8.0", 9: "9.0"}[o.CCMajor], Brand: map[int]string{fakehost.BrandTesla: "tesla", fakehost.BrandNVIDIA: "nvidia"}[o.Brand]}
		if g != want {
			t.Errorf("gpu %d = %+v\nwant %+v", i, g, want)
		}
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

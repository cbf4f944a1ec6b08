package nvmlinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

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
			MIGCapable: o.MIGCapable, MIGCurrent: o.MIGCurrent, MIGPending: o.MIGPending, MemoryMiB: o.TotalMemoryMiB(),
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

// mockGPU is a go-nvml mock of GPU 3 in MIG mode, for what the fake NVML, which behaves as
// NVML documents, never does: fail, or leave a gap in the MIG device indexes. handles[i] is
// what nvmlDeviceGetMigDeviceHandleByIndex answers for index i below the maximum count, 7
// (NOT_FOUND past the slice); MIG device i is compute instance i%2 of GPU instance 1+i/2, and
// its UUID query answers uuidRet.
func mockGPU(handles []nvml.Return, uuidRet nvml.Return) (nvml.Interface, nvml.Device) {
	lib := &mock.Interface{
		ErrorStringFunc: func(r nvml.Return) string { return fmt.Sprintf("NVML error %d", int32(r)) },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
	}
	gpu := &mock.Device{
		GetMigModeFunc:           func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS },
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 7, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i >= len(handles) {
				return nil, nvml.ERROR_NOT_FOUND
			}
			if handles[i] != nvml.SUCCESS {
				return nil, handles[i]
			}
			return &mock.Device{
				IsMigDeviceHandleFunc:    func() (bool, nvml.Return) { return true, nvml.SUCCESS },
				GetUUIDFunc:              func() (string, nvml.Return) { return fmt.Sprintf("MIG-%d", i), uuidRet },
				GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 1 + i/2, nvml.SUCCESS },
				GetComputeInstanceIdFunc: func() (int, nvml.Return) { return i % 2, nvml.SUCCESS },
			}, nvml.SUCCESS
		},
	}
	return lib, gpu
}

func TestVisitMIGDevices(t *testing.T) {
	const ok, notFound = nvml.SUCCESS, nvml.ERROR_NOT_FOUND
	testCases := []struct {
		description string
		handles     []nvml.Return
		want        []int // the indexes visited
		wantErr     string
	}{
		{description: "every index up to the first NOT_FOUND", handles: []nvml.Return{ok, ok, ok}, want: []int{0, 1, 2}},
		{description: "none", want: nil},
		{description: "the enumeration ends at the first NOT_FOUND", handles: []nvml.Return{ok, notFound, ok, ok}, want: []int{0}},
		{description: "a failed handle fails the walk", handles: []nvml.Return{ok, nvml.ERROR_UNKNOWN},
			want: []int{0}, wantErr: "NVML query failed: get MIG devices of GPU 3: "},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			lib, gpu := mockGPU(tc.handles, nvml.SUCCESS)
			var got []int
			err := visitMIGDevices(device.New(lib), gpu, 3, func(i int, _ device.MigDevice) error {
				got = append(got, i)
				return nil
			})
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("visited %v, want %v", got, tc.want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error = %v", err)
			case tc.wantErr != "" && (!errors.Is(err, discover.ErrNVML) || !strings.HasPrefix(fmt.Sprint(err), tc.wantErr)):
				t.Errorf("error = %v, want ErrNVML starting %q", err, tc.wantErr)
			}
		})
	}
}

// A MIG device NVML fails to describe fails the query with its "G:I" name and NVML's
// error string, as an ErrNVML (go-nvlib, which walks the devices, would flatten it to text).
func TestQueryMIGDeviceError(t *testing.T) {
	lib, gpu := mockGPU([]nvml.Return{nvml.SUCCESS, nvml.SUCCESS}, nvml.ERROR_GPU_IS_LOST)
	g := discover.GPU{Index: 3}
	err := queryMIG(lib, device.New(lib), gpu, &g)
	if want := "MIG device 3:0: NVML query failed: get UUID: NVML error 15"; !errors.Is(err, discover.ErrNVML) || fmt.Sprint(err) != want {
		t.Errorf("error = %v, want ErrNVML %q", err, want)
	}
}

func TestMIGDevicesOf(t *testing.T) {
	const ok = nvml.SUCCESS
	testCases := []struct {
		description string
		handles     []nvml.Return
		gi, ci      uint32
		want        []string // "<index> <UUID> <GI>/<CI>"
	}{
		{"a GPU instance", []nvml.Return{ok, ok, ok, ok}, 2, NoInstance, []string{"2 MIG-2 2/0", "3 MIG-3 2/1"}},
		{"a compute instance", []nvml.Return{ok, ok, ok, ok}, 2, 1, []string{"3 MIG-3 2/1"}},
		{"ids that name no MIG device", []nvml.Return{ok, ok}, 2, NoInstance, nil},
		{"a failed walk keeps what it found", []nvml.Return{ok, ok, ok, nvml.ERROR_UNKNOWN}, 2, NoInstance, []string{"2 MIG-2 2/0"}},
		{"past the end of the enumeration", []nvml.Return{ok, ok, nvml.ERROR_NOT_FOUND, ok}, 2, NoInstance, nil},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			lib, gpu := mockGPU(tc.handles, nvml.SUCCESS)
			var got []string
			for _, d := range migDevicesOf(device.New(lib), gpu, tc.gi, tc.ci) {
				got = append(got, fmt.Sprintf("%d %s %d/%d", d.Index, d.UUID, d.GI, d.CI))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MIG devices = %q, want %q", got, tc.want)
			}
		})
	}
}

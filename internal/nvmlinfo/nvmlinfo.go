// Package nvmlinfo asks NVML — the driver's libnvidia-ml.so.1, loaded with dlopen from inside
// a driver root through github.com/NVIDIA/go-nvml — for the driver version, CUDA version and
// GPUs. It is the only cgo code in the project: gpu-ctk links it; gpu-runtime stays static and
// runs `gpu-ctk info --json` when its discovery cache misses. go-nvml binds NVML's symbols
// process-wide, so a process can query one driver library only.
package nvmlinfo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// DriverRootHint ends every error about an NVML library that cannot be found or loaded.
const DriverRootHint = "set driver.root in the gpu-runtime config (" + config.DefaultPath + ") to where the NVIDIA driver is installed"

// QueryContext is Query bounded by ctx: NVML cannot be interrupted, so on a hung driver the
// query is left behind (the process is short-lived) and ctx's error returned.
func QueryContext(ctx context.Context, root string) (discover.Driver, error) {
	type answer struct {
		driver discover.Driver
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		d, err := Query(root)
		done <- answer{d, err}
	}()
	select {
	case a := <-done:
		return a.driver, a.err
	case <-ctx.Done():
		return discover.Driver{}, ctx.Err()
	}
}

// load finds NVML under the driver root, loads and initialises it. The caller shuts lib down
// and closes probe, the library's own dlopen handle.
func load(root string) (lib nvml.Interface, probe *dl.DynamicLibrary, libPath string, err error) {
	if libPath, err = discover.FindNVML(root); err != nil {
		return nil, nil, "", fmt.Errorf("%w; %s", err, DriverRootHint)
	}
	// go-nvml reports any dlopen failure as ERROR_LIBRARY_NOT_FOUND; open it once ourselves
	// to keep dlerror's text.
	probe = dl.New(libPath, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := probe.Open(); err != nil {
		return nil, nil, "", fmt.Errorf("%w: load %s: %w; %s", discover.ErrNVMLNotFound, libPath, err, DriverRootHint)
	}
	lib = nvml.New(nvml.WithLibraryPath(libPath))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		_ = probe.Close()
		return nil, nil, "", fmt.Errorf("%w: initialize NVML from %s: %s", discover.ErrNVML, libPath, lib.ErrorString(ret))
	}
	return lib, probe, libPath, nil
}

// Query loads NVML from the driver root and reads the driver and every GPU.
func Query(root string) (discover.Driver, error) {
	lib, probe, libPath, err := load(root)
	if err != nil {
		return discover.Driver{}, err
	}
	defer func() { _ = probe.Close() }()
	defer func() { _ = lib.Shutdown() }() // nothing to do about a failed shutdown

	q := &queries{lib: lib}
	d := discover.Driver{NVMLPath: libPath, Version: get(q, "get driver version", lib.SystemGetDriverVersion)}
	cuda := get(q, "get CUDA driver version", lib.SystemGetCudaDriverVersion)
	count := get(q, "count devices", lib.DeviceGetCount)
	if q.err != nil {
		return discover.Driver{}, q.err
	}
	d.CUDAVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)
	devs := device.New(lib)
	for i := 0; i < count; i++ {
		gpu, err := queryGPU(lib, devs, i)
		if err != nil {
			return discover.Driver{}, err
		}
		d.GPUs = append(d.GPUs, gpu)
	}
	if d.Excluded, err = queryExcluded(lib); err != nil {
		return discover.Driver{}, err
	}
	return d, nil
}

// queryExcluded lists the GPUs the driver excludes (NVreg_ExcludedGpus), which NVML does not
// count among its devices; none from an NVML that predates the call.
func queryExcluded(lib nvml.Interface) ([]discover.ExcludedGPU, error) {
	if lib.Extensions().LookupSymbol("nvmlGetExcludedDeviceCount") != nil {
		return nil, nil
	}
	count, ret := lib.GetExcludedDeviceCount()
	if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
		return nil, nil
	}
	if ret != nvml.SUCCESS {
		return nil, nvmlErr(lib, "count excluded GPUs", ret)
	}
	var out []discover.ExcludedGPU
	for i := 0; i < count; i++ {
		info, ret := lib.GetExcludedDeviceInfoByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(lib, fmt.Sprintf("get excluded GPU %d", i), ret)
		}
		out = append(out, discover.ExcludedGPU{UUID: cString(info.Uuid[:]), BusID: cString(info.PciInfo.BusId[:])})
	}
	return out, nil
}

func queryGPU(lib nvml.Interface, devs device.Interface, i int) (discover.GPU, error) {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get GPU %d", i), ret)
	}
	q := &queries{lib: lib, of: fmt.Sprintf(" of GPU %d", i)}
	g := discover.GPU{
		Index: i,
		UUID:  get(q, "get UUID", dev.GetUUID),
		Minor: get(q, "get minor number", dev.GetMinorNumber),
		Name:  get(q, "get name", dev.GetName),
		Brand: BrandName(get(q, "get brand", dev.GetBrand)),
		ComputeCapability: get(q, "get compute capability", func() (string, nvml.Return) {
			major, minor, ret := dev.GetCudaComputeCapability()
			return fmt.Sprintf("%d.%d", major, minor), ret
		}),
	}
	pci := get(q, "get PCI info", dev.GetPciInfo)
	g.MemoryMiB = int(min(get(q, "get memory info", dev.GetMemoryInfo).Total>>20, math.MaxInt32))
	if q.err != nil {
		return discover.GPU{}, q.err
	}
	g.BusID = cString(pci.BusId[:])
	// Persistence mode only informs (gpu-ctk doctor); a driver that cannot say is not an error.
	switch pm, ret := dev.GetPersistenceMode(); {
	case ret == nvml.SUCCESS && pm == nvml.FEATURE_ENABLED:
		g.Persistence = "enabled"
	case ret == nvml.SUCCESS:
		g.Persistence = "disabled"
	}
	if err := queryMIG(lib, devs, dev, &g); err != nil {
		return discover.GPU{}, err
	}
	return g, nil
}

// queries keeps the first error of a run of NVML queries (get); later ones are not asked.
type queries struct {
	lib nvml.Interface
	of  string // what the queries are about, for the error: " of GPU 3"
	err error
}

// get returns what query answers; zero when it fails ("<what><of>: <NVML's error>") or q has.
func get[T any](q *queries, what string, query func() (T, nvml.Return)) T {
	var zero T
	if q.err != nil {
		return zero
	}
	v, ret := query()
	if ret != nvml.SUCCESS {
		q.err = nvmlErr(q.lib, what+q.of, ret)
		return zero
	}
	return v
}

// queryMIG reads a GPU's MIG mode and, in MIG mode, its MIG devices, which go-nvlib
// enumerates and names. A GPU without MIG (NOT_SUPPORTED) is left as it is.
func queryMIG(lib nvml.Interface, devs device.Interface, dev nvml.Device, g *discover.GPU) error {
	// Read by hand: go-nvlib's IsMigCapable and IsMigEnabled do not report the pending mode.
	current, pending, ret := dev.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return nil
	}
	if ret != nvml.SUCCESS {
		return nvmlErr(lib, fmt.Sprintf("get MIG mode of GPU %d", g.Index), ret)
	}
	g.MIGCapable = true
	g.MIGCurrent, g.MIGPending = current == nvml.DEVICE_MIG_ENABLE, pending == nvml.DEVICE_MIG_ENABLE
	if !g.MIGCurrent {
		return nil
	}
	return visitMIGDevices(devs, dev, g.Index, func(i int, mig device.MigDevice) error {
		d, err := queryMIGDevice(lib, mig)
		if err != nil {
			return fmt.Errorf("MIG device %d:%d: %w", g.Index, i, err)
		}
		d.Index = i
		g.MIGDevices = append(g.MIGDevices, d)
		return nil
	})
}

// visitMIGDevices calls visit with each MIG device of a GPU in MIG mode and its index, the I
// of its "G:I" name, in NVML's order. visit's error is returned as it is; the walk's wraps
// discover.ErrNVML.
func visitMIGDevices(devs device.Interface, gpu nvml.Device, gpuIndex int, visit func(int, device.MigDevice) error) error {
	d, err := devs.NewDevice(gpu)
	if err != nil {
		return fmt.Errorf("%w: get MIG devices of GPU %d: %w", discover.ErrNVML, gpuIndex, err)
	}
	// Around go-nvlib's walk, which wraps visit's error as text (%v), losing discover.ErrNVML,
	// and goes on past an index NVML answers NOT_FOUND for, while the enumeration I counts
	// positions in ends there: a device after such a gap ends the walk.
	var visitErr error
	next, ended := 0, false
	err = d.VisitMigDevices(func(i int, mig device.MigDevice) error {
		if i != next {
			ended = true
			return errEnumerationEnded
		}
		next++
		visitErr = visit(i, mig)
		return visitErr
	})
	switch {
	case visitErr != nil:
		return visitErr
	case ended:
		return nil
	case err != nil:
		return fmt.Errorf("%w: get MIG devices of GPU %d: %w", discover.ErrNVML, gpuIndex, err)
	}
	return nil
}

// errEnumerationEnded stops go-nvlib's walk of MIG devices at the end of NVML's enumeration.
var errEnumerationEnded = errors.New("end of NVML's MIG device enumeration")

// queryMIGDevice reads one MIG device: its profile from go-nvlib (the name NVIDIA's tools
// print), the rest from NVML.
func queryMIGDevice(lib nvml.Interface, mig device.MigDevice) (discover.MIGDevice, error) {
	q := &queries{lib: lib}
	d := discover.MIGDevice{
		UUID:      get(q, "get UUID", mig.GetUUID),
		GI:        get(q, "get GPU instance id", mig.GetGpuInstanceId),
		CI:        get(q, "get compute instance id", mig.GetComputeInstanceId),
		MemoryMiB: int(min(get(q, "get attributes", mig.GetAttributes).MemorySizeMB, math.MaxInt32)),
	}
	if q.err != nil {
		return d, q.err
	}
	profile, err := mig.GetProfile()
	if err != nil {
		return d, fmt.Errorf("%w: get profile: %w", discover.ErrNVML, err)
	}
	d.Profile = profile.String()
	return d, nil
}

func nvmlErr(lib nvml.Interface, what string, ret nvml.Return) error {
	return fmt.Errorf("%w: %s: %s", discover.ErrNVML, what, lib.ErrorString(ret))
}

func cString[T int8 | uint8](b []T) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// BrandName maps NVML's brand enum to the lowercase names used by NVIDIA_REQUIRE_* brand= terms.
func BrandName(b nvml.BrandType) string {
	names := map[nvml.BrandType]string{
		nvml.BRAND_UNKNOWN: "unknown", nvml.BRAND_QUADRO: "quadro", nvml.BRAND_TESLA: "tesla",
		nvml.BRAND_NVS: "nvs", nvml.BRAND_GRID: "grid", nvml.BRAND_GEFORCE: "geforce",
		nvml.BRAND_TITAN: "titan", nvml.BRAND_NVIDIA_VAPPS: "nvidiavapps", nvml.BRAND_NVIDIA_VPC: "nvidiavpc",
		nvml.BRAND_NVIDIA_VCS: "nvidiavcs", nvml.BRAND_NVIDIA_VWS: "nvidiavws",
		nvml.BRAND_NVIDIA_CLOUD_GAMING: "nvidiacloudgaming", nvml.BRAND_QUADRO_RTX: "quadrortx",
		nvml.BRAND_NVIDIA_RTX: "nvidiartx", nvml.BRAND_NVIDIA: "nvidia", nvml.BRAND_GEFORCE_RTX: "geforcertx",
		nvml.BRAND_TITAN_RTX: "titanrtx",
	}
	if n, ok := names[b]; ok {
		return n
	}
	return "unknown"
}

// Package nvmlinfo asks NVML — the driver's libnvidia-ml.so.1, loaded with dlopen from inside
// a driver root through github.com/NVIDIA/go-nvml — for the driver version, CUDA version and
// GPUs. It is the only cgo code in the project: gpu-ctk links it; gpu-runtime stays static and
// runs `gpu-ctk info --json` when its discovery cache misses. go-nvml binds NVML's symbols
// process-wide, so a process can query one driver library only.
package nvmlinfo

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// DriverRootHint ends every error about an NVML library that cannot be found or loaded.
const DriverRootHint = "set driver.root in the gpu-runtime config (" + config.DefaultPath + ") to where the NVIDIA driver is installed"

// QueryContext is Query bounded by ctx, as discover.Options.Query wants it: NVML cannot be
// interrupted, so on a hung driver the query is left behind (the process is short-lived) and
// ctx's error is returned.
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

	d := discover.Driver{NVMLPath: libPath}
	version, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return discover.Driver{}, nvmlErr(lib, "get driver version", ret)
	}
	d.Version = version
	cuda, ret := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return discover.Driver{}, nvmlErr(lib, "get CUDA driver version", ret)
	}
	d.CUDAVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)

	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return discover.Driver{}, nvmlErr(lib, "count devices", ret)
	}
	for i := 0; i < count; i++ {
		gpu, err := queryGPU(lib, i)
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
// count among its devices. Drivers whose NVML predates the call have none to report.
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

func queryGPU(lib nvml.Interface, i int) (discover.GPU, error) {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get GPU %d", i), ret)
	}
	g := discover.GPU{Index: i}
	if g.UUID, ret = lib.DeviceGetUUID(dev); ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get UUID of GPU %d", i), ret)
	}
	if g.Minor, ret = lib.DeviceGetMinorNumber(dev); ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get minor number of GPU %d", i), ret)
	}
	if g.Name, ret = lib.DeviceGetName(dev); ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get name of GPU %d", i), ret)
	}
	brand, ret := lib.DeviceGetBrand(dev)
	if ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get brand of GPU %d", i), ret)
	}
	g.Brand = BrandName(brand)
	major, minor, ret := lib.DeviceGetCudaComputeCapability(dev)
	if ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get compute capability of GPU %d", i), ret)
	}
	g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	pci, ret := lib.DeviceGetPciInfo(dev)
	if ret != nvml.SUCCESS {
		return discover.GPU{}, nvmlErr(lib, fmt.Sprintf("get PCI info of GPU %d", i), ret)
	}
	g.BusID = cString(pci.BusId[:])
	// Persistence mode only informs (gpu-ctk doctor); a driver that cannot say is not an error.
	switch pm, ret := dev.GetPersistenceMode(); {
	case ret == nvml.SUCCESS && pm == nvml.FEATURE_ENABLED:
		g.Persistence = "enabled"
	case ret == nvml.SUCCESS:
		g.Persistence = "disabled"
	}
	if err := queryMIG(lib, dev, &g); err != nil {
		return discover.GPU{}, err
	}
	return g, nil
}

// queryMIG reads a GPU's MIG mode and, in MIG mode, its MIG devices in NVML's enumeration
// order (nvmlDeviceGetMigDeviceHandleByIndex up to the maximum, stopping at NOT_FOUND).
// A GPU without MIG (NOT_SUPPORTED) is left as it is.
func queryMIG(lib nvml.Interface, dev nvml.Device, g *discover.GPU) error {
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
	max, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nvmlErr(lib, fmt.Sprintf("get the MIG device count of GPU %d", g.Index), ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nvmlErr(lib, fmt.Sprintf("get memory of GPU %d", g.Index), ret)
	}
	for i := 0; i < max; i++ {
		mig, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			break
		}
		if ret != nvml.SUCCESS {
			return nvmlErr(lib, fmt.Sprintf("get MIG device %d:%d", g.Index, i), ret)
		}
		d, err := queryMIGDevice(lib, dev, mig, mem.Total)
		if err != nil {
			return fmt.Errorf("MIG device %d:%d: %w", g.Index, i, err)
		}
		d.Index = i
		g.MIGDevices = append(g.MIGDevices, d)
	}
	return nil
}

// queryMIGDevice reads one MIG device. Its profile name is derived as go-nvlib and NVIDIA's
// tools name it: "<C>c.<G>g.<GB>gb" ("<G>g.<GB>gb" when the compute instance takes the
// whole GPU instance), "+me" for the media-extension GPU instance profiles.
func queryMIGDevice(lib nvml.Interface, parent, mig nvml.Device, parentMemory uint64) (discover.MIGDevice, error) {
	var d discover.MIGDevice
	var ret nvml.Return
	if d.UUID, ret = mig.GetUUID(); ret != nvml.SUCCESS {
		return d, nvmlErr(lib, "get UUID", ret)
	}
	if d.GI, ret = mig.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return d, nvmlErr(lib, "get GPU instance id", ret)
	}
	if d.CI, ret = mig.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return d, nvmlErr(lib, "get compute instance id", ret)
	}
	attrs, ret := mig.GetAttributes()
	if ret != nvml.SUCCESS {
		return d, nvmlErr(lib, "get attributes", ret)
	}
	d.MemoryMiB = int(min(attrs.MemorySizeMB, math.MaxInt32))
	me := false
	if gi, ret := parent.GetGpuInstanceById(d.GI); ret == nvml.SUCCESS {
		if info, ret := gi.GetInfo(); ret == nvml.SUCCESS {
			for _, p := range []int{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1} {
				if pi, ret := parent.GetGpuInstanceProfileInfo(p); ret == nvml.SUCCESS && pi.Id == info.ProfileId {
					me = true
				}
			}
		}
	}
	d.Profile = ProfileName(int(attrs.ComputeInstanceSliceCount), int(attrs.GpuInstanceSliceCount), MIGMemoryGB(parentMemory, attrs.MemorySizeMB), me)
	return d, nil
}

// MIGMemoryGB is the GB figure of a MIG profile name: the device's share of the parent's
// memory rounded up to eighths, times the parent's memory in whole GiB, rounded (go-nvlib's
// getMigMemorySizeGB, what nvidia-smi prints).
func MIGMemoryGB(parentTotalBytes, migMemoryMiB uint64) int {
	const eighths = 8
	fraction := float64(migMemoryMiB) * (1 << 20) / float64(parentTotalBytes)
	fraction = math.Ceil(fraction*eighths) / eighths
	totalGiB := float64((parentTotalBytes + (1 << 30) - 1) / (1 << 30))
	return int(math.Round(fraction * totalGiB))
}

// ProfileName writes a MIG profile name from compute and GPU instance slice counts.
func ProfileName(computeSlices, gpuSlices, gb int, mediaExtensions bool) string {
	name := fmt.Sprintf("%dg.%dgb", gpuSlices, gb)
	if computeSlices != gpuSlices {
		name = fmt.Sprintf("%dc.%s", computeSlices, name)
	}
	if mediaExtensions {
		name += "+me"
	}
	return name
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

// Package nvmlinfo asks NVML — the driver's libnvidia-ml.so.1, loaded with dlopen from inside
// a driver root through github.com/NVIDIA/go-nvml — for the driver version, CUDA version and
// GPUs. It is the only cgo code in the project: gpu-ctk links it; gpu-runtime stays static and
// runs `gpu-ctk info --json` when its discovery cache misses. go-nvml binds NVML's symbols
// process-wide, so a process can query one driver library only.
package nvmlinfo

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// DriverRootHint ends every error about an NVML library that cannot be found or loaded.
const DriverRootHint = "set driver.root in the gpu-runtime config (" + config.DefaultPath + ") to where the NVIDIA driver is installed"

// Query loads NVML from the driver root and reads the driver and every GPU.
func Query(root string) (discover.Driver, error) {
	libPath, err := discover.FindNVML(root)
	if err != nil {
		return discover.Driver{}, fmt.Errorf("%w; %s", err, DriverRootHint)
	}
	// go-nvml reports any dlopen failure as ERROR_LIBRARY_NOT_FOUND; open it once ourselves
	// to keep dlerror's text.
	probe := dl.New(libPath, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := probe.Open(); err != nil {
		return discover.Driver{}, fmt.Errorf("%w: load %s: %w; %s", discover.ErrNVMLNotFound, libPath, err, DriverRootHint)
	}
	defer func() { _ = probe.Close() }()

	lib := nvml.New(nvml.WithLibraryPath(libPath))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return discover.Driver{}, fmt.Errorf("%w: initialize NVML from %s: %s", discover.ErrNVML, libPath, lib.ErrorString(ret))
	}
	defer lib.Shutdown()

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
	return d, nil
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
	return g, nil
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

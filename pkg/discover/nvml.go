package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/gpu-runtime/gpu-runtime/pkg/ldcache"
)

const nvmlSONAME = "libnvidia-ml.so.1"

// NVMLCandidates returns the host paths where libnvidia-ml.so.1 is looked for, in order:
// the driver root's ld.so.cache entries, then the standard library directories.
func NVMLCandidates(root string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if entries, err := ldcache.Load(inRootLexical(root, "/etc/ld.so.cache")); err == nil {
		for _, e := range entries {
			if e.Name == nvmlSONAME && e.Bits != 32 {
				add(inRootLexical(root, e.Path))
			}
		}
	}
	for _, dir := range libDirs64 {
		add(inRootLexical(root, path.Join(dir, nvmlSONAME)))
	}
	return out
}

// FindNVML returns the first loadable candidate path (symlinks resolved inside the root).
func FindNVML(root string) (string, error) {
	candidates := NVMLCandidates(root)
	var tried []string
	for _, c := range candidates {
		resolved, err := resolveInRoot(root, c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", c, shortErr(err)))
			continue
		}
		return resolved, nil
	}
	return "", fmt.Errorf("%w: load %s from driver root %q: tried %s; set driver.root in the gpu-runtime config (%s) to where the NVIDIA driver is installed",
		ErrNVMLNotFound, nvmlSONAME, root, strings.Join(tried, ", "), "/etc/gpu-runtime/config.toml")
}

func shortErr(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "not found"
	}
	return err.Error()
}

// QueryNVML loads NVML from the driver root and reads the driver and every GPU.
func QueryNVML(root string) (Driver, error) {
	libPath, err := FindNVML(root)
	if err != nil {
		return Driver{}, err
	}
	// go-nvml reports any dlopen failure as ERROR_LIBRARY_NOT_FOUND; open it once ourselves
	// to keep dlerror's text.
	probe := dl.New(libPath, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := probe.Open(); err != nil {
		return Driver{}, fmt.Errorf("%w: load %s: %w; set driver.root in /etc/gpu-runtime/config.toml", ErrNVMLNotFound, libPath, err)
	}
	defer func() { _ = probe.Close() }()

	lib := nvml.New(nvml.WithLibraryPath(libPath))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return Driver{}, fmt.Errorf("%w: initialize NVML from %s: %s", ErrNVML, libPath, lib.ErrorString(ret))
	}
	defer lib.Shutdown()

	d := Driver{NVMLPath: libPath}
	version, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return Driver{}, nvmlErr(lib, "get driver version", ret)
	}
	d.Version = version
	cuda, ret := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return Driver{}, nvmlErr(lib, "get CUDA driver version", ret)
	}
	d.CUDAVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)

	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Driver{}, nvmlErr(lib, "count devices", ret)
	}
	for i := 0; i < count; i++ {
		gpu, err := queryGPU(lib, i)
		if err != nil {
			return Driver{}, err
		}
		d.GPUs = append(d.GPUs, gpu)
	}
	return d, nil
}

func queryGPU(lib nvml.Interface, i int) (GPU, error) {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return GPU{}, nvmlErr(lib, fmt.Sprintf("get GPU %d", i), ret)
	}
	g := GPU{Index: i}
	if g.UUID, ret = lib.DeviceGetUUID(dev); ret != nvml.SUCCESS {
		return GPU{}, nvmlErr(lib, fmt.Sprintf("get UUID of GPU %d", i), ret)
	}
	if g.Minor, ret = lib.DeviceGetMinorNumber(dev); ret != nvml.SUCCESS {
		return GPU{}, nvmlErr(lib, fmt.Sprintf("get minor number of GPU %d", i), ret)
	}
	if g.Name, ret = lib.DeviceGetName(dev); ret != nvml.SUCCESS {
		return GPU{}, nvmlErr(lib, fmt.Sprintf("get name of GPU %d", i), ret)
	}
	brand, ret := lib.DeviceGetBrand(dev)
	if ret != nvml.SUCCESS {
		return GPU{}, nvmlErr(lib, fmt.Sprintf("get brand of GPU %d", i), ret)
	}
	g.Brand = BrandName(brand)
	major, minor, ret := lib.DeviceGetCudaComputeCapability(dev)
	if ret != nvml.SUCCESS {
		return GPU{}, nvmlErr(lib, fmt.Sprintf("get compute capability of GPU %d", i), ret)
	}
	g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	pci, ret := lib.DeviceGetPciInfo(dev)
	if ret != nvml.SUCCESS {
		return GPU{}, nvmlErr(lib, fmt.Sprintf("get PCI info of GPU %d", i), ret)
	}
	g.BusID = cString(pci.BusId[:])
	return g, nil
}

func nvmlErr(lib nvml.Interface, what string, ret nvml.Return) error {
	return fmt.Errorf("%w: %s: %s", ErrNVML, what, lib.ErrorString(ret))
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

// inRootLexical joins a root-relative absolute path onto root without resolving anything.
func inRootLexical(root, p string) string {
	if root == "/" || root == "" {
		return path.Clean("/" + p)
	}
	return path.Join(root, p)
}

// resolveInRoot resolves hostPath (which lies under root) with every symlink interpreted
// inside root, and checks that the result exists.
func resolveInRoot(root, hostPath string) (string, error) {
	rel := strings.TrimPrefix(hostPath, strings.TrimSuffix(root, "/"))
	resolved, err := securejoin.SecureJoin(root, rel)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(resolved); err != nil {
		return "", err
	}
	return resolved, nil
}

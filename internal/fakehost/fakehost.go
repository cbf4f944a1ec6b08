// Package fakehost builds a fake NVIDIA GPU host in a directory, for tests on machines without
// a GPU: real character device nodes (mknod), tiny real ELF driver libraries with the real
// driver SONAMEs, a fake NVML library that github.com/NVIDIA/go-nvml loads through the normal
// dlopen path and that reports the GPUs it was built for, a fake libcuda, a real ld.so.cache
// written by the host's ldconfig, driver binaries as shell scripts, firmware, the
// nvidia-persistenced socket and the graphics ICD files.
//
// It also plays the driver's part of the host: the /proc files the kernel module writes
// (proc/driver/nvidia/..., proc/devices, proc/driver/nvidia-caps/mig-minors) under
// Host.ProcRoot, MIG devices with their capability device nodes, and NVML events (Xids) that
// a test appends to a file (see events.go).
//
// Everything it writes stays under the directory given to Build; it never touches the rest of
// the host. Build needs root (for mknod and ldconfig -r, which chroots), gcc and ldconfig.
//
// A process can use the fake NVML of only one fake host: go-nvml's calls are bound, on first
// use, to the first libnvidia-ml the process loads, and that library stays loaded even after
// nvml.Shutdown. Tests that load the NVML of several different hosts must do so in separate
// processes (this package's own tests re-run the test binary); a fake NVML detects the mix-up
// and fails nvmlInit with NVML_ERROR_UNKNOWN rather than report another host's GPUs.
package fakehost

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
)

// Device numbers of the fake host. NVIDIAMajor and the minors are fixed by the real driver;
// the other majors are from the dynamic range (254 down), as on a real host, where the nvidia
// module registers nvidia-caps and nvidia-caps-imex-channels when it loads and nvidia-uvm,
// loaded later, gets a lower number.
const (
	NVIDIAMajor        = 195
	NVIDIACtlMinor     = 255
	NVIDIAModesetMinor = 254
	UVMMajor           = 235
	// DefaultCapsMajor is the nvidia-caps major unless Options.CapsMajor says otherwise.
	DefaultCapsMajor = 237
	// IMEXChannelsMajor is the nvidia-caps-imex-channels major.
	IMEXChannelsMajor = 236
)

// Values of NVML's nvmlBrandType_t used by Default.
const (
	BrandTesla  = 2
	BrandNVIDIA = 14
)

// Paths of a fake host's files, relative to its driver root.
const (
	BinDirRel             = "usr/bin"
	LDSOConfRel           = "etc/ld.so.conf"
	LDSOCacheRel          = "etc/ld.so.cache"
	PersistencedSocketRel = "var/run/nvidia-persistenced/socket"
	VulkanICDRel          = "usr/share/vulkan/icd.d/nvidia_icd.json"
	EGLVendorRel          = "usr/share/glvnd/egl_vendor.d/10_nvidia.json"
	OpenCLVendorRel       = "etc/OpenCL/vendors/nvidia.icd"
)

// GPU describes one fake GPU.
type GPU struct {
	// Index orders the GPUs of a host: 0..n-1. It is the GPU's NVML index, except that NVML,
	// like the real one, does not enumerate Excluded GPUs, so the GPUs after an excluded one
	// move up (Host.NVMLIndex).
	Index            int
	Minor            int    // device minor: /dev/nvidia<Minor>, 0-253
	UUID             string // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
	Name             string // e.g. "NVIDIA A100-SXM4-80GB"
	Brand            int    // nvmlBrandType_t value, e.g. BrandTesla
	BusID            string // "00000000:0F:00.0"; NVML reports it in this form (8-digit domain, upper case)
	CCMajor, CCMinor int    // CUDA compute capability, e.g. 8, 0
	// MemoryMiB is the total memory (nvmlDeviceGetMemoryInfo); 0 means the real figure for the
	// names Default uses (81920 for the A100-SXM4-80GB, 81559 for the H100 80GB HBM3), else 81920.
	MemoryMiB int
	// MIGCapable makes nvmlDeviceGetMigMode answer; otherwise it is NVML_ERROR_NOT_SUPPORTED.
	// Default sets it for compute capability 8.0 and 9.0 (A100, A30, H100, H200).
	MIGCapable bool
	// MIGCurrent and MIGPending are the current and pending MIG modes (true: enabled). A GPU
	// is in MIG mode when both are; MIG devices exist only with MIGCurrent.
	MIGCurrent, MIGPending bool
	// MIGDevices are the GPU's MIG devices, in any order; NVML enumerates them by GPU instance
	// id, then compute instance id. AddMIGDevices fills them in from profile names.
	MIGDevices []MIGDevice
	// Excluded marks a GPU the driver was told to leave alone (NVreg_ExcludedGpus): its /proc
	// information file says "GPU Excluded: Yes" and NVML does not enumerate it (it is counted
	// by nvmlGetExcludedDeviceCount instead), nor does nvidia-smi list it.
	Excluded bool
	// PersistenceDisabled makes nvmlDeviceGetPersistenceMode report disabled (the default of
	// the fake, as on hosts running nvidia-persistenced, is enabled).
	PersistenceDisabled bool
	// PCIeRoot is the PCI root complex the GPU hangs under in the fake sysfs ("pci0000:00");
	// "" means DefaultPCIeRoot(Index). NUMANode is its numa_node (-1: none).
	PCIeRoot string
	NUMANode int
}

// Options describe a fake host.
type Options struct {
	GPUs          []GPU
	DriverVersion string // "550.54.15"
	CUDAVersion   int    // NVML form: 12040 is CUDA 12.4
	// NVMLInitError makes the fake nvmlInit* return NVML_ERROR_DRIVER_NOT_LOADED (9).
	NVMLInitError bool
	// NVMLInitDelay makes the fake nvmlInit* sleep this long before anything else.
	NVMLInitDelay time.Duration
	// WithPersistencedSocket creates a unix socket at PersistencedSocketRel.
	WithPersistencedSocket bool
	// CapsMajor is the nvidia-caps major of /proc/devices and of the MIG capability device
	// nodes; 0 means DefaultCapsMajor.
	CapsMajor int
	// MIGCapsProcInterface makes the driver use the /proc interface for MIG capabilities, as
	// drivers before the nvidia-caps device nodes did: /proc/devices has no nvidia-caps line,
	// there is no proc/driver/nvidia-caps/mig-minors and no /dev/nvidia-caps; access is
	// controlled through the proc/driver/nvidia/capabilities files themselves.
	MIGCapsProcInterface bool
	// NVMLEventsPath is the file the fake NVML reads events from (see events.go); empty means
	// <Dir>/nvml-events. Build creates it, empty, when it does not exist.
	NVMLEventsPath string
	// MemoryLimits says whether the fake NVML offers per-cgroup GPU memory limits
	// (nvmlDeviceSetMemoryLimits_v1, driver R615 / CUDA 13.4); the zero value is an older
	// driver, whose library has no such symbols.
	MemoryLimits MemoryLimits
	// Layout says where the driver libraries and binaries go; the zero value is the
	// distribution's layout.
	Layout Layout
	// Features adds the device nodes of DGX/HGX features (GPUDirect Storage, MOFED, GDRCopy,
	// NVSwitch) and their /proc/devices lines.
	Features Features
	// Arch is the Go name of the architecture the libraries and compiled binaries are built
	// for: "" is this machine's; "arm64" (Grace Hopper, Grace Blackwell) or "amd64" on another
	// machine needs the cross compiler (gcc-aarch64-linux-gnu and libc6-dev-arm64-cross on
	// Debian). A foreign host's libraries go in usr/lib/aarch64-linux-gnu (or
	// usr/lib/x86_64-linux-gnu) in the distribution layout, and as this machine's ldconfig
	// skips libraries of another machine, its ld.so.cache is written by internal/ldcache with
	// the flags that architecture's ldconfig records.
	Arch string
}

// foreignArch returns opts.Arch, or "" when it is this machine's.
func (opts *Options) foreignArch() string {
	if opts.Arch == runtime.GOARCH {
		return ""
	}
	return opts.Arch
}

// multiarch is the Debian multiarch tuple of the host's architecture.
func (opts *Options) multiarch() string {
	arch := opts.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	if arch == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// LibDir is the host's library directory, relative to its driver root: Layout.LibDir, with the
// multiarch directory of Arch in the distribution layout.
func (opts *Options) LibDir() string {
	if opts.Layout != LayoutDistribution {
		return opts.Layout.LibDir()
	}
	return path.Join("usr/lib", opts.multiarch())
}

// Path is Layout.Path for the host's architecture: a Library's RelPath, or an entry of
// Binaries, mapped to where this host keeps the file.
func (opts *Options) Path(rel string) string {
	p := opts.Layout.Path(rel)
	if rest, ok := strings.CutPrefix(p, LibDirRel+"/"); ok {
		return path.Join("usr/lib", opts.multiarch(), rest)
	}
	return p
}

// Host is a fake host built by Build.
type Host struct {
	Dir        string // the directory passed to Build, made absolute
	DriverRoot string // Dir/driver: plays the role of "/" for driver files
	DevRoot    string // Dir/devroot: holds dev/nvidia0, dev/nvidiactl, ...
	LibDir     string // DriverRoot/usr/lib/x86_64-linux-gnu, or DriverRoot/lib64 (Options.Layout)
	BinDir     string // DriverRoot/usr/bin, or DriverRoot/bin (Options.Layout)
	// ProcRoot is Dir/procroot: it holds proc/devices and the nvidia driver's proc files, as
	// "/" holds /proc on a real host (see procfs.go).
	ProcRoot string
	// SysRoot is Dir/sysroot: it holds each GPU's PCI device in sys/devices/pci<root>/… and
	// its sys/bus/pci/devices link, as "/" holds /sys on a real host (see sysfs.go).
	SysRoot string
	// NVMLEvents is the events file the fake NVML reads (Options.NVMLEventsPath, made absolute).
	NVMLEvents string
	// NVMLMemoryLimits is the file where the fake NVML keeps per-cgroup memory limits
	// (Options.MemoryLimits; read it with MemoryLimitsSet): <Dir>/nvml-memory-limits.
	NVMLMemoryLimits string
	// Options are the options the host was built from, with the defaults filled in (MIG UUIDs
	// and memory) and each GPU's MIG devices in NVML order.
	Options  Options
	UVMMajor int
	// CapsMajor is the nvidia-caps major, 0 when the driver uses the /proc interface for MIG
	// capabilities (Options.MIGCapsProcInterface).
	CapsMajor int
}

// DeviceNode is a character device node of a fake host.
type DeviceNode struct {
	RelPath      string // relative to Host.DevRoot, e.g. "dev/nvidia0"
	Major, Minor uint32
	Mode         uint32 // permission bits, e.g. 0o666
}

// Default returns options for n GPUs: minors 0..n-1, distinct deterministic UUIDs and PCI bus
// ids (two GPUs per PCIe root, DefaultPCIeRoot, the roots alternating between NUMA nodes 0
// and 1), driver 550.54.15, CUDA 12.4 (12040) and the persistenced socket. Every GPU is an
// "NVIDIA A100-SXM4-80GB" (brand BrandTesla, compute capability 8.0) except index 1, which is an
// "NVIDIA H100 80GB HBM3" (brand BrandNVIDIA, compute capability 9.0), so that per-GPU code
// sees some variety. All are MIG-capable with MIG mode disabled, in persistence mode.
func Default(n int) Options {
	opts := Options{
		DriverVersion:          "550.54.15",
		CUDAVersion:            12040,
		WithPersistencedSocket: true,
	}
	for i := 0; i < n; i++ {
		gpu := GPU{
			Index:   i,
			Minor:   i,
			UUID:    defaultUUID(i),
			Name:    "NVIDIA A100-SXM4-80GB",
			Brand:   BrandTesla,
			BusID:   defaultBusID(i),
			CCMajor: 8,
			CCMinor: 0,
		}
		gpu.NUMANode = (i / 2) % 2
		if i == 1 {
			gpu.Name = "NVIDIA H100 80GB HBM3"
			gpu.Brand = BrandNVIDIA
			gpu.CCMajor = 9
		}
		gpu.MIGCapable = migCapableCC(gpu.CCMajor, gpu.CCMinor)
		opts.GPUs = append(opts.GPUs, gpu)
	}
	return opts
}

// migCapableCC reports whether GPUs of a compute capability are MIG-capable by default: 8.0
// (A100, A30) and 9.0 (H100, H200), the MIG user guide's supported GPUs before Blackwell.
func migCapableCC(major, minor int) bool {
	return minor == 0 && (major == 8 || major == 9)
}

// defaultUUID derives a GPU UUID from its index.
func defaultUUID(i int) string {
	h := sha256.Sum256([]byte("gpu-runtime fakehost GPU " + strconv.Itoa(i)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// defaultBusID gives GPUs the PCI buses of a DGX A100, eight per PCI domain.
func defaultBusID(i int) string {
	buses := []int{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}
	return fmt.Sprintf("%08X:%02X:00.0", i/len(buses), buses[i%len(buses)])
}

// ErrInvalidOptions is returned by Build for options it cannot build a host from.
var ErrInvalidOptions = errors.New("invalid fake host options")

var (
	driverVersionRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)+$`)
	busIDRE         = regexp.MustCompile(`^([0-9a-fA-F]{4}|[0-9a-fA-F]{8}):[0-9a-fA-F]{2}:[0-1][0-9a-fA-F]\.[0-7]$`)
	printableRE     = regexp.MustCompile(`^[ -~]+$`)
)

// validate returns every problem of opts.
func (opts *Options) validate() error {
	var errs []error
	if !driverVersionRE.MatchString(opts.DriverVersion) {
		errs = append(errs, fmt.Errorf("driver version %q is not of the form 550.54.15", opts.DriverVersion))
	}
	if opts.CUDAVersion <= 0 {
		errs = append(errs, fmt.Errorf("CUDA version %d is not of the form 12040", opts.CUDAVersion))
	}
	if opts.Arch != "" && opts.Arch != "amd64" && opts.Arch != "arm64" {
		errs = append(errs, fmt.Errorf("architecture %q: %s", opts.Arch, supportedArchs))
	}
	if opts.NVMLInitDelay < 0 {
		errs = append(errs, fmt.Errorf("NVML init delay %v is negative", opts.NVMLInitDelay))
	}
	if opts.CapsMajor != 0 {
		switch opts.CapsMajor {
		case NVIDIAMajor, UVMMajor, IMEXChannelsMajor, NVSwitchMajor, NVIDIAFSMajor, GDRDrvMajor, UVerbsMajor:
			errs = append(errs, fmt.Errorf("nvidia-caps major %d is another NVIDIA device's", opts.CapsMajor))
		default:
			if opts.CapsMajor < 1 || opts.CapsMajor > 511 || otherMajor(opts.CapsMajor) {
				errs = append(errs, fmt.Errorf("nvidia-caps major %d is not a free major in 1-511", opts.CapsMajor))
			}
		}
	}
	if !opts.Layout.valid() {
		errs = append(errs, fmt.Errorf("layout %q is not %q or %q", opts.Layout, LayoutDistribution, LayoutLib64))
	}
	if f := opts.Features; f.GDS < 0 || f.GDS > 64 || f.MOFED < 0 || f.MOFED > 64 || f.NVSwitches < 0 || f.NVSwitches > 64 {
		errs = append(errs, fmt.Errorf("feature node counts %+v: want 0 to 64 each", f))
	}
	if strings.ContainsRune(opts.NVMLEventsPath, 0) {
		errs = append(errs, fmt.Errorf("NVML events path %q contains a NUL byte", opts.NVMLEventsPath))
	}
	indexes, minors, uuids, busIDs := map[int]bool{}, map[int]bool{}, map[string]bool{}, map[string]bool{}
	for i, g := range opts.GPUs {
		switch {
		case g.Index < 0 || g.Index >= len(opts.GPUs):
			errs = append(errs, fmt.Errorf("GPU %d: index %d is not in 0-%d", i, g.Index, len(opts.GPUs)-1))
		case indexes[g.Index]:
			errs = append(errs, fmt.Errorf("GPU %d: index %d is used twice", i, g.Index))
		}
		indexes[g.Index] = true
		switch {
		case g.Minor < 0 || g.Minor >= NVIDIAModesetMinor:
			errs = append(errs, fmt.Errorf("GPU %d: minor %d is not in 0-%d", i, g.Minor, NVIDIAModesetMinor-1))
		case minors[g.Minor]:
			errs = append(errs, fmt.Errorf("GPU %d: minor %d is used twice", i, g.Minor))
		}
		minors[g.Minor] = true
		switch {
		case !printableRE.MatchString(g.UUID):
			errs = append(errs, fmt.Errorf("GPU %d: UUID %q is empty or not printable ASCII", i, g.UUID))
		case uuids[g.UUID]:
			errs = append(errs, fmt.Errorf("GPU %d: UUID %q is used twice", i, g.UUID))
		}
		uuids[g.UUID] = true
		if !printableRE.MatchString(g.Name) {
			errs = append(errs, fmt.Errorf("GPU %d: name %q is empty or not printable ASCII", i, g.Name))
		}
		if g.Brand < 0 {
			errs = append(errs, fmt.Errorf("GPU %d: brand %d is negative", i, g.Brand))
		}
		if g.CCMajor < 0 || g.CCMinor < 0 {
			errs = append(errs, fmt.Errorf("GPU %d: compute capability %d.%d is negative", i, g.CCMajor, g.CCMinor))
		}
		if !busIDRE.MatchString(g.BusID) {
			errs = append(errs, fmt.Errorf("GPU %d: PCI bus id %q is not of the form 00000000:17:00.0", i, g.BusID))
		} else if b, err := parseBusID(g.BusID); err != nil {
			errs = append(errs, fmt.Errorf("GPU %d: %w", i, err))
		} else if busIDs[b.full] {
			errs = append(errs, fmt.Errorf("GPU %d: PCI bus id %q is used twice", i, g.BusID))
		} else {
			busIDs[b.full] = true
		}
		if g.MemoryMiB < 0 {
			errs = append(errs, fmt.Errorf("GPU %d: memory %d MiB is negative", i, g.MemoryMiB))
		}
		if g.PCIeRoot != "" && !pcieRootRE.MatchString(g.PCIeRoot) {
			errs = append(errs, fmt.Errorf("GPU %d: PCIe root %q is not of the form pci0000:00", i, g.PCIeRoot))
		}
		if g.NUMANode < -1 {
			errs = append(errs, fmt.Errorf("GPU %d: NUMA node %d is below -1", i, g.NUMANode))
		}
		errs = append(errs, validateMIG(i, &opts.GPUs[i])...)
	}
	migUUIDs := map[string]int{}
	for i := range opts.GPUs {
		for _, d := range opts.GPUs[i].MIGDevices {
			if d.UUID == "" {
				continue
			}
			if j, dup := migUUIDs[d.UUID]; dup && j != i {
				errs = append(errs, fmt.Errorf("GPU %d: MIG UUID %q is also a MIG device's of GPU %d", i, d.UUID, j))
			}
			migUUIDs[d.UUID] = i
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return nil
}

// busID is a parsed PCI address.
type busID struct {
	domain, bus, device, function uint64
	full, legacy                  string // as NVML formats them: "00000000:0F:00.0", "0000:0F:00.0"
}

// parseBusID parses a "domain:bus:device.function" PCI address.
func parseBusID(s string) (busID, error) {
	var b busID
	if _, err := fmt.Sscanf(s, "%x:%x:%x.%x", &b.domain, &b.bus, &b.device, &b.function); err != nil {
		return busID{}, fmt.Errorf("parse PCI bus id %q: %w", s, err)
	}
	b.full = fmt.Sprintf("%08X:%02X:%02X.%X", b.domain, b.bus, b.device, b.function)
	b.legacy = fmt.Sprintf("%04X:%02X:%02X.%X", b.domain, b.bus, b.device, b.function)
	return b, nil
}

// Build creates a fake host under dir, which must be an empty directory or not exist (its
// parent is created if needed). It needs root, gcc and ldconfig; compiled libraries are cached
// in memory per process, so building many hosts is cheap. Invalid options fail with
// ErrInvalidOptions, listing every problem, before anything is written; other errors may leave
// a partly built host in dir.
func Build(dir string, opts Options) (*Host, error) {
	return build(dir, opts, true)
}

// BuildFiles creates the fake host's files without its device nodes: driver libraries (the
// fake NVML loads), binaries, firmware, configs, the driver's /proc files and the events file
// — what driver-file discovery, NVML queries and MIG capability reading need, and no root.
// Only root can run ldconfig -r, so a non-root build has no ld.so.cache in its driver root
// (discovery then searches the standard library directories, as on such hosts). The device
// root exists and is empty.
func BuildFiles(dir string, opts Options) (*Host, error) {
	return build(dir, opts, false)
}

func build(dir string, opts Options, nodes bool) (*Host, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve fake host directory %q: %w", dir, err)
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	opts.GPUs = append([]GPU(nil), opts.GPUs...)
	for i := range opts.GPUs {
		var devs []MIGDevice
		for _, d := range resolvedMIGDevices(&opts.GPUs[i]) {
			devs = append(devs, d.MIGDevice)
		}
		opts.GPUs[i].MIGDevices = devs
	}
	if opts.NVMLEventsPath == "" {
		opts.NVMLEventsPath = filepath.Join(dir, defaultEventsFile)
	} else if opts.NVMLEventsPath, err = filepath.Abs(opts.NVMLEventsPath); err != nil {
		return nil, fmt.Errorf("resolve NVML events path: %w", err)
	}
	driverRoot := filepath.Join(dir, "driver")
	h := &Host{
		Dir:              dir,
		DriverRoot:       driverRoot,
		DevRoot:          filepath.Join(dir, "devroot"),
		LibDir:           filepath.Join(driverRoot, opts.LibDir()),
		BinDir:           filepath.Join(driverRoot, opts.Layout.BinDir()),
		ProcRoot:         filepath.Join(dir, "procroot"),
		SysRoot:          filepath.Join(dir, "sysroot"),
		NVMLEvents:       opts.NVMLEventsPath,
		NVMLMemoryLimits: filepath.Join(dir, memoryLimitsFile),
		Options:          opts,
		UVMMajor:         UVMMajor,
		CapsMajor:        opts.CapsMajor,
	}
	if h.CapsMajor == 0 {
		h.CapsMajor = DefaultCapsMajor
	}
	if opts.MIGCapsProcInterface {
		h.CapsMajor = 0
	}
	devStep, ldStep := h.makeDeviceNodes, h.runLDConfig
	if !nodes { // the file tree only: no mknod, and without root no ldconfig -r (it chroots)
		devStep = func() error { return os.MkdirAll(h.DevRoot, 0o755) }
		if os.Geteuid() != 0 && opts.foreignArch() == "" {
			ldStep = h.linkSONAMEs
		}
	}
	steps := []func() error{
		h.writeLibraries,
		devStep,
		h.writeBinaries,
		h.writeFirmware,
		h.writeGraphicsConfigs,
		h.writeProc,
		h.writeSysfs,
		h.makeEventsFile,
		ldStep,
	}
	if opts.WithPersistencedSocket {
		steps = append(steps, h.makePersistencedSocket)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("build fake host in %q: %w", dir, err)
		}
	}
	return h, nil
}

// linkSONAMEs makes the SONAME links ldconfig makes, where ldconfig -r cannot run (not root):
// each library's SONAME points at its file, a driver library's winning over a decoy's.
func (h *Host) linkSONAMEs() error {
	opts := &h.Options
	for _, l := range append(Decoys(opts.DriverVersion), Libraries(opts.DriverVersion)...) {
		file := filepath.Join(h.DriverRoot, opts.Path(l.RelPath))
		if filepath.Base(file) == l.SONAME {
			continue
		}
		link := filepath.Join(filepath.Dir(file), l.SONAME)
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Base(file), link); err != nil {
			return fmt.Errorf("link %s: %w", link, err)
		}
	}
	return nil
}

// prepareDir makes sure dir is an empty directory.
func prepareDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create fake host directory: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read fake host directory: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("fake host directory %q is not empty", dir)
	}
	return nil
}

// NVMLPath returns the absolute path of the fake NVML library, for nvml.WithLibraryPath.
func (h *Host) NVMLPath() string {
	return filepath.Join(h.LibDir, "libnvidia-ml.so."+h.Options.DriverVersion)
}

// DeviceNodes returns the host's device nodes: one per GPU in index order (excluded GPUs
// included), then nvidiactl, nvidia-modeset, nvidia-uvm and nvidia-uvm-tools, then the MIG
// capability nodes dev/nvidia-caps/nvidia-cap<N> by minor (see CapDeviceNodes), then the
// DGX/HGX feature nodes (FeatureNodes).
func (h *Host) DeviceNodes() []DeviceNode {
	nodes := make([]DeviceNode, len(h.Options.GPUs))
	for _, g := range h.Options.GPUs {
		nodes[g.Index] = DeviceNode{"dev/nvidia" + strconv.Itoa(g.Minor), NVIDIAMajor, uint32(g.Minor), 0o666}
	}
	uvm := uint32(h.UVMMajor)
	nodes = append(nodes,
		DeviceNode{"dev/nvidiactl", NVIDIAMajor, NVIDIACtlMinor, 0o666},
		DeviceNode{"dev/nvidia-modeset", NVIDIAMajor, NVIDIAModesetMinor, 0o666},
		DeviceNode{"dev/nvidia-uvm", uvm, 0, 0o666},
		DeviceNode{"dev/nvidia-uvm-tools", uvm, 1, 0o666},
	)
	nodes = append(nodes, h.CapDeviceNodes()...)
	return append(nodes, h.FeatureNodes()...)
}

// CapDeviceNodes returns the MIG capability device nodes, by minor: the ones nvidia-modprobe
// makes (with the modes of the capability files) when MIG is in use, that is when a GPU is in
// MIG mode: mig/config (CapMinorMIGConfig, 0400), mig/monitor (CapMinorMIGMonitor, 0444) and
// the access capability of every existing GPU and compute instance (0444). There are none on
// a host without a GPU in MIG mode or whose driver uses the /proc interface.
func (h *Host) CapDeviceNodes() []DeviceNode {
	if h.CapsMajor == 0 {
		return nil
	}
	major := uint32(h.CapsMajor)
	node := func(minor, mode int) DeviceNode {
		return DeviceNode{"dev/nvidia-caps/nvidia-cap" + strconv.Itoa(minor), major, uint32(minor), uint32(mode)}
	}
	inMIGMode := false
	for _, g := range h.Options.GPUs {
		inMIGMode = inMIGMode || g.MIGCurrent
	}
	if !inMIGMode {
		return nil
	}
	nodes := []DeviceNode{node(CapMinorMIGConfig, capModeConfig), node(CapMinorMIGMonitor, capModeRead)}
	gis := map[int]bool{}
	for _, m := range h.MIGDevices() {
		if !gis[m.GICapMinor] {
			nodes = append(nodes, node(m.GICapMinor, capModeRead))
			gis[m.GICapMinor] = true
		}
		nodes = append(nodes, node(m.CICapMinor, capModeRead))
	}
	slices.SortStableFunc(nodes, func(a, b DeviceNode) int { return int(a.Minor) - int(b.Minor) })
	return nodes
}

func (h *Host) makeDeviceNodes() error {
	for _, n := range h.DeviceNodes() {
		path := filepath.Join(h.DevRoot, n.RelPath)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create device directory: %w", err)
		}
		if err := unix.Mknod(path, unix.S_IFCHR|n.Mode, int(unix.Mkdev(n.Major, n.Minor))); err != nil {
			return fmt.Errorf("create device node %q (needs root): %w", path, err)
		}
		if err := os.Chmod(path, os.FileMode(n.Mode)); err != nil { // mknod applies the umask
			return fmt.Errorf("chmod device node %q: %w", path, err)
		}
	}
	return nil
}

// writeLibraries compiles (or takes from the cache) and writes every driver library and decoy.
func (h *Host) writeLibraries() error {
	opts := &h.Options
	type job struct {
		relPath string
		build   func() ([]byte, error)
	}
	var jobs []job
	for _, l := range append(Libraries(opts.DriverVersion), Decoys(opts.DriverVersion)...) {
		soname := l.SONAME
		arch := opts.foreignArch()
		build := func() ([]byte, error) { return stubLibrary(arch, soname) }
		switch {
		case l.Prefix == "libnvidia-ml":
			eventsPath := h.NVMLEvents
			if eventsPath == filepath.Join(h.Dir, defaultEventsFile) && opts.Layout == LayoutDistribution {
				eventsPath = "" // the library finds it from its own place (see fakenvml.c)
			}
			limitsPath := ""
			if opts.MemoryLimits != MemoryLimitsAbsent {
				limitsPath = h.NVMLMemoryLimits
			}
			build = func() ([]byte, error) {
				return nvmlLibrary(arch, opts.MemoryLimits != MemoryLimitsAbsent, nvmlConfig(opts, eventsPath, limitsPath))
			}
		case l.Prefix == "libcuda" && l.Capability != "":
			build = func() ([]byte, error) { return cudaLibrary(arch, soname, opts.CUDAVersion) }
		}
		jobs = append(jobs, job{opts.Path(l.RelPath), build})
	}

	errs := make([]error, len(jobs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			data, err := j.build()
			if err != nil {
				errs[i] = fmt.Errorf("build %s: %w", filepath.Base(j.relPath), err)
				return
			}
			errs[i] = installFile(filepath.Join(h.DriverRoot, j.relPath), data, 0o755)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runLDConfig writes the driver root's ld.so.conf and has the host's ldconfig build its
// ld.so.cache (and the SONAME symlinks) as if the driver root were "/". For LayoutLib64 it
// makes the SONAME symlinks only (ldconfig -n), leaving no ld.so.conf or ld.so.cache.
func (h *Host) runLDConfig() error {
	ldconfig, err := findLDConfig()
	if err != nil {
		return err
	}
	if h.Options.foreignArch() != "" {
		return h.writeForeignLDCache()
	}
	libDir := "/" + h.Options.LibDir()
	args := []string{"-r", h.DriverRoot}
	if h.Options.Layout == LayoutLib64 {
		args = append(args, "-n", libDir, libDir+"/vdpau")
	} else {
		conf := libDir + "\n" + libDir + "/vdpau\n"
		if err := installFile(filepath.Join(h.DriverRoot, LDSOConfRel), []byte(conf), 0o644); err != nil {
			return err
		}
	}
	out, err := exec.Command(ldconfig, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("run %s %s: %w: %s", ldconfig, strings.Join(args, " "), err, out)
	}
	return nil
}

// writeForeignLDCache does for a host of another architecture what runLDConfig does, which
// this machine's ldconfig cannot: it skips every library of another ELF machine ("unknown
// machine"), making neither links nor cache entries. The SONAME links are made as linkSONAMEs
// makes them; the distribution layout's ld.so.conf and ld.so.cache list every library by its
// SONAME link, with the flags the host architecture's ldconfig records, encoded by
// internal/ldcache as glibc 2.36's ldconfig lays a cache out.
func (h *Host) writeForeignLDCache() error {
	if err := h.linkSONAMEs(); err != nil {
		return err
	}
	opts := &h.Options
	if opts.Layout != LayoutDistribution {
		return nil
	}
	machine := uint16(emX8664)
	if opts.Arch == "arm64" {
		machine = emAArch64
	}
	flags, err := ldcache.FlagsFor(64, machine)
	if err != nil {
		return err
	}
	cache := &ldcache.Cache{Generator: "gpu-runtime internal/fakehost (" + opts.Arch + ")"}
	seen := map[string]bool{}
	var libs []ldcache.Library
	for _, l := range append(Libraries(opts.DriverVersion), Decoys(opts.DriverVersion)...) {
		link := "/" + path.Join(path.Dir(opts.Path(l.RelPath)), l.SONAME)
		if !seen[link] {
			seen[link] = true
			libs = append(libs, ldcache.Library{Name: l.SONAME, Path: link, Flags: flags})
		}
	}
	if err := cache.Add(libs...); err != nil {
		return err
	}
	data, err := cache.Encode()
	if err != nil {
		return fmt.Errorf("encode ld.so.cache: %w", err)
	}
	libDir := "/" + opts.LibDir()
	conf := libDir + "\n" + libDir + "/vdpau\n"
	if err := installFile(filepath.Join(h.DriverRoot, LDSOConfRel), []byte(conf), 0o644); err != nil {
		return err
	}
	return installFile(filepath.Join(h.DriverRoot, LDSOCacheRel), data, 0o644)
}

// ELF e_machine values of the architectures a fake host can be built for.
const (
	emX8664   = 62
	emAArch64 = 183
)

// findLDConfig returns the host's ldconfig.
func findLDConfig() (string, error) {
	for _, p := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("ldconfig")
	if err != nil {
		return "", fmt.Errorf("find ldconfig: %w", err)
	}
	return p, nil
}

// makePersistencedSocket leaves a real unix socket file behind, as nvidia-persistenced does.
func (h *Host) makePersistencedSocket() error {
	path := filepath.Join(h.DriverRoot, PersistencedSocketRel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create directory for %q: %w", path, err)
	}
	name := path
	if len(name) >= len(unix.RawSockaddrUnix{}.Path) {
		// Too long for sockaddr_un: bind through the directory's /proc/self/fd link instead.
		d, err := os.Open(filepath.Dir(path))
		if err != nil {
			return fmt.Errorf("open directory for socket %q: %w", path, err)
		}
		defer d.Close()
		name = fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path))
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return fmt.Errorf("create socket %q: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		return fmt.Errorf("close socket %q: %w", path, err)
	}
	return nil
}

package fakehost

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Paths of the driver's proc files, relative to Host.ProcRoot.
const (
	ProcDevicesRel      = "proc/devices"
	ProcVersionRel      = "proc/driver/nvidia/version"
	ProcGPUsRel         = "proc/driver/nvidia/gpus"
	ProcCapabilitiesRel = "proc/driver/nvidia/capabilities"
	ProcMIGMinorsRel    = "proc/driver/nvidia-caps/mig-minors"
)

// otherMajors are the character devices of /proc/devices that are not NVIDIA's, in the order
// a Debian 12 server lists them (the dynamic majors from 254 down: those below the ones the
// NVIDIA modules take are left out).
var otherMajors = []struct {
	major int
	name  string
}{
	{1, "mem"}, {4, "/dev/vc/0"}, {4, "tty"}, {4, "ttyS"}, {5, "/dev/tty"}, {5, "/dev/console"},
	{5, "/dev/ptmx"}, {7, "vcs"}, {10, "misc"}, {13, "input"}, {21, "sg"}, {29, "fb"},
	{128, "ptm"}, {136, "pts"}, {180, "usb"}, {188, "ttyUSB"}, {189, "usb_device"},
	{202, "cpu/msr"}, {203, "cpu/cpuid"}, {226, "drm"}, {238, "aux"}, {239, "ipmidev"},
	{240, "hidraw"}, {241, "nvme-generic"}, {242, "nvme"}, {243, "bsg"}, {244, "watchdog"},
	{245, "ptp"}, {246, "pps"}, {247, "rtc"}, {248, "dax"}, {249, "tpm"}, {250, "dimmctl"},
	{251, "ndctl"}, {252, "gpiochip"}, {253, "tpmrm"}, {254, "rfkill"},
}

// otherMajor reports whether a major is one of otherMajors.
func otherMajor(major int) bool {
	for _, m := range otherMajors {
		if m.major == major {
			return true
		}
	}
	return false
}

// otherBlockDevices are /proc/devices' block devices.
const otherBlockDevices = "  7 loop\n  8 sd\n  9 md\n 65 sd\n 66 sd\n 67 sd\n128 sd\n253 device-mapper\n254 mdp\n259 blkext\n"

// procDevices renders /proc/devices: "Character devices:" and "Block devices:" sections of
// "%3d %s" lines by major (the kernel's fs/char_dev.c chrdev_show). The nvidia module
// registers its character device as "nvidia-frontend", nvidia-uvm as "nvidia-uvm", the
// capability devices as "nvidia-caps" (kernel-open/nvidia/nv-caps.c, alloc_chrdev_region) and
// the IMEX channels as "nvidia-caps-imex-channels" (nv-caps-imex.c).
func (h *Host) procDevices() string {
	type entry struct {
		major int
		name  string
	}
	var entries []entry
	for _, m := range otherMajors {
		entries = append(entries, entry{m.major, m.name})
	}
	entries = append(entries,
		entry{NVIDIAMajor, "nvidia-frontend"},
		entry{h.UVMMajor, "nvidia-uvm"},
		entry{IMEXChannelsMajor, "nvidia-caps-imex-channels"},
	)
	if h.CapsMajor != 0 {
		entries = append(entries, entry{h.CapsMajor, "nvidia-caps"})
	}
	for _, m := range h.featureMajors() {
		entries = append(entries, entry{m.major, m.name})
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return a.major - b.major })
	var b strings.Builder
	b.WriteString("Character devices:\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "%3d %s\n", e.major, e.name)
	}
	b.WriteString("\nBlock devices:\n" + otherBlockDevices)
	return b.String()
}

// procVersion renders /proc/driver/nvidia/version (kernel-open/nvidia/nv-procfs.c,
// nv_procfs_read_version: "NVRM version: %s" of the module's id string, then the compiler).
// The build date is made up.
func procVersion(driverVersion, machine string) string {
	return "NVRM version: NVIDIA UNIX " + machine + " Kernel Module  " + driverVersion + "  Tue Mar  5 22:23:56 UTC 2024\n" +
		"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
}

// procBusID names a GPU's directory under proc/driver/nvidia/gpus: "%04x:%02x:%02x.%1x"
// (nv-procfs.c, nv_procfs_add_gpu).
func procBusID(b busID) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", b.domain, b.bus, b.device, b.function)
}

// procGPUInformation renders proc/driver/nvidia/gpus/<bus id>/information
// (nv-procfs.c, nv_procfs_read_gpu_info). The driver prints the UUID only when RM has one,
// which it does not for a GPU it excluded; the IRQ, VBIOS and DMA lines are made up.
func procGPUInformation(g GPU, driverVersion string) string {
	b, _ := parseBusID(g.BusID) // validated by Build
	var s strings.Builder
	fmt.Fprintf(&s, "Model: \t\t %s\n", g.Name)
	fmt.Fprintf(&s, "IRQ:   \t\t %d\n", 200+g.Index)
	if !g.Excluded {
		fmt.Fprintf(&s, "GPU UUID: \t %s\n", g.UUID)
		s.WriteString("Video BIOS: \t 92.00.45.00.05\n")
	} else {
		s.WriteString("Video BIOS: \t ??.??.??.??.??\n")
	}
	s.WriteString("Bus Type: \t PCIe\n")
	s.WriteString("DMA Size: \t 47 bits\n")
	s.WriteString("DMA Mask: \t 0x7fffffffffff\n")
	fmt.Fprintf(&s, "Bus Location: \t %s\n", procBusID(b))
	fmt.Fprintf(&s, "Device Minor: \t %d\n", g.Minor)
	if !g.Excluded {
		fmt.Fprintf(&s, "GPU Firmware: \t %s\n", driverVersion)
	}
	excluded := "No"
	if g.Excluded {
		excluded = "Yes"
	}
	fmt.Fprintf(&s, "GPU Excluded:\t %s\n", excluded)
	return s.String()
}

// capabilityFile renders a capability file (nv-caps.c, nv_cap_procfs_read): the minor of the
// device node, its mode in decimal and whether nvidia-modprobe may make the node
// (NVreg_ModifyDeviceFiles, 1 by default).
func capabilityFile(minor, mode int) string {
	return fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: %d\nDeviceFileModify: %d\n", minor, mode, 1)
}

// migMinors renders proc/driver/nvidia-caps/mig-minors (nv-caps.c, nv_procfs_read_mig_minors):
// every capability the driver could create, existing or not.
func migMinors() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %d\nmonitor %d\n", CapMinorMIGConfig, CapMinorMIGMonitor)
	for gpu := 0; gpu <= MIGMaxGPUMinor; gpu++ {
		for gi := 0; gi <= MIGMaxGI; gi++ {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", gpu, gi, GICapMinor(gpu, gi))
			for ci := 0; ci <= MIGMaxCI; ci++ {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", gpu, gi, ci, CICapMinor(gpu, gi, ci))
			}
		}
	}
	return b.String()
}

// ProcFile is one file of the host's proc tree.
type ProcFile struct {
	RelPath string // relative to Host.ProcRoot, e.g. "proc/driver/nvidia/version"
	Content string
	Mode    os.FileMode
}

// ProcFiles returns the driver's proc files: proc/devices, the driver version, each GPU's
// information (excluded GPUs too), mig-minors (unless the /proc interface is used), and the
// capability files: mig/config, mig/monitor and the access file of every GPU and compute
// instance. The driver creates proc/driver/nvidia/capabilities/gpu<minor>/mig for every GPU it
// manages (osRmCapRegisterGpu); GPU and compute instance directories appear as the instances
// are created.
func (h *Host) ProcFiles() []ProcFile {
	opts := &h.Options
	files := []ProcFile{
		{ProcDevicesRel, h.procDevices(), 0o444},
		{ProcVersionRel, procVersion(opts.DriverVersion, strings.TrimSuffix(opts.multiarch(), "-linux-gnu")), 0o444},
	}
	for _, g := range byIndex(opts.GPUs) {
		b, _ := parseBusID(g.BusID)
		files = append(files, ProcFile{filepath.Join(ProcGPUsRel, procBusID(b), "information"), procGPUInformation(g, opts.DriverVersion), 0o444})
	}
	if h.CapsMajor != 0 {
		files = append(files, ProcFile{ProcMIGMinorsRel, migMinors(), 0o444})
	}
	files = append(files,
		ProcFile{filepath.Join(ProcCapabilitiesRel, "mig/config"), capabilityFile(CapMinorMIGConfig, capModeConfig), capModeConfig},
		ProcFile{filepath.Join(ProcCapabilitiesRel, "mig/monitor"), capabilityFile(CapMinorMIGMonitor, capModeRead), capModeRead},
	)
	gis := map[string]bool{}
	for _, m := range h.MIGDevices() {
		gi := filepath.Join(ProcCapabilitiesRel, "gpu"+strconv.Itoa(m.GPUMinor), "mig", "gi"+strconv.Itoa(m.GI))
		if !gis[gi] {
			files = append(files, ProcFile{filepath.Join(gi, "access"), capabilityFile(m.GICapMinor, capModeRead), capModeRead})
			gis[gi] = true
		}
		files = append(files, ProcFile{filepath.Join(gi, "ci"+strconv.Itoa(m.CI), "access"), capabilityFile(m.CICapMinor, capModeRead), capModeRead})
	}
	return files
}

// writeProc writes ProcFiles under ProcRoot, and the empty capability directories.
func (h *Host) writeProc() error {
	for _, g := range h.Options.GPUs {
		if g.Excluded {
			continue
		}
		dir := filepath.Join(h.ProcRoot, ProcCapabilitiesRel, "gpu"+strconv.Itoa(g.Minor), "mig")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create proc directory %q: %w", dir, err)
		}
	}
	for _, f := range h.ProcFiles() {
		if err := installFile(filepath.Join(h.ProcRoot, f.RelPath), []byte(f.Content), f.Mode); err != nil {
			return err
		}
	}
	return nil
}

// ProcGPUDir is the directory the driver shows for a GPU (by Options index):
// ProcRoot/proc/driver/nvidia/gpus/<bus id>. A test removes it to play a GPU that fell off
// the bus; SetGPUExcluded writes it back.
func (h *Host) ProcGPUDir(index int) (string, error) {
	for _, g := range h.Options.GPUs {
		if g.Index == index {
			b, _ := parseBusID(g.BusID) // validated by Build
			return filepath.Join(h.ProcRoot, ProcGPUsRel, procBusID(b)), nil
		}
	}
	return "", fmt.Errorf("fake host has no GPU %d", index)
}

// SetGPUExcluded writes a GPU's information file as the driver shows it for a GPU it excludes
// (NVreg_ExcludedGpus: "GPU Excluded: Yes", no UUID) or not, creating its directory if a test
// removed it. NVML is not changed: it goes on enumerating the GPUs it was built with, so this
// plays a GPU excluded since the discovery cache was written.
func (h *Host) SetGPUExcluded(index int, excluded bool) error {
	dir, err := h.ProcGPUDir(index)
	if err != nil {
		return err
	}
	for _, g := range h.Options.GPUs {
		if g.Index == index {
			g.Excluded = excluded
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("create proc directory %q: %w", dir, err)
			}
			return os.WriteFile(filepath.Join(dir, "information"), []byte(procGPUInformation(g, h.Options.DriverVersion)), 0o444)
		}
	}
	return nil
}

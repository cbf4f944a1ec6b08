package fakehost

import "strconv"

// Device numbers of the DGX/HGX feature nodes. The InfiniBand verbs numbers are fixed by the
// kernel (drivers/infiniband/core/uverbs_main.c: major 231, minors from 192), rdma_cm is a
// misc device (major 10) whose minor the kernel picks; the others are dynamic majors, below
// the NVIDIA majors as the modules load after nvidia.
const (
	NVSwitchMajor    = 234 // "nvidia-nvswitch" in /proc/devices
	NVSwitchCtlMinor = 255 // /dev/nvidia-nvswitchctl
	NVIDIAFSMajor    = 233 // "nvidia-fs"
	GDRDrvMajor      = 232 // "gdrdrv"
	UVerbsMajor      = 231 // "infiniband_verbs"
	UVerbsFirstMinor = 192
	MiscMajor        = 10
	RDMACMMinor      = 58
)

// Features are the DGX/HGX device nodes of a fake host beside its GPUs' (none by default).
type Features struct {
	GDS        int  // /dev/nvidia-fs0 … : GPUDirect Storage's nvidia-fs module
	MOFED      int  // /dev/infiniband/uverbs0 … and /dev/infiniband/rdma_cm
	GDRCopy    bool // /dev/gdrdrv
	NVSwitches int  // /dev/nvidia-nvswitch0 … and /dev/nvidia-nvswitchctl
}

// FeatureNodes returns the host's DGX/HGX feature nodes (Options.Features), GDS, MOFED,
// GDRCopy then NVSwitch.
func (h *Host) FeatureNodes() []DeviceNode {
	f := h.Options.Features
	var nodes []DeviceNode
	for i := range f.GDS {
		nodes = append(nodes, DeviceNode{"dev/nvidia-fs" + strconv.Itoa(i), NVIDIAFSMajor, uint32(i), 0o666})
	}
	for i := range f.MOFED {
		nodes = append(nodes, DeviceNode{"dev/infiniband/uverbs" + strconv.Itoa(i), UVerbsMajor, uint32(UVerbsFirstMinor + i), 0o666})
	}
	if f.MOFED > 0 {
		nodes = append(nodes, DeviceNode{"dev/infiniband/rdma_cm", MiscMajor, RDMACMMinor, 0o666})
	}
	if f.GDRCopy {
		nodes = append(nodes, DeviceNode{"dev/gdrdrv", GDRDrvMajor, 0, 0o666})
	}
	for i := range f.NVSwitches {
		nodes = append(nodes, DeviceNode{"dev/nvidia-nvswitch" + strconv.Itoa(i), NVSwitchMajor, uint32(i), 0o666})
	}
	if f.NVSwitches > 0 {
		nodes = append(nodes, DeviceNode{"dev/nvidia-nvswitchctl", NVSwitchMajor, NVSwitchCtlMinor, 0o666})
	}
	return nodes
}

// featureMajors are the /proc/devices lines of the feature modules the host has loaded.
func (h *Host) featureMajors() []struct {
	major int
	name  string
} {
	f := h.Options.Features
	var out []struct {
		major int
		name  string
	}
	add := func(on bool, major int, name string) {
		if on {
			out = append(out, struct {
				major int
				name  string
			}{major, name})
		}
	}
	add(f.NVSwitches > 0, NVSwitchMajor, "nvidia-nvswitch")
	add(f.GDS > 0, NVIDIAFSMajor, "nvidia-fs")
	add(f.GDRCopy, GDRDrvMajor, "gdrdrv")
	add(f.MOFED > 0, UVerbsMajor, "infiniband_verbs")
	return out
}

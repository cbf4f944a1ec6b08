// Package discover finds what an NVIDIA host has — driver version, CUDA version, GPUs, driver
// files, device nodes and device health — under explicit driver, device and proc roots. It
// returns plain data; the only files it writes are its own, root's: the discovery cache and
// the health file.
package discover

import "errors"

// GPU is one physical GPU as NVML reports it.
type GPU struct {
	Index             int    `json:"index"`
	Minor             int    `json:"minor"`
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	Brand             string `json:"brand"`
	BusID             string `json:"bus_id"`
	ComputeCapability string `json:"compute_capability"`
	// MemoryMiB is the GPU's total memory (nvmlDeviceGetMemoryInfo).
	MemoryMiB int `json:"memory_mib,omitempty"`
	// Persistence is "enabled" or "disabled" ("" when the driver cannot say); not cached:
	// only gpu-ctk doctor reads it.
	Persistence string `json:"persistence_mode,omitempty"`
	// MIGCapable says the GPU can be partitioned with MIG; MIGCurrent and MIGPending are
	// its current mode and the mode it takes at the next reset (enabled = true).
	MIGCapable bool `json:"mig_capable,omitempty"`
	MIGCurrent bool `json:"mig_current,omitempty"`
	MIGPending bool `json:"mig_pending,omitempty"`
	// MIGDevices are its MIG devices in NVML's enumeration order (nvmlDeviceGetMigDeviceHandleByIndex).
	MIGDevices []MIGDevice `json:"mig_devices,omitempty"`
	// Health is why the GPU must not be given to containers; set by ReadHealth, never cached.
	Health *Health `json:"health,omitempty"`
}

// MIGEnabled reports whether the GPU is in MIG mode, current and pending: then
// its MIG devices are what can be used, and the GPU itself cannot be used whole.
func (g GPU) MIGEnabled() bool { return g.MIGCurrent && g.MIGPending }

// MIGDevice is one MIG device: a compute instance of a GPU instance.
type MIGDevice struct {
	// Index is I of the "G:I" name: the position in NVML's enumeration of the parent's MIG devices.
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`    // "MIG-…"
	GI        int    `json:"gi"`      // GPU instance id
	CI        int    `json:"ci"`      // compute instance id
	Profile   string `json:"profile"` // e.g. "3g.40gb", "1c.3g.40gb", "1g.10gb+me"
	MemoryMiB int    `json:"memory_mib"`
	// GICap and CICap are the minors of the GPU and compute instance capabilities
	// (/dev/nvidia-caps/nvidia-cap<N>), from the driver's /proc; 0 when it lists none.
	GICap int `json:"gi_cap"`
	CICap int `json:"ci_cap"`
	// Health is why the MIG device itself must not be given to containers (see GPU.Health).
	Health *Health `json:"health,omitempty"`
}

// MIGCaps is how the driver exposes MIG capabilities, read from its /proc files.
type MIGCaps struct {
	// Major is the character major of /dev/nvidia-caps/* (from /proc/devices); 0 when the
	// driver uses the /proc interface: the capability is the access file, with no device node.
	Major int `json:"major"`
	// Config and Monitor are the minors of mig/config and mig/monitor; 0 when not listed.
	Config  int `json:"config"`
	Monitor int `json:"monitor"`
}

// Driver is what NVML says about the driver and its GPUs.
type Driver struct {
	Version     string `json:"driver_version"` // e.g. 550.54.15
	CUDAVersion string `json:"cuda_version"`   // e.g. 12.4
	GPUs        []GPU  `json:"gpus"`
	// Excluded are the GPUs the driver excludes (NVreg_ExcludedGpus): NVML does not count
	// them among GPUs, and they have no index.
	Excluded []ExcludedGPU `json:"excluded_gpus,omitempty"`
	NVMLPath string        `json:"nvml_path"` // the libnvidia-ml that answered
}

// Sentinel errors callers tell apart.
var (
	// ErrNVMLNotFound: no libnvidia-ml.so.1 could be loaded from the driver root.
	ErrNVMLNotFound = errors.New("NVML library not found")
	// ErrNVML: NVML was loaded but a query failed.
	ErrNVML = errors.New("NVML query failed")
	// ErrDeviceNode: a device node is missing or is not a device.
	ErrDeviceNode = errors.New("bad device node")
)

// Package discover finds what an NVIDIA host has — driver version, CUDA version, GPUs, driver
// files and device nodes — under explicit driver and device roots. It returns plain data and
// never writes to the host.
package discover

import (
	"errors"
)

// GPU is one physical GPU as NVML reports it.
type GPU struct {
	Index             int    `json:"index"`
	Minor             int    `json:"minor"`
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	Brand             string `json:"brand"`
	BusID             string `json:"bus_id"`
	ComputeCapability string `json:"compute_capability"`
}

// Driver is what NVML says about the driver and its GPUs.
type Driver struct {
	Version     string `json:"driver_version"` // e.g. 550.54.15
	CUDAVersion string `json:"cuda_version"`   // e.g. 12.4
	GPUs        []GPU  `json:"gpus"`
	// NVMLPath is the host path of the libnvidia-ml that answered.
	NVMLPath string `json:"nvml_path"`
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

package nvmlinfo

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// ErrMemoryLimitsNotOffered: the driver has no per-cgroup GPU memory limits
// (nvmlDeviceSetMemoryLimits_v1 is missing, or answers NOT_SUPPORTED).
var ErrMemoryLimitsNotOffered = errors.New("per-cgroup GPU memory limits not offered")

// NoMemoryLimit is the hard limit that, with a soft limit of 0, clears a cgroup's limits
// (NVML_DEVICE_MEMORY_LIMIT_MAX).
const NoMemoryLimit = math.MaxUint64

const setLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"

// MemoryLimit is a GPU's memory limits on one cgroup, in bytes.
type MemoryLimit struct {
	Soft, Hard uint64
}

// MemoryLimitsOffered reports, for the driver under root, whether it offers per-cgroup GPU
// memory limits on the GPU with the given UUID (any GPU when empty): nil, or an error wrapping
// ErrMemoryLimitsNotOffered that says why, or another error when NVML cannot be asked.
func MemoryLimitsOffered(root, uuid string) error {
	return withDevice(root, uuid, func(lib nvml.Interface, dev nvml.Device, libPath string) error {
		// A cgroup path that exists nowhere: a driver that offers the call answers
		// OPERATING_SYSTEM (cannot open it) or NOT_FOUND, one that does not NOT_SUPPORTED.
		_, ret := dev.GetMemoryLimits_v1("/nonexistent/gpu-runtime-probe")
		if ret == nvml.ERROR_NOT_SUPPORTED {
			return notSupported(libPath, uuid)
		}
		return nil
	})
}

// SetMemoryLimit sets the limits of the GPU with the given UUID on the cgroup at cgroupPath
// (its full sysfs path, /sys/fs/cgroup/…). Soft 0 and hard NoMemoryLimit clear them.
func SetMemoryLimit(root, uuid, cgroupPath string, l MemoryLimit) error {
	return withDevice(root, uuid, func(lib nvml.Interface, dev nvml.Device, libPath string) error {
		ret := dev.SetMemoryLimits_v1(cgroupPath, l.Soft, l.Hard)
		if ret == nvml.SUCCESS {
			return nil
		}
		return limitErr(lib, dev, libPath, "set", uuid, cgroupPath, ret)
	})
}

// ClearMemoryLimit clears the limits of the GPU with the given UUID on the cgroup at
// cgroupPath (soft 0, hard NoMemoryLimit). It is idempotent, and a cgroup that no longer
// exists is success: removing a cgroup clears its limits (nvml.h).
func ClearMemoryLimit(root, uuid, cgroupPath string) error {
	return withDevice(root, uuid, func(lib nvml.Interface, dev nvml.Device, libPath string) error {
		ret := dev.SetMemoryLimits_v1(cgroupPath, 0, NoMemoryLimit)
		if ret == nvml.SUCCESS {
			return nil
		}
		if ret == nvml.ERROR_OPERATING_SYSTEM {
			if _, err := os.Stat(cgroupPath); errors.Is(err, fs.ErrNotExist) { //nolint:gosec // G703: root's own argument, only stat'ed to tell a removed cgroup
				return nil
			}
		}
		return limitErr(lib, dev, libPath, "clear", uuid, cgroupPath, ret)
	})
}

// GetMemoryLimit returns the limits of the GPU with the given UUID on the cgroup at cgroupPath;
// found is false when none are set.
func GetMemoryLimit(root, uuid, cgroupPath string) (l MemoryLimit, found bool, err error) {
	err = withDevice(root, uuid, func(lib nvml.Interface, dev nvml.Device, libPath string) error {
		got, ret := dev.GetMemoryLimits_v1(cgroupPath)
		switch ret {
		case nvml.SUCCESS:
			l, found = MemoryLimit{Soft: got.SoftLimit, Hard: got.HardLimit}, true
			return nil
		case nvml.ERROR_NOT_FOUND:
			return nil
		}
		return limitErr(lib, dev, libPath, "get", uuid, cgroupPath, ret)
	})
	return l, found, err
}

// withDevice loads NVML from root, checks that it has the memory limits calls and runs f on
// the GPU with the given UUID (the first GPU when empty).
func withDevice(root, uuid string, f func(nvml.Interface, nvml.Device, string) error) error {
	lib, probe, libPath, err := load(root)
	if err != nil {
		return err
	}
	defer func() { _ = probe.Close() }()
	defer func() { _ = lib.Shutdown() }()
	// Calling a symbol the library lacks would kill the process: ask first.
	if lib.Extensions().LookupSymbol(setLimitsSymbol) != nil {
		return fmt.Errorf("%w: %s has no %s; it needs NVIDIA driver R615 (CUDA 13.4) or later",
			ErrMemoryLimitsNotOffered, libPath, setLimitsSymbol)
	}
	var dev nvml.Device
	var ret nvml.Return
	if uuid == "" {
		dev, ret = lib.DeviceGetHandleByIndex(0)
	} else {
		dev, ret = lib.DeviceGetHandleByUUID(uuid)
	}
	if ret != nvml.SUCCESS {
		name := uuid
		if name == "" {
			name = "0"
		}
		return fmt.Errorf("%w: get GPU %s: %s; list the GPUs with gpu-ctk info", discover.ErrNVML, name, lib.ErrorString(ret))
	}
	return f(lib, dev, libPath)
}

func notSupported(libPath, uuid string) error {
	what := "its GPUs"
	if uuid != "" {
		what = "GPU " + uuid
	}
	return fmt.Errorf("%w: the driver at %s answers not supported for %s (%s)", ErrMemoryLimitsNotOffered, libPath, what, setLimitsSymbol)
}

// limitErr turns a failed Set/GetMemoryLimits_v1 into an error saying what nvml.h documents
// the code to mean for that call.
func limitErr(lib nvml.Interface, dev nvml.Device, libPath, verb, uuid, cgroupPath string, ret nvml.Return) error {
	var why string
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED:
		if isMIG, r := dev.IsMigDeviceHandle(); r == nvml.SUCCESS && isMIG {
			return fmt.Errorf("%w: %s GPU memory limit of %s: it is a MIG device; NVML limits memory per cgroup on whole GPUs only, and a MIG device's memory is already its own",
				discover.ErrNVML, verb, uuid)
		}
		return notSupported(libPath, uuid)
	case nvml.ERROR_INVALID_ARGUMENT:
		why = "the soft limit is above the hard limit, or a limit is above the GPU's total memory"
	case nvml.ERROR_OPERATING_SYSTEM:
		why = "the cgroup cannot be opened; give the full path of an existing cgroup under /sys/fs/cgroup"
	case nvml.ERROR_NO_PERMISSION:
		why = "setting memory limits needs root"
	}
	msg := fmt.Sprintf("%s GPU memory limit of %s on cgroup %s: %s", verb, uuid, cgroupPath, lib.ErrorString(ret))
	if why != "" {
		msg += " (" + why + ")"
	}
	return fmt.Errorf("%w: %s", discover.ErrNVML, msg)
}

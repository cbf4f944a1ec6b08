package fakehost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The NVML events file.
//
// The fake NVML delivers, through nvmlEventSetWait_v2, events that a test appends to
// Host.NVMLEvents, one line each:
//
//	<UUID> <type> [<data>] [<gpu instance id> <compute instance id>]
//
// UUID is a GPU's or a MIG device's. Type is "xid" (nvmlEventTypeXidCriticalError; data is the
// Xid and is required), "sbe" or "dbe" (single and double bit ECC errors; no data). An event
// is reported on its GPU's handle, as the real NVML reports MIG events on the parent; its
// gpuInstanceId and computeInstanceId are the MIG device's for a MIG UUID, the two ids given
// for a GPU UUID, and 0xFFFFFFFF (the whole GPU) otherwise. Blank lines and lines starting
// with "#" are skipped; other malformed lines are skipped with a message on stderr. A line
// counts once it ends with a newline.
//
// As with the real NVML, an event set gets only the events of the devices and types
// registered with it (nvmlDeviceRegisterEvents), that happened after the registration, each
// once and in order; every event set reads the file on its own.

// defaultEventsFile is the events file's name in the host's directory.
const defaultEventsFile = "nvml-events"

// Event types of the events file.
const (
	EventXid               = "xid"
	EventSingleBitECCError = "sbe"
	EventDoubleBitECCError = "dbe"
)

// makeEventsFile creates the events file, empty, unless it exists.
func (h *Host) makeEventsFile() error {
	f, err := os.OpenFile(h.NVMLEvents, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create NVML events file: %w", err)
	}
	return f.Close()
}

// AppendNVMLEvent appends one line to the events file (see above); it adds the newline. The
// line is written with one write(2) on a file opened O_APPEND, so a reader sees it whole.
func (h *Host) AppendNVMLEvent(line string) error {
	if strings.ContainsAny(line, "\n\x00") {
		return fmt.Errorf("NVML event %q: one line without NUL bytes expected", line)
	}
	f, err := os.OpenFile(h.NVMLEvents, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open NVML events file: %w", err)
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("append to NVML events file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close NVML events file: %w", err)
	}
	return nil
}

// driverAsideRel is where UnloadDriver moves proc/driver/nvidia, relative to ProcRoot.
const driverAsideRel = "proc/driver/.nvidia-unloaded"

// UnloadDriver plays the NVIDIA kernel module being unloaded: the host's proc/driver/nvidia
// goes (it is moved aside), so the fake NVML's nvmlInit fails with
// NVML_ERROR_DRIVER_NOT_LOADED and its event waits, in a process that had initialised it, with
// NVML_ERROR_GPU_IS_LOST; LoadDriver puts it back. (The real driver cannot be unloaded while
// NVML holds it; a GPU reset, or a driver container replaced under a running client, ends
// the same way for the client.)
func (h *Host) UnloadDriver() error {
	if err := os.Rename(filepath.Join(h.ProcRoot, "proc/driver/nvidia"), filepath.Join(h.ProcRoot, driverAsideRel)); err != nil {
		return fmt.Errorf("unload the fake driver: %w", err)
	}
	return nil
}

// LoadDriver undoes UnloadDriver.
func (h *Host) LoadDriver() error {
	if err := os.Rename(filepath.Join(h.ProcRoot, driverAsideRel), filepath.Join(h.ProcRoot, "proc/driver/nvidia")); err != nil {
		return fmt.Errorf("load the fake driver: %w", err)
	}
	return nil
}

// AppendXid appends an Xid critical error of a GPU or MIG device (by UUID) to the events file.
func (h *Host) AppendXid(uuid string, xid uint64) error {
	return h.AppendNVMLEvent(uuid + " " + EventXid + " " + strconv.FormatUint(xid, 10))
}

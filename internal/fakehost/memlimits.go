package fakehost

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MemoryLimits says whether a fake NVML offers per-cgroup GPU memory limits.
type MemoryLimits int

const (
	// MemoryLimitsAbsent: the library has no nvmlDeviceSetMemoryLimits_v1 (drivers before R615).
	MemoryLimitsAbsent MemoryLimits = iota
	// MemoryLimitsOffered: Set/GetMemoryLimits_v1 work as nvml.h documents them.
	MemoryLimitsOffered
	// MemoryLimitsNotSupported: the symbols exist and answer NVML_ERROR_NOT_SUPPORTED.
	MemoryLimitsNotSupported
)

// memoryLimitsFile is where, in Host.Dir, the fake NVML keeps memory limits.
const memoryLimitsFile = "nvml-memory-limits"

// MemoryLimit is one per-cgroup limit the fake NVML holds.
type MemoryLimit struct {
	UUID   string // the GPU's
	Cgroup string // the nameSpace passed: the cgroup's full sysfs path
	Soft   uint64
	Hard   uint64
}

// MemoryLimitsSet returns the limits in force, in the order they were set: as in NVML, the
// limits of a cgroup since removed (its directory gone, or made again) are not.
func (h *Host) MemoryLimitsSet() ([]MemoryLimit, error) {
	data, err := os.ReadFile(h.NVMLMemoryLimits)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read fake NVML memory limits: %w", err)
	}
	var out []MemoryLimit
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 7)
		if len(f) != 7 {
			return nil, fmt.Errorf("fake NVML memory limits: bad line %q", sc.Text())
		}
		soft, err1 := strconv.ParseUint(f[4], 10, 64)
		hard, err2 := strconv.ParseUint(f[5], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("fake NVML memory limits: line %q: %w", sc.Text(), err)
		}
		var st unix.Stat_t
		if err := unix.Stat(f[6], &st); err != nil || f[1] != strconv.FormatUint(st.Dev, 10) || f[2] != strconv.FormatUint(st.Ino, 10) ||
			f[3] != strconv.FormatUint(uint64(st.Ctim.Sec)*1e9+uint64(st.Ctim.Nsec), 10) {
			continue // the cgroup is gone, and its limits with it
		}
		out = append(out, MemoryLimit{UUID: f[0], Cgroup: f[6], Soft: soft, Hard: hard})
	}
	return out, nil
}

package nvmlinfo

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// memlimitsChildEnv selects, in a child of this test binary, which fake driver
// TestMemoryLimitsChild loads: one NVML per process (go-nvml binds symbols process-wide).
const memlimitsChildEnv = "GPU_RUNTIME_TEST_MEMLIMITS"

// TestMemoryLimits runs TestMemoryLimitsChild once per kind of driver, each in its own process.
func TestMemoryLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED LOUDLY: nvmlDeviceSetMemoryLimits_v1 needs root, and so does the fake NVML; run as root")
	}
	for _, kind := range []string{"offered", "absent", "not-supported"} {
		t.Run(kind, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryLimitsChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), memlimitsChildEnv+"="+kind+":"+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestMemoryLimitsChild") {
				t.Fatalf("child (%s): %v\n%s", kind, err, out)
			}
		})
	}
}

func TestMemoryLimitsChild(t *testing.T) {
	kind, dir, ok := strings.Cut(os.Getenv(memlimitsChildEnv), ":")
	if !ok {
		t.Skip("run by TestMemoryLimits in a process of its own")
	}
	opts := fakehost.Default(2)
	if err := opts.GPUs[1].AddMIGDevices("1g.10gb"); err != nil {
		t.Fatal(err)
	}
	opts.MemoryLimits = map[string]fakehost.MemoryLimits{"offered": fakehost.MemoryLimitsOffered,
		"absent": fakehost.MemoryLimitsAbsent, "not-supported": fakehost.MemoryLimitsNotSupported}[kind]
	h := fakehost.BuildFilesT(t, opts)
	gpu := h.Options.GPUs[0]
	total := uint64(gpu.TotalMemoryMiB()) << 20
	cg := filepath.Join(dir, "cgroup", "pod1", "ctr1")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(h.LibDir, "libnvidia-ml.so."+h.Options.DriverVersion)

	switch kind {
	case "absent":
		want := "per-cgroup GPU memory limits not offered: " + lib + " has no nvmlDeviceSetMemoryLimits_v1; it needs NVIDIA driver R615 (CUDA 13.4) or later"
		for _, err := range []error{MemoryLimitsOffered(h.DriverRoot, ""), SetMemoryLimit(h.DriverRoot, gpu.UUID, cg, MemoryLimit{1, 1})} {
			if !errors.Is(err, ErrMemoryLimitsNotOffered) || err.Error() != want {
				t.Errorf("err = %v\nwant %s", err, want)
			}
		}
		return
	case "not-supported":
		want := "per-cgroup GPU memory limits not offered: the driver at " + lib + " answers not supported for GPU " + gpu.UUID + " (nvmlDeviceSetMemoryLimits_v1)"
		for _, err := range []error{MemoryLimitsOffered(h.DriverRoot, gpu.UUID), SetMemoryLimit(h.DriverRoot, gpu.UUID, cg, MemoryLimit{1, 1})} {
			if !errors.Is(err, ErrMemoryLimitsNotOffered) || err.Error() != want {
				t.Errorf("err = %v\nwant %s", err, want)
			}
		}
		return
	}

	if err := MemoryLimitsOffered(h.DriverRoot, ""); err != nil {
		t.Fatalf("offered: %v", err)
	}
	if _, found, err := GetMemoryLimit(h.DriverRoot, gpu.UUID, cg); err != nil || found {
		t.Fatalf("before set: found %v, %v", found, err)
	}
	const gib = 1 << 30
	if err := SetMemoryLimit(h.DriverRoot, gpu.UUID, cg, MemoryLimit{10 * gib, 10 * gib}); err != nil {
		t.Fatal(err)
	}
	if l, found, err := GetMemoryLimit(h.DriverRoot, gpu.UUID, cg); err != nil || !found || l != (MemoryLimit{10 * gib, 10 * gib}) {
		t.Fatalf("get = %+v %v %v", l, found, err)
	}
	set, err := h.MemoryLimitsSet()
	if err != nil || len(set) != 1 || set[0] != (fakehost.MemoryLimit{UUID: gpu.UUID, Cgroup: cg, Soft: 10 * gib, Hard: 10 * gib}) {
		t.Fatalf("fake NVML holds %+v, %v", set, err)
	}
	// Clearing, twice: idempotent.
	for range 2 {
		if err := ClearMemoryLimit(h.DriverRoot, gpu.UUID, cg); err != nil {
			t.Fatalf("clear: %v", err)
		}
	}
	if _, found, err := GetMemoryLimit(h.DriverRoot, gpu.UUID, cg); err != nil || found {
		t.Fatalf("after clear: found %v, %v", found, err)
	}
	// Removing the cgroup clears its limits (nvml.h).
	if err := SetMemoryLimit(h.DriverRoot, gpu.UUID, cg, MemoryLimit{gib, gib}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cg); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, found, err := GetMemoryLimit(h.DriverRoot, gpu.UUID, cg); err != nil || found {
		t.Fatalf("after the cgroup was removed and made again: found %v, %v", found, err)
	}

	// Clearing the limits of a cgroup that is gone succeeds: its removal cleared them.
	if err := ClearMemoryLimit(h.DriverRoot, gpu.UUID, cg+"-gone"); err != nil {
		t.Errorf("clear on a removed cgroup: %v", err)
	}

	mig := h.MIGDevices()[0].UUID
	invalid := "NVML query failed: set GPU memory limit of " + gpu.UUID + " on cgroup " + cg + ": Invalid Argument (the soft limit is above the hard limit, or a limit is above the GPU's total memory)"
	testCases := []struct {
		description string
		uuid, cg    string
		limit       MemoryLimit
		want        string
	}{
		{"soft above hard", gpu.UUID, cg, MemoryLimit{2 * gib, gib}, invalid},
		{"hard above total memory", gpu.UUID, cg, MemoryLimit{gib, total + 1}, invalid},
		{"MIG device", mig, cg, MemoryLimit{gib, gib},
			"NVML query failed: set GPU memory limit of " + mig + ": it is a MIG device; NVML limits memory per cgroup on whole GPUs only, and a MIG device's memory is already its own"},
		{"missing cgroup", gpu.UUID, cg + "-gone", MemoryLimit{gib, gib},
			"NVML query failed: set GPU memory limit of " + gpu.UUID + " on cgroup " + cg + "-gone: The operating system has blocked the request (the cgroup cannot be opened; give the full path of an existing cgroup under /sys/fs/cgroup)"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			err := SetMemoryLimit(h.DriverRoot, tc.uuid, tc.cg, tc.limit)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v\nwant %s", err, tc.want)
			}
		})
	}
}

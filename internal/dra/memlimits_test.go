package dra

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// TestLogMemoryLimits: the plugin says once, as gpu-ctk memory-limit probe answers against
// each kind of fake driver, whether shared claims get per-cgroup GPU memory limits.
func TestLogMemoryLimits(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("SKIPPED LOUDLY: no go tool to build gpu-ctk, which the plugin asks")
	}
	ctk := filepath.Join(t.TempDir(), "gpu-ctk")
	if out, err := exec.Command("go", "build", "-o", ctk, "github.com/gpu-runtime/gpu-runtime/cmd/gpu-ctk").CombinedOutput(); err != nil {
		t.Fatalf("build gpu-ctk: %v\n%s", err, out)
	}
	const mpsOnly = "; a shared claim's memory is limited by its MPS daemon's pinned device memory limit only"
	host := func(m fakehost.MemoryLimits) *fakehost.Host {
		opts := fakehost.Default(1)
		opts.MemoryLimits = m
		return fakehost.BuildFilesT(t, opts)
	}
	old, offered, unsupported := host(fakehost.MemoryLimitsAbsent), host(fakehost.MemoryLimitsOffered), host(fakehost.MemoryLimitsNotSupported)
	lib := func(h *fakehost.Host) string {
		return filepath.Join(h.LibDir, "libnvidia-ml.so."+h.Options.DriverVersion)
	}
	testCases := []struct {
		description string
		ctk, root   string
		level       logrus.Level
		want        string
	}{
		{"older driver", ctk, old.DriverRoot, logrus.WarnLevel,
			"per-cgroup GPU memory limits not offered: " + lib(old) + " has no nvmlDeviceSetMemoryLimits_v1; it needs NVIDIA driver R615 (CUDA 13.4) or later" + mpsOnly},
		{"offered", ctk, offered.DriverRoot, logrus.InfoLevel,
			"per-cgroup GPU memory limits offered by the driver: each shared claim's consumed memory is also set on its containers' cgroup v2 groups (gpu-hook memory-limit), beside its MPS daemon's pinned device memory limit"},
		{"not supported", ctk, unsupported.DriverRoot, logrus.WarnLevel,
			"per-cgroup GPU memory limits not offered: the driver at " + lib(unsupported) + " answers not supported for its GPUs (nvmlDeviceSetMemoryLimits_v1)" + mpsOnly},
		{"no gpu-ctk", "", old.DriverRoot, logrus.WarnLevel,
			"per-cgroup GPU memory limits: cannot ask NVML: gpu-ctk not found (install it next to gpu-kubelet-plugin)" + mpsOnly},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			log, hook := test.NewNullLogger()
			logMemoryLimits(log, tc.ctk, tc.root, time.Minute)
			if len(hook.Entries) != 1 || hook.Entries[0].Level != tc.level || hook.Entries[0].Message != tc.want {
				for _, e := range hook.Entries {
					t.Logf("%s: %s", e.Level, e.Message)
				}
				t.Errorf("want one %s line: %s", tc.level, tc.want)
			}
		})
	}
}

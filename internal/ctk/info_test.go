package ctk

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// One fake NVML per test process (go-nvml binds symbols process-wide): both output forms
// are checked against the same host.
func TestInfo(t *testing.T) {
	opts := fakehost.Default(2)
	if err := opts.GPUs[0].AddMIGDevices("3g.40gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	h := fakehost.BuildFilesT(t, opts)
	opts = h.Options
	mig := h.MIGDevices()
	var out, errb strings.Builder
	if err := Run([]string{"info", "--json", "--driver-root", h.DriverRoot}, &out, &errb); err != nil {
		t.Fatalf("info --json: %v (%s)", err, errb.String())
	}
	var d discover.Driver
	if err := json.Unmarshal([]byte(out.String()), &d); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	want1 := discover.GPU{Index: 1, Minor: 1, UUID: opts.GPUs[1].UUID, Name: "NVIDIA H100 80GB HBM3", Brand: "nvidia", BusID: opts.GPUs[1].BusID, ComputeCapability: "9.0", MemoryMiB: opts.GPUs[1].TotalMemoryMiB(), Persistence: "enabled", MIGCapable: true}
	if d.Version != "550.54.15" || d.CUDAVersion != "12.4" || len(d.GPUs) != 2 || !reflect.DeepEqual(d.GPUs[1], want1) {
		t.Errorf("json = %+v", d)
	}
	wantMIG := []discover.MIGDevice{
		{Index: 0, UUID: mig[0].UUID, GI: mig[0].GI, CI: 0, Profile: "3g.40gb", MemoryMiB: mig[0].MemoryMiB},
		{Index: 1, UUID: mig[1].UUID, GI: mig[1].GI, CI: 0, Profile: "1g.10gb", MemoryMiB: mig[1].MemoryMiB},
	}
	if g := d.GPUs[0]; !g.MIGEnabled() || !reflect.DeepEqual(g.MIGDevices, wantMIG) {
		t.Errorf("MIG in json = %+v\nwant %+v", g, wantMIG)
	}

	out.Reset()
	if err := Run([]string{"info", "--driver-root", h.DriverRoot}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"Driver version: 550.54.15\n", "CUDA version:   12.4\n", "GPUs:           2\n",
		"INDEX  MINOR  MODEL                                BRAND   UUID", "COMPUTE CAP  MIG\n",
		"0      0      NVIDIA A100-SXM4-80GB                tesla   " + opts.GPUs[0].UUID + "  " + opts.GPUs[0].BusID + "  8.0          enabled\n",
		fmt.Sprintf("  0:0         MIG 3g.40gb (GI %d, CI 0, %d MiB)          %s\n", mig[0].GI, mig[0].MemoryMiB, mig[0].UUID),
		fmt.Sprintf("  0:1         MIG 1g.10gb (GI %d, CI 0, %d MiB)          %s\n", mig[1].GI, mig[1].MemoryMiB, mig[1].UUID),
		"1      1      NVIDIA H100 80GB HBM3                nvidia  " + opts.GPUs[1].UUID + "  " + opts.GPUs[1].BusID + "  9.0          disabled\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
}

func TestInfoErrors(t *testing.T) {
	empty := t.TempDir()
	testCases := []struct {
		description string
		args        []string
		usage       bool
		wantPrefix  string
	}{
		{description: "no NVML under the root", args: []string{"info", "--driver-root", empty},
			wantPrefix: "NVML library not found: load libnvidia-ml.so.1 from driver root \"" + empty + "\": tried "},
		{description: "stray argument", args: []string{"info", "extra"}, usage: true, wantPrefix: `usage: info takes no arguments, got ["extra"] (gpu-ctk info --help)`},
		{description: "unknown flag", args: []string{"info", "--yaml"}, usage: true, wantPrefix: "usage: flag provided but not defined: -yaml"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var out, errb strings.Builder
			err := Run(tc.args, &out, &errb)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantPrefix) || errors.Is(err, ErrUsage) != tc.usage {
				t.Fatalf("error = %v, want prefix %q (usage %v)", err, tc.wantPrefix, tc.usage)
			}
		})
	}
}

// TestHealthSummary: gpu-ctk info's last lines name each device kept from containers — a
// GPU with a recorded failure, and a GPU the driver excludes, with its bus.
func TestHealthSummary(t *testing.T) {
	since := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	drv := discover.Driver{
		GPUs: []discover.GPU{
			{Index: 0, UUID: "GPU-aaaa"},
			{Index: 1, UUID: "GPU-bbbb", Health: &discover.Health{Signal: discover.HealthRecorded, Reason: "Xid 79: GPU has fallen off the bus", Xid: 79, Since: since, Source: "/run/gpu-runtime/health.csv"}},
		},
		Excluded: []discover.ExcludedGPU{{UUID: "GPU-eeee", BusID: "00000000:0E:00.0"}},
	}
	want := "\nUnhealthy (given to no container; gpu-ctk health):\n" +
		"  GPU 1 (GPU-bbbb): Xid 79: GPU has fallen off the bus since 2026-11-24T10:00:00Z (recorded in /run/gpu-runtime/health.csv)\n" +
		"  GPU GPU-eeee: excluded by the driver (NVreg_ExcludedGpus) at 0000:0e:00.0: NVML and CUDA do not see it\n"
	if got := infoHealth(drv); got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
	if got := infoHealth(discover.Driver{GPUs: drv.GPUs[:1]}); got != "\nHealth: every device healthy (gpu-ctk health)\n" {
		t.Errorf("healthy: %q", got)
	}
}

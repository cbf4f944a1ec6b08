package plan

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

const (
	healthFile = "/run/gpu-runtime/health.csv"
	xid79      = "Xid 79: GPU has fallen off the bus since 2026-11-25T10:00:00Z (recorded in " + healthFile + ")"
	clearFix   = "when it is repaired, or the record was a false alarm, return it to service: gpu-ctk health clear "
)

var recordedAt = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func recorded(reason string, xid uint64) *discover.Health {
	return &discover.Health{Signal: discover.HealthRecorded, Reason: reason, Xid: xid, Since: recordedAt, Source: healthFile}
}

// healthHost is migHost with three whole GPUs besides the MIG one: 1 (minor 2), 2 and 3.
func healthHost() Host {
	h := migHost()
	h.Driver.GPUs = append(h.Driver.GPUs,
		discover.GPU{Index: 2, Minor: 3, UUID: "GPU-cccc"}, discover.GPU{Index: 3, Minor: 4, UUID: "GPU-dddd"})
	for _, n := range []discover.DeviceNode{node("/dev/nvidia3", 195, 3), node("/dev/nvidia4", 195, 4)} {
		h.Devices.Nodes[n.Path] = n
	}
	return h
}

func TestBuildHealth(t *testing.T) {
	gone := &discover.Health{Signal: discover.HealthGone, Reason: "gone: the driver has no /proc/driver/nvidia/gpus/0000:0c:00.0 (the GPU fell off the bus, or was removed)"}
	excluded := &discover.Health{Signal: discover.HealthExcluded, Reason: `excluded by the administrator: /proc/driver/nvidia/gpus/0000:0d:00.0/information says "GPU Excluded: Yes" (NVreg_ExcludedGpus)`}
	testCases := []struct {
		description  string
		env          []string
		docker       bool
		host         func(h *Host)
		wantDevices  []string
		wantWarnings []string
		wantErr      string // the whole error; only its start for docker's cases (the rest is as above)
	}{
		{description: "a recorded GPU asked for by index", env: []string{"NVIDIA_VISIBLE_DEVICES=1"},
			host:    func(h *Host) { h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79) },
			wantErr: `unhealthy device: "1" in NVIDIA_VISIBLE_DEVICES names GPU 1 (GPU-bbbb): ` + xid79 + `; ask for another device, or ` + clearFix + `GPU-bbbb`},
		{description: "by UUID, among healthy ones: the error names only it", env: []string{"NVIDIA_VISIBLE_DEVICES=2,gpu-BBBB,3"},
			host:    func(h *Host) { h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79) },
			wantErr: `unhealthy device: "gpu-BBBB" in NVIDIA_VISIBLE_DEVICES names GPU 1 (GPU-bbbb): ` + xid79 + `; ask for another device, or ` + clearFix + `GPU-bbbb`},
		{description: "docker run --gpus device=1", env: []string{"NVIDIA_VISIBLE_DEVICES=1"}, docker: true,
			host:    func(h *Host) { h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79) },
			wantErr: `unhealthy device: "1" in docker run --gpus device=1 names GPU 1 (GPU-bbbb): `},
		{description: "docker run --gpus 2", env: []string{"NVIDIA_VISIBLE_DEVICES=0,1"}, docker: true,
			host: func(h *Host) {
				h.Driver.GPUs[0].MIGCurrent = false
				h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79)
			},
			wantErr: `unhealthy device: "1" in docker run --gpus 2 names GPU 1 (GPU-bbbb): `},
		{description: "a GPU that is gone", env: []string{"NVIDIA_VISIBLE_DEVICES=2"}, host: func(h *Host) { h.Driver.GPUs[2].Health = gone },
			wantErr: `unhealthy device: "2" in NVIDIA_VISIBLE_DEVICES names GPU 2 (GPU-cccc): gone: the driver has no /proc/driver/nvidia/gpus/0000:0c:00.0 (the GPU fell off the bus, or was removed); ask for another device, or check the kernel log (dmesg) for Xid errors, reset or re-seat the GPU, or reload the driver`},
		{description: "an excluded GPU", env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-dddd"}, host: func(h *Host) { h.Driver.GPUs[3].Health = excluded },
			wantErr: `unhealthy device: "GPU-dddd" in NVIDIA_VISIBLE_DEVICES names GPU 3 (GPU-dddd): excluded by the administrator: /proc/driver/nvidia/gpus/0000:0d:00.0/information says "GPU Excluded: Yes" (NVreg_ExcludedGpus); ask for another device, or remove it from the driver's NVreg_ExcludedGpus and reload the driver to use it`},
		{description: "a GPU NVML does not count because the driver excludes it", env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-eeee"},
			host: func(h *Host) {
				h.Driver.Excluded = []discover.ExcludedGPU{{UUID: "GPU-eeee", BusID: "00000000:0E:00.0"}}
			},
			wantErr: `unhealthy device: "GPU-eeee" in NVIDIA_VISIBLE_DEVICES names GPU GPU-eeee at 0000:0e:00.0, which the driver excludes (NVreg_ExcludedGpus): NVML and CUDA do not see it; ask for another device, or remove it from NVreg_ExcludedGpus and reload the driver`},
		{description: "a recorded MIG device", env: []string{"NVIDIA_VISIBLE_DEVICES=0:1"},
			host:    func(h *Host) { h.Driver.GPUs[0].MIGDevices[1].Health = recorded("Xid 94: contained ECC error", 94) },
			wantErr: `unhealthy device: "0:1" in NVIDIA_VISIBLE_DEVICES names MIG device 0:1 (MIG-1111, 2g.20gb): Xid 94: contained ECC error since 2026-11-25T10:00:00Z (recorded in ` + healthFile + `); ask for another device, or ` + clearFix + `MIG-1111`},
		{description: "its sibling MIG device is fine", env: []string{"NVIDIA_VISIBLE_DEVICES=0:2"},
			host:        func(h *Host) { h.Driver.GPUs[0].MIGDevices[1].Health = recorded("Xid 94: contained ECC error", 94) },
			wantDevices: []string{"0:2"}},
		{description: "a MIG device of a GPU recorded whole", env: []string{"NVIDIA_VISIBLE_DEVICES=MIG-2222"},
			host:    func(h *Host) { h.Driver.GPUs[0].Health = recorded("Xid 79: GPU has fallen off the bus", 79) },
			wantErr: `unhealthy device: "MIG-2222" in NVIDIA_VISIBLE_DEVICES names MIG device 0:2 (MIG-2222, 1g.10gb): its GPU 0 (GPU-aaaa): ` + xid79 + `; ask for another device, or ` + clearFix + `GPU-aaaa`},
		{description: "all leaves the unhealthy out, one warning each", env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			host: func(h *Host) {
				h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79)
				h.Driver.GPUs[0].MIGDevices[0].Health = recorded("double-bit ECC error", 0)
				h.Driver.GPUs[3].Health = gone
			},
			wantDevices: []string{"0:1", "0:2", "2"},
			wantWarnings: []string{
				`NVIDIA_VISIBLE_DEVICES=all: unhealthy MIG device 0:0 (MIG-0000, 3g.40gb): double-bit ECC error since 2026-11-25T10:00:00Z (recorded in ` + healthFile + `) left out (` + clearFix + `MIG-0000)`,
				`NVIDIA_VISIBLE_DEVICES=all: unhealthy GPU 1 (GPU-bbbb): ` + xid79 + ` left out (` + clearFix + `GPU-bbbb)`,
				`NVIDIA_VISIBLE_DEVICES=all: unhealthy GPU 3 (GPU-dddd): gone: the driver has no /proc/driver/nvidia/gpus/0000:0c:00.0 (the GPU fell off the bus, or was removed) left out (check the kernel log (dmesg) for Xid errors, reset or re-seat the GPU, or reload the driver)`,
			}},
		{description: "docker run --gpus all says so", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, docker: true,
			host:        func(h *Host) { h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79) },
			wantDevices: []string{"0:0", "0:1", "0:2", "2", "3"},
			wantWarnings: []string{
				`docker run --gpus all: unhealthy GPU 1 (GPU-bbbb): ` + xid79 + ` left out (` + clearFix + `GPU-bbbb)`,
			}},
		{description: `all with health.all = "fail"`, env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			host: func(h *Host) {
				h.UnhealthyAll = config.HealthAllFail
				h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79)
			},
			wantErr: `unhealthy device: NVIDIA_VISIBLE_DEVICES=all includes GPU 1 (GPU-bbbb): ` + xid79 + `; with health.all = "fail" such a container does not start: fix or clear the device (gpu-ctk health), or set health.all = "skip"`},
		{description: `health.all = "fail" with every device healthy`, env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			host:        func(h *Host) { h.UnhealthyAll = config.HealthAllFail },
			wantDevices: []string{"0:0", "0:1", "0:2", "1", "2", "3"}},
		{description: "all when every device is unhealthy", env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			host: func(h *Host) {
				h.Driver.GPUs = h.Driver.GPUs[1:2]
				h.Driver.GPUs[0].Health = recorded("Xid 79: GPU has fallen off the bus", 79)
			},
			wantErr: `unhealthy device: NVIDIA_VISIBLE_DEVICES=all: every device of this host is unhealthy: GPU 1 (GPU-bbbb): ` + xid79},
		{description: "a MIG manager's all leaves out an unhealthy GPU whole and its MIG devices", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all"},
			host:        func(h *Host) { h.Driver.GPUs[0].Health = recorded("Xid 79: GPU has fallen off the bus", 79) },
			wantDevices: []string{"1", "2", "3"},
			wantWarnings: []string{
				`NVIDIA_VISIBLE_DEVICES=all: unhealthy GPU 0 (GPU-aaaa): ` + xid79 + ` left out (` + clearFix + `GPU-aaaa)`,
				`NVIDIA_VISIBLE_DEVICES=all: unhealthy MIG device 0:0 (MIG-0000, 3g.40gb): its GPU 0 (GPU-aaaa): ` + xid79 + ` left out (` + clearFix + `GPU-aaaa)`,
				`NVIDIA_VISIBLE_DEVICES=all: unhealthy MIG device 0:1 (MIG-1111, 2g.20gb): its GPU 0 (GPU-aaaa): ` + xid79 + ` left out (` + clearFix + `GPU-aaaa)`,
				`NVIDIA_VISIBLE_DEVICES=all: unhealthy MIG device 0:2 (MIG-2222, 1g.10gb): its GPU 0 (GPU-aaaa): ` + xid79 + ` left out (` + clearFix + `GPU-aaaa)`,
			}},
		{description: "none is not touched by health", env: []string{"NVIDIA_VISIBLE_DEVICES=none"},
			host: func(h *Host) { h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79) }},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := healthHost()
			if tc.host != nil {
				tc.host(&h)
			}
			r := req(t, append(tc.env, "NVIDIA_DRIVER_CAPABILITIES=utility")...)
			r.DockerGPUs = tc.docker
			p, err := Build(r, h, nil)
			if tc.wantErr != "" {
				if err == nil || !tc.docker && err.Error() != tc.wantErr || tc.docker && !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error =\n%v\nwant\n%s", err, tc.wantErr)
				}
				if !errors.Is(err, ErrUnhealthy) {
					t.Errorf("error does not wrap ErrUnhealthy")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := paths(p.Devices, func(d Device) string { return d.Index }); !reflect.DeepEqual(got, tc.wantDevices) {
				t.Errorf("devices %q, want %q", got, tc.wantDevices)
			}
			if !reflect.DeepEqual(p.Warnings, tc.wantWarnings) {
				t.Errorf("warnings:\n%q\nwant\n%q", p.Warnings, tc.wantWarnings)
			}
		})
	}
}

// TestDeviceHealth: a MIG device's health is its GPU's, else its own.
func TestDeviceHealth(t *testing.T) {
	h := healthHost()
	g := &h.Driver.GPUs[0]
	own, parent := recorded("own", 0), recorded("parent", 0)
	g.MIGDevices[1].Health = own
	ds := Devices(h.Driver.GPUs)
	if ds[0].Health() != nil || ds[1].Health() != own {
		t.Errorf("own: %+v %+v", ds[0].Health(), ds[1].Health())
	}
	g.Health = parent
	ds = Devices(h.Driver.GPUs)
	if ds[0].Health() != parent || ds[1].Health() != parent || ds[3].Health() != nil {
		t.Errorf("parent: %+v %+v %+v", ds[0].Health(), ds[1].Health(), ds[3].Health())
	}
}

func TestCDIHealth(t *testing.T) {
	h := healthHost()
	if err := checkCDIHealth([]string{"nvidia.com/gpu=all"}, Devices(h.Driver.GPUs)); err != nil {
		t.Errorf("healthy: %v", err)
	}
	h.Driver.GPUs[0].MIGDevices[2].Health = recorded("Xid 94: contained ECC error", 94)
	h.Driver.GPUs[3].Health = recorded("Xid 79: GPU has fallen off the bus", 79)
	err := checkCDIHealth([]string{"nvidia.com/gpu=all"}, Devices(h.Driver.GPUs))
	want := `unhealthy device: CDI devices "nvidia.com/gpu=all" give MIG device 0:2 (MIG-2222, 1g.10gb): Xid 94: contained ECC error since 2026-11-25T10:00:00Z (recorded in ` + healthFile + `) (` + clearFix + `MIG-2222); GPU 3 (GPU-dddd): ` + xid79 + ` (` + clearFix + `GPU-dddd); ask for other devices`
	if err == nil || err.Error() != want || !errors.Is(err, ErrUnhealthy) {
		t.Errorf("error =\n%v\nwant\n%s", err, want)
	}
}

// TestLeftOutEnv (issue 25 item 9): the devices "all" leaves out are data in the plan and
// become the container's GPU_RUNTIME_DEVICES_LEFT_OUT when the spec is written, each with its
// index, UUID and reason (bounded, no ';' or control characters); nothing left out, no variable.
func TestLeftOutEnv(t *testing.T) {
	h := healthHost()
	h.Driver.GPUs[1].Health = recorded("Xid 79: GPU has fallen off the bus", 79)
	h.Driver.GPUs[0].MIGDevices[0].Health = recorded("fan; failure\nreported "+strings.Repeat("x", 400), 0)
	for _, docker := range []bool{false, true} { // NVIDIA_VISIBLE_DEVICES=all, docker run --gpus all
		r := req(t, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility")
		r.DockerGPUs = docker
		p, err := Build(r, h, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []LeftOut{{Index: "0:0", UUID: "MIG-0000", Reason: "fan; failure\nreported " + strings.Repeat("x", 400)},
			{Index: "1", UUID: "GPU-bbbb", Reason: "Xid 79: GPU has fallen off the bus"}}
		if !reflect.DeepEqual(p.LeftOut, want) {
			t.Errorf("docker %v: left out %+v, want %+v", docker, p.LeftOut, want)
		}
		if slices.ContainsFunc(p.Edits.Env, func(kv string) bool { return strings.HasPrefix(kv, EnvLeftOut) }) {
			t.Error("the plan's edits hold the variable before it is rendered")
		}
		reason := "fan, failure,reported " + strings.Repeat("x", 400)
		wantEnv := EnvLeftOut + "=0:0 MIG-0000 " + reason[:256] + fmt.Sprintf("… (%d bytes)", len(reason)) + "; 1 GPU-bbbb Xid 79: GPU has fallen off the bus"
		e := p.Rendered(Render{})
		if !slices.Contains(e.Env, wantEnv) || !strings.Contains(e.EnvWhy, `devices left out: the unhealthy devices "all" did not give this container`) {
			t.Errorf("docker %v: env %q (%s)\nwant %q", docker, e.Env, e.EnvWhy, wantEnv)
		}
	}
	// Asked for by name, or nothing unhealthy: no variable.
	for _, env := range []string{"NVIDIA_VISIBLE_DEVICES=2", "NVIDIA_VISIBLE_DEVICES=all"} {
		hh := h
		if env == "NVIDIA_VISIBLE_DEVICES=all" {
			hh = healthHost()
		}
		p, err := Build(req(t, env, "NVIDIA_DRIVER_CAPABILITIES=utility"), hh, nil)
		if err != nil || len(p.LeftOut) != 0 || slices.ContainsFunc(p.Rendered(Render{}).Env, func(kv string) bool { return strings.HasPrefix(kv, EnvLeftOut) }) {
			t.Errorf("%s: %v, left out %+v", env, err, p.LeftOut)
		}
	}
}

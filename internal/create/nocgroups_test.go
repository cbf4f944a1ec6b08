package create

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestPrepareBundleNoCgroups: with runtime.no-cgroups (what a rootless gpu-runtime detects
// by itself, gpuhost.NoCgroups) the create writes the GPU's nodes as bind mounts from the
// device root and adds no device entry and no cgroup rule; a second pass leaves the spec as
// it is. Without the setting the same create adds device entries and rules.
func TestPrepareBundleNoCgroups(t *testing.T) {
	for _, noCgroups := range []bool{false, true} {
		e := newCreateEnv(t)
		e.opts.Config.Runtime.NoCgroups = noCgroups
		inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, false)
		if err := PrepareBundle(inv, e.opts); err != nil {
			t.Fatal(err)
		}
		s, written := readSpec(t, b)
		gpu1 := "/dev/nvidia" + strconv.Itoa(e.host.Options.GPUs[1].Minor)
		var devMounts []specs.Mount
		for _, m := range s.Mounts {
			if strings.HasPrefix(m.Destination, "/dev/") {
				devMounts = append(devMounts, m)
			}
		}
		if !noCgroups {
			if len(s.Linux.Devices) == 0 || len(s.Linux.Resources.Devices) < 2 || len(devMounts) != 0 {
				t.Errorf("with cgroups: devices %v, rules %v, /dev mounts %v; want device entries and rules, no mounts",
					s.Linux.Devices, s.Linux.Resources.Devices, devMounts)
			}
			continue
		}
		if len(s.Linux.Devices) != 0 {
			t.Errorf("no-cgroups: device entries %v, want none", s.Linux.Devices)
		}
		if want := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}; !reflect.DeepEqual(s.Linux.Resources.Devices, want) {
			t.Errorf("no-cgroups: cgroup rules %+v, want the spec's own %+v", s.Linux.Resources.Devices, want)
		}
		var dests []string
		for _, m := range devMounts {
			dests = append(dests, m.Destination)
			if m.Type != "bind" || m.Source != filepath.Join(e.host.DevRoot, m.Destination) || !reflect.DeepEqual(m.Options, []string{"bind", "nosuid", "noexec"}) {
				t.Errorf("no-cgroups: mount %+v, want a nosuid,noexec bind mount of %s", m, filepath.Join(e.host.DevRoot, m.Destination))
			}
		}
		if want := []string{gpu1, "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}; !reflect.DeepEqual(dests, want) {
			t.Errorf("no-cgroups: /dev mounts %v, want %v", dests, want)
		}

		// A second pass (restore, or a wrapper run twice) knows the mounts for gpu-runtime's.
		e.log.Reset()
		if err := PrepareBundle(inv, e.opts); err != nil {
			t.Fatal(err)
		}
		if _, again := readSpec(t, b); !bytes.Equal(again, written) {
			t.Error("no-cgroups: a second create changed the spec")
		}
		if info := e.logLines(t, "info"); len(info) != 1 || info[0]["msg"] != UnchangedInjected {
			t.Errorf("no-cgroups: second create logged %v, want %q", info, UnchangedInjected)
		}
	}
}

// TestPrepareBundleEngineMountedControlNode: rootless engines give --device /dev/nvidiactl
// as a bind mount; such a spec has its GPUs and is left unchanged.
func TestPrepareBundleEngineMountedControlNode(t *testing.T) {
	e := newCreateEnv(t)
	inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, false)
	editRaw(t, b, func(s *specs.Spec) {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/dev/nvidiactl", Type: "bind", Source: "/dev/nvidiactl", Options: []string{"rbind"}})
	})
	_, before := readSpec(t, b)
	if err := PrepareBundle(inv, e.opts); err != nil {
		t.Fatal(err)
	}
	if _, after := readSpec(t, b); !bytes.Equal(before, after) {
		t.Error("a spec with the engine's /dev/nvidiactl mount changed")
	}
	if info := e.logLines(t, "info"); len(info) != 1 || info[0]["msg"] != UnchangedEngineInjected {
		t.Errorf("info lines %v, want %q", info, UnchangedEngineInjected)
	}
	if e.queries != 0 {
		t.Errorf("%d NVML queries", e.queries)
	}
}

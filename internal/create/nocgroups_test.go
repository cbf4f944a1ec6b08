package create

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
)

// TestPrepareBundleNoCgroups: where gpu-runtime runs rootless (Options.Rootless, by default
// gpuhost.Rootless), or with runtime.no-cgroups, the create writes the GPU's nodes as bind
// mounts from the device root and adds no device entry and no cgroup rule; a second pass
// leaves the spec as it is. Otherwise the same create adds device entries and rules.
func TestPrepareBundleNoCgroups(t *testing.T) {
	for _, tc := range []struct {
		description string
		setting     bool
		rootless    string
	}{
		{description: "root, no setting"},
		{description: "runtime.no-cgroups", setting: true},
		{description: "rootless", rootless: "gpu-runtime runs in a user namespace (rootless)"},
	} {
		noCgroups := tc.setting || tc.rootless != ""
		e := newCreateEnv(t)
		e.opts.Config.Runtime.NoCgroups = tc.setting
		e.opts.Rootless = func() string { return tc.rootless }
		inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, false)
		if err := PrepareBundle(inv, e.opts); err != nil {
			t.Fatal(err)
		}
		// Set where gpu-runtime is the host's root, the setting is a warning in runc's log.
		var warned bool
		for _, w := range e.logLines(t, "warning") {
			warned = warned || w["msg"] == gpuhost.NoCgroupsRootfulWarning
		}
		if want := tc.setting && tc.rootless == ""; warned != want {
			t.Errorf("%s: warned %v, want %v: %q", tc.description, warned, want, gpuhost.NoCgroupsRootfulWarning)
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
				t.Errorf("%s: devices %v, rules %v, /dev mounts %v; want device entries and rules, no mounts", tc.description,
					s.Linux.Devices, s.Linux.Resources.Devices, devMounts)
			}
			continue
		}
		if len(s.Linux.Devices) != 0 {
			t.Errorf("%s: device entries %v, want none", tc.description, s.Linux.Devices)
		}
		if want := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}; !reflect.DeepEqual(s.Linux.Resources.Devices, want) {
			t.Errorf("%s: cgroup rules %+v, want the spec's own %+v", tc.description, s.Linux.Resources.Devices, want)
		}
		var dests []string
		for _, m := range devMounts {
			dests = append(dests, m.Destination)
			if m.Type != "bind" || m.Source != filepath.Join(e.host.DevRoot, m.Destination) || !reflect.DeepEqual(m.Options, []string{"bind", "nosuid", "noexec"}) {
				t.Errorf("%s: mount %+v, want a nosuid,noexec bind mount of %s", tc.description, m, filepath.Join(e.host.DevRoot, m.Destination))
			}
		}
		if want := []string{gpu1, "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}; !reflect.DeepEqual(dests, want) {
			t.Errorf("%s: /dev mounts %v, want %v", tc.description, dests, want)
		}

		// A second pass (restore, or a wrapper run twice) knows the mounts for gpu-runtime's.
		e.log.Reset()
		if err := PrepareBundle(inv, e.opts); err != nil {
			t.Fatal(err)
		}
		if _, again := readSpec(t, b); !bytes.Equal(again, written) {
			t.Errorf("%s: a second create changed the spec", tc.description)
		}
		if info := e.logLines(t, "info"); len(info) != 1 || info[0]["msg"] != UnchangedInjected {
			t.Errorf("%s: second create logged %v, want %q", tc.description, info, UnchangedInjected)
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

// TestPrepareBundleTmpfsAtControlNode: only a bind mount says the engine gave the node; a
// tmpfs there (a volume) does not stop the injection.
func TestPrepareBundleTmpfsAtControlNode(t *testing.T) {
	e := newCreateEnv(t)
	inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, false)
	editRaw(t, b, func(s *specs.Spec) {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/dev/nvidiactl", Type: "tmpfs", Source: "tmpfs"})
	})
	if err := PrepareBundle(inv, e.opts); err != nil {
		t.Fatal(err)
	}
	if s, _ := readSpec(t, b); !hasDevice(&s, "/dev/nvidiactl") {
		t.Errorf("a tmpfs at /dev/nvidiactl stopped the injection: devices %v", s.Linux.Devices)
	}
}

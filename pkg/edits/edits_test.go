package edits

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func i64(v int64) *int64 { return &v }

func TestApplyWholeSpec(t *testing.T) {
	e := Edits{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=0"},
		RemoveHooks: []string{"nvidia-container-runtime-hook"},
		DeviceNodes: []DeviceNode{
			{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0, FileMode: 0o666},
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: 0o666},
		},
		Mounts: []Mount{{HostPath: "/drv/usr/lib/libcuda.so.1.2", ContainerPath: "/usr/lib/libcuda.so.1.2", Options: []string{"ro", "nosuid", "nodev", "bind"}}},
		Hooks:  []Hook{{Stage: "createContainer", Path: "/usr/bin/gpu-hook", Args: []string{"gpu-hook", "update-ldcache"}, Env: []string{"PATH=/bin"}}},
	}
	start := func() *specs.Spec {
		return &specs.Spec{
			Process: &specs.Process{Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"}},
			Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}, {Destination: "/usr/lib/libcuda.so.1.2", Type: "bind", Source: "/image-provided"}},
			Hooks: &specs.Hooks{Prestart: []specs.Hook{ //nolint:staticcheck // docker writes the deprecated prestart stage
				{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"nvidia-container-runtime-hook", "prestart"}},
				{Path: "/usr/bin/other-hook"},
			}},
			Linux: &specs.Linux{Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}},
		}
	}
	want := &specs.Spec{
		Process: &specs.Process{Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/usr/lib/libcuda.so.1.2", Type: "bind", Source: "/drv/usr/lib/libcuda.so.1.2", Options: []string{"ro", "nosuid", "nodev", "bind"}},
		},
		Hooks: &specs.Hooks{
			Prestart:        []specs.Hook{{Path: "/usr/bin/other-hook"}}, //nolint:staticcheck // the stage docker uses
			CreateContainer: []specs.Hook{{Path: "/usr/bin/gpu-hook", Args: []string{"gpu-hook", "update-ldcache"}, Env: []string{"PATH=/bin"}}},
		},
		Linux: &specs.Linux{
			Devices: []specs.LinuxDevice{
				{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0, FileMode: fileMode(0o666), UID: u32(0), GID: u32(0)},
				{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: fileMode(0o666), UID: u32(0), GID: u32(0)},
			},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{
				{Allow: false, Access: "rwm"},
				{Allow: true, Type: "c", Major: i64(195), Minor: i64(0), Access: "rwm"},
				{Allow: true, Type: "c", Major: i64(195), Minor: i64(255), Access: "rwm"},
			}},
		},
	}
	got := start()
	if err := e.Apply(got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after one apply:\n got %s\nwant %s", dump(got), dump(want))
	}
	if err := e.Apply(got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("apply is not idempotent:\n got %s\nwant %s", dump(got), dump(want))
	}
	empty := &specs.Spec{}
	if err := e.Apply(empty); err != nil {
		t.Fatalf("apply to an empty spec must create parents: %v", err)
	}
	if len(empty.Linux.Devices) != 2 || len(empty.Linux.Resources.Devices) != 2 {
		t.Errorf("empty spec: devices %v rules %v", empty.Linux.Devices, empty.Linux.Resources.Devices)
	}
	for _, r := range empty.Linux.Resources.Devices {
		if r.Major == nil || r.Minor == nil || r.Type == "" || r.Access == "" || !r.Allow {
			t.Errorf("wildcard or partial cgroup rule: %+v", r)
		}
	}
}

// TestApplyCDIFields: what CDI devices bring besides nodes and bind mounts — a cgroup access
// narrower than rwm, a mount of another type, ID-mapped bind mounts (given the user
// namespace's mappings only where there is one), additional groups (0 skipped, each once),
// annotations — and injected mounts ordered by depth after the spec's own.
func TestApplyCDIFields(t *testing.T) {
	e := Edits{
		DeviceNodes: []DeviceNode{{Path: "/dev/x", Type: "c", Major: 10, Minor: 1, Access: "rw"}},
		Mounts: []Mount{
			{HostPath: "/host/a/b", ContainerPath: "/a/b", IDMapped: true},
			{HostPath: "tmpfs", ContainerPath: "/a", Type: "tmpfs", Options: []string{"size=1m"}, IDMapped: true},
		},
		AdditionalGIDs: []uint32{0, 44, 44, 45},
		Annotations:    map[string]string{"dev.example/x": "1"},
	}
	ids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	for _, userns := range []bool{false, true} {
		s := &specs.Spec{Process: &specs.Process{User: specs.User{AdditionalGids: []uint32{45}}},
			Mounts: []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}}, Linux: &specs.Linux{}}
		if userns {
			s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.UserNamespace}}
			s.Linux.UIDMappings, s.Linux.GIDMappings = ids, ids
		}
		if err := e.Apply(s); err != nil {
			t.Fatal(err)
		}
		var mapped []specs.LinuxIDMapping
		if userns {
			mapped = ids
		}
		wantMounts := []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/a", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m"}},
			{Destination: "/a/b", Type: "bind", Source: "/host/a/b", UIDMappings: mapped, GIDMappings: mapped},
		}
		if !reflect.DeepEqual(s.Mounts, wantMounts) {
			t.Errorf("user namespace %v: mounts\n got %+v\nwant %+v", userns, s.Mounts, wantMounts)
		}
		if r := s.Linux.Resources.Devices; len(r) != 1 || r[0].Access != "rw" || !r[0].Allow {
			t.Errorf("cgroup rules = %+v, want one allowing rw", r)
		}
		if got := s.Process.User.AdditionalGids; !reflect.DeepEqual(got, []uint32{45, 44}) {
			t.Errorf("additional groups = %v, want [45 44]", got)
		}
		if s.Annotations["dev.example/x"] != "1" {
			t.Errorf("annotations = %v", s.Annotations)
		}
	}
}

func fileMode(m os.FileMode) *os.FileMode { return &m }
func u32(v uint32) *uint32                { return &v }

func dump(s *specs.Spec) string { b, _ := json.MarshalIndent(s, "", " "); return string(b) }

func TestApplyErrors(t *testing.T) {
	testCases := []struct {
		description string
		edits       Edits
		wantErr     string
	}{
		{"hook without env", Edits{Hooks: []Hook{{Stage: "createContainer", Path: "/bin/h"}}}, "add createContainer hook /bin/h: env must not be empty"},
		{"relative hook path", Edits{Hooks: []Hook{{Stage: "prestart", Path: "h", Env: []string{"A=1"}}}}, `add prestart hook "h": path must be absolute`},
		{"unknown stage", Edits{Hooks: []Hook{{Stage: "later", Path: "/h", Env: []string{"A=1"}}}}, `unknown hook stage "later"`},
		{"relative device", Edits{DeviceNodes: []DeviceNode{{Path: "dev/x", Type: "c"}}}, `add device "dev/x": path must be absolute`},
		{"device without type", Edits{DeviceNodes: []DeviceNode{{Path: "/dev/x"}}}, `add device /dev/x: type "" is not c or b`},
		{"relative mount", Edits{Mounts: []Mount{{HostPath: "/a", ContainerPath: "b"}}}, "add mount /a -> b: source and destination must be absolute"},
		{"bad env", Edits{Env: []string{"=x"}}, `set env "=x": want KEY=value`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			err := tc.edits.Apply(&specs.Spec{})
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

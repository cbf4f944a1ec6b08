package edits

import (
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestNodesAsMountsWholeSpec: without cgroups a node is a bind mount of the host's node (from
// the device root), and the spec gets no device entry and no cgroup rule.
func TestNodesAsMountsWholeSpec(t *testing.T) {
	e := Edits{
		DeviceNodes: []DeviceNode{
			{Path: "/dev/nvidia1", HostPath: "/run/nvidia/driver/dev/nvidia1", Type: "c", Major: 195, Minor: 1, FileMode: 0o666, Why: "GPU 1"},
			// A CDI node may have no host path: the host's node at its container path.
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: 0o666, Access: "r"},
		},
		Mounts: []Mount{{HostPath: "/drv/libcuda.so.1", ContainerPath: "/usr/lib/libcuda.so.1", Options: []string{"ro", "nosuid", "nodev", "bind"}}},
	}
	got := e.NodesAsMounts("no cgroups: rootless")
	wantMounts := []Mount{
		{HostPath: "/run/nvidia/driver/dev/nvidia1", ContainerPath: "/dev/nvidia1", Type: "bind", Options: []string{"bind", "nosuid", "noexec"}, Why: "GPU 1; no cgroups: rootless"},
		{HostPath: "/dev/nvidiactl", ContainerPath: "/dev/nvidiactl", Type: "bind", Options: []string{"bind", "nosuid", "noexec"}, Why: "no cgroups: rootless"},
		e.Mounts[0],
	}
	if len(got.DeviceNodes) != 0 || !reflect.DeepEqual(got.Mounts, wantMounts) {
		t.Errorf("NodesAsMounts: nodes %+v, mounts\n%+v\nwant no nodes, mounts\n%+v", got.DeviceNodes, got.Mounts, wantMounts)
	}
	if len(e.DeviceNodes) != 2 || len(e.Mounts) != 1 {
		t.Errorf("NodesAsMounts changed its receiver: %+v", e)
	}

	spec := &specs.Spec{
		Mounts: []specs.Mount{{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"}},
		Linux:  &specs.Linux{Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}},
	}
	if err := got.Apply(spec); err != nil {
		t.Fatal(err)
	}
	want := &specs.Spec{
		Mounts: []specs.Mount{
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/dev/nvidia1", Type: "bind", Source: "/run/nvidia/driver/dev/nvidia1", Options: []string{"bind", "nosuid", "noexec"}},
			{Destination: "/dev/nvidiactl", Type: "bind", Source: "/dev/nvidiactl", Options: []string{"bind", "nosuid", "noexec"}},
			{Destination: "/usr/lib/libcuda.so.1", Type: "bind", Source: "/drv/libcuda.so.1", Options: []string{"ro", "nosuid", "nodev", "bind"}},
		},
		Linux: &specs.Linux{Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("applied:\n%+v\nwant\n%+v", spec, want)
	}
}

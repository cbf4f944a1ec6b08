package plan

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
)

// TestBuildNoCgroups: with Host.NoCgroups every node the plan injects, native and CDI, is a
// bind mount of the host's node under the device root, and no device entry (so no cgroup
// rule) is left; without it the same request gets device nodes.
func TestBuildNoCgroups(t *testing.T) {
	cdi := []CDIDevice{{Name: "example.com/x=0", Nodes: []string{"/dev/x0"},
		Edits: edits.Edits{DeviceNodes: []edits.DeviceNode{{Path: "/dev/x0", Type: "c", Major: 10, Minor: 1, Access: "rw"}}}}}
	r := req(t, "NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=compute")

	withCgroups, err := Build(r, testHost(), cdi)
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := []string{"/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/x0"}
	if got := paths(withCgroups.Edits.DeviceNodes, func(n edits.DeviceNode) string { return n.Path }); !reflect.DeepEqual(got, wantNodes) {
		t.Fatalf("device nodes with cgroups = %v, want %v", got, wantNodes)
	}

	host := testHost()
	host.NoCgroups = "gpu-runtime runs in a user namespace (rootless)"
	p, err := Build(r, host, cdi)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Edits.DeviceNodes) != 0 {
		t.Errorf("device nodes without cgroups = %v, want none", paths(p.Edits.DeviceNodes, func(n edits.DeviceNode) string { return n.Path }))
	}
	why := "bind-mounted, no device cgroup rule: gpu-runtime runs in a user namespace (rootless)"
	var gotDevMounts []edits.Mount
	for _, m := range p.Edits.Mounts {
		if strings.HasPrefix(m.ContainerPath, "/dev/") {
			gotDevMounts = append(gotDevMounts, m)
		}
	}
	var wantDevMounts []edits.Mount
	for _, n := range withCgroups.Edits.DeviceNodes {
		host := n.HostPath
		if host == "" {
			host = n.Path
		}
		reason := why
		if n.Why != "" {
			reason = n.Why + "; " + why
		}
		wantDevMounts = append(wantDevMounts, edits.Mount{HostPath: host, ContainerPath: n.Path, Type: "bind",
			Options: []string{"bind", "nosuid", "noexec"}, Why: reason})
	}
	if !reflect.DeepEqual(gotDevMounts, wantDevMounts) {
		t.Errorf("device mounts =\n%+v\nwant\n%+v", gotDevMounts, wantDevMounts)
	}
	if wantDevMounts[0].HostPath != "/devroot/dev/nvidia2" {
		t.Errorf("GPU 1's node is mounted from %s, want the device root's /devroot/dev/nvidia2", wantDevMounts[0].HostPath)
	}
	if got, want := len(p.Edits.Mounts), len(withCgroups.Edits.Mounts)+len(wantNodes); got != want {
		t.Errorf("%d mounts, want %d (the driver files' and one per node)", got, want)
	}
	if !reflect.DeepEqual(p.Devices, withCgroups.Devices) || !reflect.DeepEqual(p.LoaderCache, withCgroups.LoaderCache) {
		t.Errorf("NoCgroups changed the devices or the loader cache: %+v, %+v", p.Devices, p.LoaderCache)
	}
}

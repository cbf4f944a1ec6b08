package plan

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// featureHost is testHost with the nodes of every DGX/HGX feature, numbered as fakehost
// numbers them.
func featureHost() Host {
	h := testHost()
	for _, n := range []discover.DeviceNode{
		node("/dev/nvidia-fs0", 233, 0), node("/dev/nvidia-fs1", 233, 1), node("/dev/nvidia-fs10", 233, 10), node("/dev/nvidia-fs2", 233, 2),
		node("/dev/infiniband/uverbs0", 231, 192), node("/dev/infiniband/uverbs1", 231, 193), node("/dev/infiniband/rdma_cm", 10, 58),
		node("/dev/gdrdrv", 232, 0),
		node("/dev/nvidia-nvswitch0", 234, 0), node("/dev/nvidia-nvswitchctl", 234, 255),
	} {
		h.Devices.Nodes[n.Path] = n
	}
	return h
}

// featureNodes returns the plan's nodes that no GPU container gets without a feature.
func featureNodes(p Plan) []string {
	base := map[string]bool{}
	for _, n := range testHost().Devices.Nodes {
		base[n.Path] = true
	}
	var out []string
	for _, n := range p.Edits.DeviceNodes {
		if !base[n.Path] {
			out = append(out, fmt.Sprintf("%s %d:%d %s", n.Path, n.Major, n.Minor, n.Why))
		}
	}
	return out
}

func TestBuildFeatures(t *testing.T) {
	gds := []string{
		"/dev/nvidia-fs0 233:0 NVIDIA_GDS=enabled: GPUDirect Storage", "/dev/nvidia-fs1 233:1 NVIDIA_GDS=enabled: GPUDirect Storage",
		"/dev/nvidia-fs2 233:2 NVIDIA_GDS=enabled: GPUDirect Storage", "/dev/nvidia-fs10 233:10 NVIDIA_GDS=enabled: GPUDirect Storage",
	}
	mofed := []string{
		"/dev/infiniband/rdma_cm 10:58 NVIDIA_MOFED=enabled: MOFED (InfiniBand verbs and RDMA CM)",
		"/dev/infiniband/uverbs0 231:192 NVIDIA_MOFED=enabled: MOFED (InfiniBand verbs and RDMA CM)",
		"/dev/infiniband/uverbs1 231:193 NVIDIA_MOFED=enabled: MOFED (InfiniBand verbs and RDMA CM)",
	}
	gdrcopy := []string{"/dev/gdrdrv 232:0 NVIDIA_GDRCOPY=enabled: GDRCopy"}
	nvswitch := []string{"/dev/nvidia-nvswitch0 234:0 NVIDIA_NVSWITCH=enabled: NVSwitch", "/dev/nvidia-nvswitchctl 234:255 NVIDIA_NVSWITCH=enabled: NVSwitch"}
	testCases := []struct {
		description  string
		env          []string
		host         func() Host
		wantNodes    []string
		wantWarnings []string
	}{
		{description: "no feature asked: none of their nodes", env: []string{"NVIDIA_VISIBLE_DEVICES=0"}, host: featureHost},
		{description: "GDS: every nvidia-fs node, in number order", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled"}, host: featureHost, wantNodes: gds},
		{description: "MOFED: uverbs and rdma_cm", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MOFED=enabled"}, host: featureHost, wantNodes: mofed},
		{description: "GDRCopy", env: []string{"NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_GDRCOPY=enabled"}, host: featureHost, wantNodes: gdrcopy},
		{description: "NVSwitch: switches and the control node", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_NVSWITCH=enabled"}, host: featureHost, wantNodes: nvswitch},
		{description: "all four", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_NVSWITCH=enabled", "NVIDIA_GDS=enabled", "NVIDIA_GDRCOPY=enabled", "NVIDIA_MOFED=enabled"},
			host: featureHost, wantNodes: append(append(append(append([]string{}, gds...), mofed...), gdrcopy...), nvswitch...)},
		{description: "not a GPU container: the variable alone gives nothing", env: []string{"NVIDIA_GDS=enabled"}, host: featureHost},
		{description: "a value other than enabled: nothing, and what to write", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDRCOPY=1"}, host: featureHost,
			wantWarnings: []string{`NVIDIA_GDRCOPY="1" is not "enabled": its devices are not injected (to have them, set NVIDIA_GDRCOPY=enabled)`}},
		{description: "disabled: nothing, no warning", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=disabled"}, host: featureHost},
		{description: "the host lacks the feature: a warning with the fix", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled", "NVIDIA_NVSWITCH=enabled"}, host: testHost,
			wantWarnings: []string{
				`NVIDIA_GDS=enabled: no GPUDirect Storage node (/dev/nvidia-fs*) under device root "/devroot", nothing injected for it: load the nvidia-fs module (modprobe nvidia-fs) from NVIDIA's GDS packages`,
				`NVIDIA_NVSWITCH=enabled: no NVSwitch node (/dev/nvidia-nvswitch*) under device root "/devroot", nothing injected for it: this host has no NVSwitch driver nodes: NVSwitch systems (HGX, DGX) create them when the driver loads`,
			}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p, err := Build(req(t, tc.env...), tc.host(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := featureNodes(p); !reflect.DeepEqual(got, tc.wantNodes) {
				t.Errorf("feature nodes:\n got %q\nwant %q", got, tc.wantNodes)
			}
			if !reflect.DeepEqual(p.Warnings, tc.wantWarnings) {
				t.Errorf("warnings:\n got %q\nwant %q", p.Warnings, tc.wantWarnings)
			}
		})
	}
}

// TestBuildFeatureInvalidNode: a feature path that is not a character device fails the
// create, naming the variable and the file, as a bad GPU node does.
func TestBuildFeatureInvalidNode(t *testing.T) {
	h := featureHost()
	h.Devices.Invalid["/dev/gdrdrv"] = fmt.Errorf("%w: /devroot/dev/gdrdrv is a symlink, not a device node", discover.ErrDeviceNode)
	delete(h.Devices.Nodes, "/dev/gdrdrv")
	_, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDRCOPY=enabled"), h, nil)
	want := "missing device node: NVIDIA_GDRCOPY=enabled: bad device node: /devroot/dev/gdrdrv is a symlink, not a device node"
	if !errors.Is(err, ErrMissingNode) || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// TestFeatureNodesApplied: the one applier gives each feature node its cgroup rule.
func TestFeatureNodesApplied(t *testing.T) {
	p, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MOFED=enabled"), featureHost(), nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	if err := p.Edits.Apply(spec); err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, r := range spec.Linux.Resources.Devices {
		if r.Allow && r.Major != nil && r.Minor != nil {
			rules[fmt.Sprintf("%s %d:%d %s", r.Type, *r.Major, *r.Minor, r.Access)] = true
		}
	}
	for _, want := range []string{"c 231:192 rwm", "c 231:193 rwm", "c 10:58 rwm"} {
		if !rules[want] {
			t.Errorf("no cgroup rule %s in %v", want, rules)
		}
	}
}

package cdi

import (
	"reflect"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// TestGenerateFeature: --mode writes NVIDIA's gated spec shape — kind nvidia.com/<feature>,
// one device "all" with the host's nodes of the feature, nothing common — and refuses a host
// without the nodes, saying how it gets them.
func TestGenerateFeature(t *testing.T) {
	nodes := map[string]discover.DeviceNode{}
	for _, n := range []discover.DeviceNode{
		{Path: "/dev/nvidia0", Major: 195, Minor: 0},
		{Path: "/dev/infiniband/uverbs0", Major: 231, Minor: 192}, {Path: "/dev/infiniband/rdma_cm", Major: 10, Minor: 58},
		{Path: "/dev/gdrdrv", Major: 232, Minor: 0},
	} {
		n.HostPath, n.Type, n.FileMode = "/devroot"+n.Path, "c", 0o666
		nodes[n.Path] = n
	}
	host := plan.Host{Devices: discover.DeviceNodes{Root: "/devroot", Nodes: nodes, Invalid: map[string]error{}}}
	spec, err := GenerateFeature(host, request.FeatureMOFED, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		got = append(got, n.Path+" "+n.HostPath)
	}
	want := []string{"/dev/infiniband/rdma_cm /devroot/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0 /devroot/dev/infiniband/uverbs0"}
	if spec.Kind != "nvidia.com/mofed" || len(spec.Devices) != 1 || spec.Devices[0].Name != "all" || !reflect.DeepEqual(got, want) ||
		spec.ContainerEdits.DeviceNodes != nil || spec.Version != "0.5.0" {
		t.Errorf("spec: kind %s, version %s, devices %d, nodes %q, common %+v", spec.Kind, spec.Version, len(spec.Devices), got, spec.ContainerEdits)
	}
	if spec, err := GenerateFeature(host, request.FeatureGDRCopy, "example.com/gdr"); err != nil || spec.Kind != "example.com/gdr" {
		t.Errorf("--kind: %v, %v", spec, err)
	}
	_, err = GenerateFeature(host, request.FeatureGDS, "")
	wantErr := `--mode gds: no GPUDirect Storage node (/dev/nvidia-fs*) under device root "/devroot", no spec written: load the nvidia-fs module (modprobe nvidia-fs) from NVIDIA's GDS packages`
	if err == nil || err.Error() != wantErr {
		t.Errorf("err = %v, want %q", err, wantErr)
	}
}

package deviceplugin

import (
	"context"
	"reflect"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

func TestAllocate(t *testing.T) {
	ids := []string{"GPU-a", "GPU-b"}
	testCases := []struct {
		description string
		strategy    string
		want        *pluginapi.ContainerAllocateResponse
	}{
		{description: "envvar: the UUIDs in NVIDIA_VISIBLE_DEVICES", strategy: "envvar",
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}}},
		{description: "volume-mounts: /dev/null at the device list root, one file per UUID", strategy: "volume-mounts",
			want: &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
				Mounts: []*pluginapi.Mount{
					{ContainerPath: "/var/run/nvidia-container-devices/GPU-a", HostPath: "/dev/null", ReadOnly: true},
					{ContainerPath: "/var/run/nvidia-container-devices/GPU-b", HostPath: "/dev/null", ReadOnly: true},
				}}},
		{description: "cdi-cri: a CDI device per UUID", strategy: "cdi-cri",
			want: &pluginapi.ContainerAllocateResponse{CdiDevices: []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=GPU-a"}, {Name: "nvidia.com/gpu=GPU-b"}}}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := Allocate(tc.strategy, ids)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Allocate(%s) = %v, want %v", tc.strategy, got, tc.want)
			}
		})
	}
}

// TestAllocateAnnotations: one cdi.k8s.io annotation naming every device, its key unique per
// response (the CDI library's <plugin>_<id> form, at most 63 characters after the prefix).
func TestAllocateAnnotations(t *testing.T) {
	a, err := Allocate("cdi-annotations", []string{"GPU-a", "MIG-b"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Allocate("cdi-annotations", []string{"GPU-a"})
	if len(a.Annotations) != 1 || a.Envs != nil || a.Mounts != nil || a.CdiDevices != nil {
		t.Fatalf("response %v, want one annotation and nothing else", a)
	}
	for k, v := range a.Annotations {
		if !strings.HasPrefix(k, AnnotationPrefix) || len(strings.TrimPrefix(k, "cdi.k8s.io/")) > 63 {
			t.Errorf("annotation key %q", k)
		}
		if v != "nvidia.com/gpu=GPU-a,nvidia.com/gpu=MIG-b" {
			t.Errorf("annotation value %q", v)
		}
		if _, same := b.Annotations[k]; same {
			t.Errorf("two responses share the annotation key %q", k)
		}
	}
}

func TestAllocateUnknownStrategy(t *testing.T) {
	_, err := Allocate("env", []string{"GPU-a"})
	if err == nil || err.Error() != `device-list strategy "env": want one of envvar, volume-mounts, cdi-annotations, cdi-cri` {
		t.Errorf("err = %v", err)
	}
}

func TestServerAllocateRefusesUnknownDevice(t *testing.T) {
	s := &Server{Resource: Resource{Name: "nvidia.com/gpu", Devices: []string{"GPU-a"}}, Strategy: "envvar"}
	_, err := s.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-x"}}}})
	if err == nil || !strings.Contains(err.Error(), `unknown device "GPU-x"`) {
		t.Errorf("err = %v", err)
	}
}

func TestResources(t *testing.T) {
	d := discover.Driver{GPUs: []discover.GPU{
		{Index: 0, UUID: "GPU-0"},
		{Index: 1, UUID: "GPU-1", MIGCapable: true, MIGCurrent: true, MIGDevices: []discover.MIGDevice{
			{UUID: "MIG-a", Profile: "3g.40gb"}, {UUID: "MIG-b", Profile: "1g.10gb"}, {UUID: "MIG-c", Profile: "1g.10gb"}}},
	}}
	testCases := []struct {
		migStrategy string
		want        []Resource
	}{
		{"none", []Resource{{Name: "nvidia.com/gpu", Devices: []string{"GPU-0", "GPU-1"}}}},
		{"mixed", []Resource{
			{Name: "nvidia.com/gpu", Devices: []string{"GPU-0"}},
			{Name: "nvidia.com/mig-1g.10gb", Devices: []string{"MIG-b", "MIG-c"}},
			{Name: "nvidia.com/mig-3g.40gb", Devices: []string{"MIG-a"}},
		}},
	}
	for _, tc := range testCases {
		t.Run(tc.migStrategy, func(t *testing.T) {
			got, err := Resources(d, tc.migStrategy)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Resources(%s) = %v, want %v", tc.migStrategy, got, tc.want)
			}
		})
	}
	if _, err := Resources(d, "single"); err == nil {
		t.Error("MIG strategy single: no error")
	}
}

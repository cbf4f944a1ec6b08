package plan

import (
	"reflect"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
)

func TestMountFor(t *testing.T) {
	testCases := []struct {
		description string
		file        discover.File
		want        edits.Mount
	}{
		{"library keeps exec", discover.File{Kind: discover.KindLibrary, Capability: "compute", Prefix: "libcuda", Bits: 64, HostPath: "/run/nvidia/driver/usr/lib/libcuda.so.1.2", ContainerPath: "/usr/lib/libcuda.so.1.2"},
			edits.Mount{HostPath: "/run/nvidia/driver/usr/lib/libcuda.so.1.2", ContainerPath: "/usr/lib/libcuda.so.1.2", Options: []string{"ro", "nosuid", "nodev", "bind"}, Why: "compute: library libcuda (64-bit)"}},
		{"a 32-bit library", discover.File{Kind: discover.KindLibrary, Capability: "compute", Prefix: "libcuda", Bits: 32, HostPath: "/usr/lib32/libcuda.so.1.2", ContainerPath: "/usr/lib32/libcuda.so.1.2"},
			edits.Mount{HostPath: "/usr/lib32/libcuda.so.1.2", ContainerPath: "/usr/lib32/libcuda.so.1.2", Options: []string{"ro", "nosuid", "nodev", "bind"}, Why: "compute and compat32: library libcuda (32-bit)"}},
		{"binary keeps exec", discover.File{Kind: discover.KindBinary, Capability: "utility", HostPath: "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi"},
			edits.Mount{HostPath: "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: []string{"ro", "nosuid", "nodev", "bind"}, Why: "utility: binary nvidia-smi"}},
		{"firmware is noexec", discover.File{Kind: discover.KindFirmware, HostPath: "/lib/firmware/nvidia/1/gsp.bin", ContainerPath: "/lib/firmware/nvidia/1/gsp.bin"},
			edits.Mount{HostPath: "/lib/firmware/nvidia/1/gsp.bin", ContainerPath: "/lib/firmware/nvidia/1/gsp.bin", Options: []string{"ro", "nosuid", "nodev", "bind", "noexec"}, Why: "firmware: every GPU container (the GPU's GSP firmware)"}},
		{"socket is noexec", discover.File{Kind: discover.KindSocket, Capability: "utility", HostPath: "/d/var/run/nvidia-persistenced/socket", ContainerPath: "/var/run/nvidia-persistenced/socket"},
			edits.Mount{HostPath: "/d/var/run/nvidia-persistenced/socket", ContainerPath: "/var/run/nvidia-persistenced/socket", Options: []string{"ro", "nosuid", "nodev", "bind", "noexec"}, Why: "utility: socket /var/run/nvidia-persistenced/socket"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := mountFor(tc.file); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// Options must not alias the shared ReadOnly slice.
	a := mountFor(discover.File{Kind: discover.KindLibrary}) // no option appended: the one case that could alias
	a.Options[0] = "rw"
	if readOnly[0] != "ro" {
		t.Fatal("ForFile returned options aliasing readOnly")
	}
}

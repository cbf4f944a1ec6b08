package oci

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// modelAddDevice and modelAddMount are the one-at-a-time definitions of WithDevices and
// WithMounts for one element: remove what the new element replaces, append it.
func modelAddDevice(s *specs.Spec, d specs.LinuxDevice) {
	var devices []specs.LinuxDevice
	for _, e := range s.Linux.Devices {
		if filepath.Clean(e.Path) != filepath.Clean(d.Path) {
			devices = append(devices, e)
		}
	}
	s.Linux.Devices = append(devices, d)
	major, minor := d.Major, d.Minor
	rule := specs.LinuxDeviceCgroup{Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: "rwm"}
	var rules []specs.LinuxDeviceCgroup
	for _, r := range s.Linux.Resources.Devices {
		same := r.Allow && r.Type == rule.Type && r.Access == rule.Access && r.Major != nil && r.Minor != nil &&
			*r.Major == major && *r.Minor == minor
		if !same {
			rules = append(rules, r)
		}
	}
	s.Linux.Resources.Devices = append(rules, rule)
}

func modelAddMount(s *specs.Spec, m specs.Mount) {
	var mounts []specs.Mount
	for _, e := range s.Mounts {
		if filepath.Clean(e.Destination) != filepath.Clean(m.Destination) {
			mounts = append(mounts, e)
		}
	}
	s.Mounts = append(mounts, m)
}

// TestBatchEditsMatchOneAtATime: WithDevices and WithMounts give what adding their elements
// one at a time gives, duplicates within the batch and replaced existing entries included.
func TestBatchEditsMatchOneAtATime(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	device := func() specs.LinuxDevice {
		n := rng.Int64N(4)
		path := []string{"/dev/nvidia%d", "/dev//nvidia%d", "/dev/./nvidia%d/"}[rng.IntN(3)]
		return specs.LinuxDevice{Path: fmt.Sprintf(path, rng.IntN(5)), Type: "c", Major: 195, Minor: n}
	}
	mount := func() specs.Mount {
		dest := []string{"/usr/lib/a", "/usr/lib/a/", "/usr/lib/b", "/usr/bin/c", "/usr/lib/../lib/b"}[rng.IntN(5)]
		return specs.Mount{Destination: dest, Source: fmt.Sprintf("/host%d", rng.IntN(100)), Type: "bind"}
	}
	for i := 0; i < 2000; i++ {
		base := specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{
			Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}}}
		for j := rng.IntN(5); j > 0; j-- {
			modelAddDevice(&base, device())
			modelAddMount(&base, mount())
		}
		var ds []specs.LinuxDevice
		var ms []specs.Mount
		for j := rng.IntN(8); j > 0; j-- {
			ds, ms = append(ds, device()), append(ms, mount())
		}
		want := normalize(base) // a deep copy
		for _, d := range ds {
			modelAddDevice(&want, d)
		}
		for _, m := range ms {
			modelAddMount(&want, m)
		}
		got := normalize(base)
		devs := make([]Device, len(ds))
		for i, d := range ds {
			devs[i] = Device{LinuxDevice: d}
		}
		if err := Apply(&got, WithDevices(devs...), WithMounts(ms...)); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("case %d: adding %v and %v\ngot  %s\nwant %s", i, ds, ms, mustJSON(t, got), mustJSON(t, want))
		}
	}
}

// TestWithDeviceReplacesUncleanPath: a spec's {"path": "/dev//nvidia1", 1:3} (/dev/null's
// numbers) must not survive beside the injected /dev/nvidia1: the container's node would be
// /dev/null while the log says GPU 1.
func TestWithDeviceReplacesUncleanPath(t *testing.T) {
	s := &specs.Spec{Linux: &specs.Linux{Devices: []specs.LinuxDevice{
		{Path: "/dev//nvidia1", Type: "c", Major: 1, Minor: 3},
		{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229},
	}}}
	if err := Apply(s, WithDevices(Device{LinuxDevice: specs.LinuxDevice{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}})); err != nil {
		t.Fatal(err)
	}
	want := []specs.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}, {Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}}
	if !reflect.DeepEqual(s.Linux.Devices, want) {
		t.Errorf("devices = %+v\nwant %+v", s.Linux.Devices, want)
	}
}

func TestBatchEditErrors(t *testing.T) {
	testCases := []struct {
		description string
		opt         SpecOpt
		want        string
	}{
		{"relative device path", WithDevices(Device{LinuxDevice: specs.LinuxDevice{Path: "/dev/ok", Type: "c"}}, Device{LinuxDevice: specs.LinuxDevice{Path: "dev/x", Type: "c"}}), `add device "dev/x": path must be absolute`},
		{"bad device type", WithDevices(Device{LinuxDevice: specs.LinuxDevice{Path: "/dev/x", Type: "p"}}), `add device /dev/x: type "p" is not c or b`},
		{"relative mount source", WithMounts(specs.Mount{Destination: "/a", Source: "a"}), `add mount a -> /a: source and destination must be absolute`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var s specs.Spec
			if err := Apply(&s, tc.opt); err == nil || err.Error() != tc.want {
				t.Fatalf("error = %v, want %s", err, tc.want)
			}
			// Nothing is half-applied: the batch is checked before the spec is touched.
			if !reflect.ValueOf(s).IsZero() {
				t.Errorf("spec changed: %+v", s)
			}
		})
	}
}

func TestHasHookNamed(t *testing.T) {
	const name = "nvidia-container-runtime-hook"
	testCases := []struct {
		description string
		hooks       *specs.Hooks
		want        bool
	}{
		{"no hooks", nil, false},
		{"by path, in any stage", &specs.Hooks{Poststop: []specs.Hook{{Path: "/usr/bin/" + name}}}, true},
		{"by argv[0]", &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/bin/sh", Args: []string{name}}}}, true},
		{"another hook", &specs.Hooks{Prestart: []specs.Hook{{Path: "/usr/bin/other", Args: []string{"other", name}}}}, false}, //nolint:staticcheck // the stage docker uses
	}
	for _, tc := range testCases {
		if got := HasHookNamed(&specs.Spec{Hooks: tc.hooks}, name); got != tc.want {
			t.Errorf("%s: got %v", tc.description, got)
		}
	}
}

func TestWithoutEnv(t *testing.T) {
	s := &specs.Spec{Process: &specs.Process{Env: []string{"PATH=/bin", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "CUDA_MPS_PIPE_DIRECTORY=/x", "CUDA_MPSX", "CUDA_VISIBLE_DEVICES=0", "FOO=1"}}}
	if err := Apply(s, WithoutEnv("CUDA_MPS_*", "FOO"), WithEnv("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps")); err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/bin", "CUDA_MPSX", "CUDA_VISIBLE_DEVICES=0", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"}
	if !reflect.DeepEqual(s.Process.Env, want) {
		t.Errorf("env = %q, want %q", s.Process.Env, want)
	}
	if err := Apply(&specs.Spec{}, WithoutEnv("X")); err != nil {
		t.Errorf("no process: %v", err)
	}
}

// TestWithHook: an identical hook is added once (a second create pass, two CDI devices of one
// spec with the same hook); different hooks of one program, in one stage, all stay (a CDI
// spec's hook per device), and the stage is the one asked for.
func TestWithHook(t *testing.T) {
	env := []string{"PATH=/usr/bin"}
	a := specs.Hook{Path: "/usr/bin/h", Args: []string{"h", "a"}, Env: env}
	b := specs.Hook{Path: "/usr/bin/h", Args: []string{"h", "b"}, Env: env}
	s := &specs.Spec{}
	if err := Apply(s, WithHook(StageCreateContainer, a), WithHook(StageCreateContainer, a), WithHook(StageCreateContainer, b), WithHook(StagePoststop, a)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Hooks.CreateContainer, []specs.Hook{a, b}) || !reflect.DeepEqual(s.Hooks.Poststop, []specs.Hook{a}) {
		t.Errorf("hooks = %+v", s.Hooks)
	}
}

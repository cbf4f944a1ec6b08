package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specsgo "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

func node(p string, major, minor int64) discover.DeviceNode {
	return discover.DeviceNode{Path: p, HostPath: "/devroot" + p, Type: "c", Major: major, Minor: minor, FileMode: 0o666}
}

// testHost: GPU 0 (minor 0) in MIG mode with two MIG devices, GPU 1 (minor 1) whole.
func testHost() plan.Host {
	nodes := map[string]discover.DeviceNode{}
	for _, n := range []discover.DeviceNode{node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1), node("/dev/nvidiactl", 195, 255),
		node("/dev/nvidia-uvm", 235, 0), node("/dev/nvidia-uvm-tools", 235, 1), node("/dev/nvidia-modeset", 195, 254)} {
		nodes[n.Path] = n
	}
	lib := func(c capabilities.Capability, prefix string) discover.File {
		p := "/usr/lib/x86_64-linux-gnu/" + prefix + ".so.550.54.15"
		return discover.File{Kind: discover.KindLibrary, Capability: c, Prefix: prefix, Bits: 64, HostPath: "/drv" + p, ContainerPath: p}
	}
	return plan.Host{
		Driver: discover.Driver{Version: "550.54.15", CUDAVersion: "12.4", GPUs: []discover.GPU{
			{Index: 0, Minor: 0, UUID: "GPU-aaaa", MIGCapable: true, MIGCurrent: true, MIGPending: true, MIGDevices: []discover.MIGDevice{
				{Index: 0, UUID: "MIG-0000", GI: 1, CI: 0, Profile: "3g.40gb", GICap: 12, CICap: 13},
				{Index: 1, UUID: "MIG-1111", GI: 5, CI: 0, Profile: "2g.20gb", GICap: 48, CICap: 49},
			}},
			{Index: 1, Minor: 1, UUID: "GPU-bbbb", MIGCapable: true},
		}},
		Files: []discover.File{
			lib(capabilities.Utility, "libnvidia-ml"), lib(capabilities.Compute, "libcuda"), lib(capabilities.Graphics, "libGLX_nvidia"),
			{Kind: discover.KindBinary, Capability: capabilities.Utility, HostPath: "/drv/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi"},
		},
		Devices:  discover.DeviceNodes{Root: "/devroot", Nodes: nodes, Invalid: map[string]error{}},
		MIGCaps:  discover.MIGCaps{Major: 237, Config: 1, Monitor: 2},
		ProcRoot: "/",
	}
}

// testRender writes hooks as gpu-ctk cdi generate does with a 30 s hook timeout.
var testRender = plan.Render{HookPath: "/usr/bin/gpu-hook", LDConfig: "/sbin/ldconfig", HookTimeout: 30, ProcRoot: "/"}

func deviceNames(s *specsgo.Spec) []string {
	var out []string
	for _, d := range s.Devices {
		out = append(out, d.Name)
	}
	return out
}

func TestGenerate(t *testing.T) {
	testCases := []struct {
		description string
		opts        GenerateOptions
		wantNames   []string
	}{
		{"both names (default): MIG devices, testRender, not their parent", GenerateOptions{}, []string{"0:0", "MIG-0000", "0:1", "MIG-1111", "1", "GPU-bbbb", "all"}},
		{"index", GenerateOptions{NameStrategy: NameIndex}, []string{"0:0", "0:1", "1", "all"}},
		{"uuid", GenerateOptions{NameStrategy: NameUUID}, []string{"MIG-0000", "MIG-1111", "GPU-bbbb", "all"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			spec, _, err := Generate(testHost(), testRender, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := deviceNames(spec); !reflect.DeepEqual(got, tc.wantNames) {
				t.Errorf("devices = %v, want %v", got, tc.wantNames)
			}
			// podman 4.3 (Debian 12) refuses anything above 0.5.0; names starting with a
			// digit and device nodes' hostPath need 0.5.0.
			if spec.Kind != DefaultKind || spec.Version != "0.5.0" {
				t.Errorf("kind %s version %s", spec.Kind, spec.Version)
			}
		})
	}
}

func TestGenerateEdits(t *testing.T) {
	spec, _, err := Generate(testHost(), testRender, GenerateOptions{NameStrategy: NameIndex, Capabilities: capabilities.Set{capabilities.Utility: true}})
	if err != nil {
		t.Fatal(err)
	}
	mode, zero := os.FileMode(0o666), uint32(0)
	capMode := os.FileMode(0o444)
	timeout := 30
	wantCommon := specsgo.ContainerEdits{
		DeviceNodes: []*specsgo.DeviceNode{{Path: "/dev/nvidiactl", HostPath: "/devroot/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: &mode, UID: &zero, GID: &zero}},
		Mounts: []*specsgo.Mount{
			{HostPath: "/drv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", ContainerPath: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}},
			{HostPath: "/drv/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}},
		},
		Hooks: []*specsgo.Hook{{HookName: "createContainer", Path: "/usr/bin/gpu-hook", Env: plan.HookEnv, Timeout: &timeout,
			Args: []string{"gpu-hook", "update-ldcache", "--ldconfig", "/sbin/ldconfig", "--driver-version", "550.54.15", "--timeout", "30",
				"--library", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"}}},
	}
	if !reflect.DeepEqual(spec.ContainerEdits, wantCommon) {
		t.Errorf("common edits =\n%s\nwant\n%s", mustMarshal(t, spec.ContainerEdits), mustMarshal(t, wantCommon))
	}
	capNode := func(m int64) *specsgo.DeviceNode {
		p := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m)
		return &specsgo.DeviceNode{Path: p, HostPath: "/devroot" + p, Type: "c", Major: 237, Minor: m, FileMode: &capMode, UID: &zero, GID: &zero}
	}
	gpu0 := &specsgo.DeviceNode{Path: "/dev/nvidia0", HostPath: "/devroot/dev/nvidia0", Type: "c", Major: 195, Minor: 0, FileMode: &mode, UID: &zero, GID: &zero}
	wantMIG1 := specsgo.ContainerEdits{DeviceNodes: []*specsgo.DeviceNode{gpu0, capNode(48), capNode(49)}}
	if !reflect.DeepEqual(spec.Devices[1].ContainerEdits, wantMIG1) {
		t.Errorf("0:1 edits =\n%s\nwant\n%s", mustMarshal(t, spec.Devices[1].ContainerEdits), mustMarshal(t, wantMIG1))
	}
	all := spec.Devices[len(spec.Devices)-1]
	if got := len(all.ContainerEdits.DeviceNodes); got != 6 { // nvidia0 once, four caps, nvidia1
		t.Errorf("all has %d nodes: %s", got, mustMarshal(t, all))
	}
	// Every capability (the default) carries the graphics library and the UVM nodes too.
	full, _, err := Generate(testHost(), testRender, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(full.ContainerEdits.Mounts) != 4 || len(full.ContainerEdits.DeviceNodes) != 4 {
		t.Errorf("every capability: %s", mustMarshal(t, full.ContainerEdits))
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	data, err := Marshal(&specsgo.Spec{Kind: "x/y", ContainerEdits: toEdits(v)}, "json")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func toEdits(v any) specsgo.ContainerEdits {
	switch e := v.(type) {
	case specsgo.ContainerEdits:
		return e
	case specsgo.Device:
		return e.ContainerEdits
	}
	return specsgo.ContainerEdits{}
}

func TestGenerateErrors(t *testing.T) {
	testCases := []struct {
		description string
		opts        GenerateOptions
		host        func(h *plan.Host)
		wantErr     string
	}{
		{"bad kind", GenerateOptions{Kind: "gpu"}, nil, `--kind "gpu": want vendor.com/class, such as nvidia.com/gpu`},
		{"bad strategy", GenerateOptions{NameStrategy: "serial"}, nil, `--device-name-strategy "serial": want index, uuid or both`},
		{"no control node", GenerateOptions{}, func(h *plan.Host) { delete(h.Devices.Nodes, "/dev/nvidiactl") },
			`missing device node: /dev/nvidiactl not found under device root "/devroot": check that the NVIDIA driver is loaded, or set driver.dev-root`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := testHost()
			if tc.host != nil {
				tc.host(&h)
			}
			_, _, err := Generate(h, testRender, tc.opts)
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("error = %v\nwant    %s", err, tc.wantErr)
			}
		})
	}
}

// TestRoundTripAndDiff: what Marshal writes (YAML or JSON) parses back to the spec; a spec
// compared with itself has no difference, and one made for another host says what changed.
func TestRoundTripAndDiff(t *testing.T) {
	spec, _, err := Generate(testHost(), testRender, GenerateOptions{NameStrategy: NameIndex, Capabilities: capabilities.Set{capabilities.Utility: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"yaml", "json"} {
		data, err := Marshal(spec, format)
		if err != nil {
			t.Fatal(err)
		}
		back, err := cdi.ParseSpec(data)
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, data)
		}
		if d := Diff(back, spec); len(d) != 0 {
			t.Errorf("%s round trip differs: %q", format, d)
		}
	}
	// The host changes: driver 560 replaces 550, MIG device 0:1 is destroyed.
	changed := testHost()
	changed.Driver.GPUs[0].MIGDevices = changed.Driver.GPUs[0].MIGDevices[:1]
	for i, f := range changed.Files {
		changed.Files[i].HostPath = strings.ReplaceAll(f.HostPath, "550.54.15", "560.35.03")
		changed.Files[i].ContainerPath = strings.ReplaceAll(f.ContainerPath, "550.54.15", "560.35.03")
	}
	changed.Driver.Version = "560.35.03"
	now, _, err := Generate(changed, testRender, GenerateOptions{NameStrategy: NameIndex, Capabilities: capabilities.Set{capabilities.Utility: true}})
	if err != nil {
		t.Fatal(err)
	}
	got := Diff(spec, now)
	want := []string{
		"common edits: createContainer hook /usr/bin/gpu-hook gpu-hook update-ldcache --ldconfig /sbin/ldconfig --driver-version 550.54.15 --timeout 30 --library /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15, mount /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15 from /drv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15 no longer on this host",
		"common edits: createContainer hook /usr/bin/gpu-hook gpu-hook update-ldcache --ldconfig /sbin/ldconfig --driver-version 560.35.03 --timeout 30 --library /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03, mount /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03 from /drv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03 new on this host",
		"device 0:1 no longer exists on this host",
		"device all: node /dev/nvidia-caps/nvidia-cap48 (c 237:48), node /dev/nvidia-caps/nvidia-cap49 (c 237:49) no longer on this host",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The other way round: a spec made before MIG device 0:1 was created lacks it.
	if got := Diff(now, spec); !slices.Contains(got, "device 0:1 is missing (it exists on this host)") {
		t.Errorf("reverse diff lacks the missing device:\n%s", strings.Join(got, "\n"))
	}
}

// writeSpecs puts a generated spec (and a broken one) in a spec directory.
func writeSpecs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	spec, _, err := Generate(testHost(), testRender, GenerateOptions{NameStrategy: NameIndex, Capabilities: capabilities.Set{capabilities.Utility: true}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := Marshal(spec, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("cdiVersion: 0.5.0\nkind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolve(t *testing.T) {
	dir := writeSpecs(t)
	r := NewResolver([]string{dir}, []string{"nvidia.com/gpu", "other.com/x"})
	if got, want := r.Devices(), []string{"nvidia.com/gpu=0:0", "nvidia.com/gpu=0:1", "nvidia.com/gpu=1", "nvidia.com/gpu=all"}; !reflect.DeepEqual(got, want) {
		t.Errorf("devices = %v", got)
	}
	d, err := r.Resolve([]string{"nvidia.com/gpu=0:1"}, map[string]string{"cdi.k8s.io/plugin": "nvidia.com/gpu=1,nvidia.com/gpu=0:1"}, specs.User{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, dev := range d {
		names = append(names, dev.Name)
	}
	if got := names; !reflect.DeepEqual(got, []string{"nvidia.com/gpu=0:1", "nvidia.com/gpu=1"}) {
		t.Errorf("names = %v (each once, in order)", got)
	}
	wantNodes := []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap48", "/dev/nvidia-caps/nvidia-cap49", "/dev/nvidiactl", "/dev/nvidia1"}
	if got := cdiNodes(d); !reflect.DeepEqual(got, wantNodes) {
		t.Errorf("device nodes = %v\nwant %v", got, wantNodes)
	}
	spec := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	if err := applyCDI(d, spec); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, n := range spec.Linux.Devices {
		paths = append(paths, n.Path)
	}
	if strings.Join(paths, ",") != "/dev/nvidiactl,/dev/nvidia0,/dev/nvidia-caps/nvidia-cap48,/dev/nvidia-caps/nvidia-cap49,/dev/nvidia1" {
		t.Errorf("applied nodes = %v", paths)
	}
	if len(spec.Mounts) != 2 || spec.Hooks == nil || len(spec.Hooks.CreateContainer) != 1 {
		t.Errorf("applied mounts %v hooks %+v", spec.Mounts, spec.Hooks)
	}

	_, err = r.Resolve([]string{"nvidia.com/gpu=7", "nvidia.com/gpu=1", "other.com/x=y"}, nil, specs.User{})
	want := `unresolvable CDI devices "nvidia.com/gpu=7", "other.com/x=y": the CDI specs in ` + dir +
		` offer nvidia.com/gpu=0:0, nvidia.com/gpu=0:1, nvidia.com/gpu=1, nvidia.com/gpu=all; generate a spec for this host with gpu-ctk cdi generate --output /etc/cdi/nvidia.yaml; specs that did not load: ` + dir + "/broken.yaml: "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, ErrUnresolvable) {
		t.Errorf("error =\n%v\nwant prefix\n%s", err, want)
	}
	empty := NewResolver([]string{t.TempDir(), "/nonexistent/cdi"}, []string{"nvidia.com/gpu"})
	if _, err := empty.Resolve([]string{"nvidia.com/gpu=0"}, nil, specs.User{}); err == nil || !strings.Contains(err.Error(), "offer no devices") {
		t.Errorf("no specs: %v", err)
	}
}

// TestResolveAnnotationErrors: an annotation whose value is not a list of CDI device names is
// refused naming its key and the first bad name, each quoted cut: a megabyte annotation
// (key or value) makes a message of a few hundred bytes, not megabytes.
func TestResolveAnnotationErrors(t *testing.T) {
	r := NewResolver([]string{writeSpecs(t)}, []string{"nvidia.com/gpu"})
	long := strings.Repeat("x", 1<<20)
	cut := func(s string) string { return strconv.Quote(s[:256]) + fmt.Sprintf("… (%d bytes)", len(s)) }
	for _, tc := range []struct {
		description string
		annotations map[string]string
		wantErr     string
	}{
		{description: "a name that is not qualified", annotations: map[string]string{"cdi.k8s.io/b": "nvidia.com/gpu=1", "cdi.k8s.io/a": "nvidia.com/gpu=0,gpu1"},
			wantErr: `CDI annotation "cdi.k8s.io/a": "gpu1" is not a CDI device name (vendor.com/class=name)`},
		{description: "an empty value", annotations: map[string]string{"cdi.k8s.io/a": ""},
			wantErr: `CDI annotation "cdi.k8s.io/a": "" is not a CDI device name (vendor.com/class=name)`},
		{description: "a megabyte value", annotations: map[string]string{"cdi.k8s.io/a": long},
			wantErr: `CDI annotation "cdi.k8s.io/a": ` + cut(long) + ` is not a CDI device name (vendor.com/class=name)`},
		{description: "a megabyte key", annotations: map[string]string{"cdi.k8s.io/" + long: "nvidia.com/gpu=" + long + "!"},
			wantErr: `CDI annotation ` + cut("cdi.k8s.io/"+long) + `: ` + cut("nvidia.com/gpu="+long+"!") + ` is not a CDI device name (vendor.com/class=name)`},
	} {
		t.Run(tc.description, func(t *testing.T) {
			_, err := r.Resolve(nil, tc.annotations, specs.User{})
			if err == nil || len(err.Error()) > 2048 || err.Error() != tc.wantErr {
				t.Fatalf("error (%d bytes) = %.600s\nwant %.600s", len(fmt.Sprint(err)), err, tc.wantErr)
			}
		})
	}
}

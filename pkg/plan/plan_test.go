package plan

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

func node(path string, major, minor int64) discover.DeviceNode {
	return discover.DeviceNode{Path: path, HostPath: "/devroot" + path, Type: "c", Major: major, Minor: minor, FileMode: 0o666}
}

func lib(c capabilities.Capability, prefix string, bits int) discover.File {
	dir := "/usr/lib/x86_64-linux-gnu"
	if bits == 32 {
		dir = "/usr/lib/i386-linux-gnu"
	}
	p := dir + "/" + prefix + ".so.550.54.15"
	return discover.File{Kind: discover.KindLibrary, Capability: c, Prefix: prefix, Bits: bits, HostPath: "/drv" + p, ContainerPath: p}
}

func testHost() Host {
	nodes := map[string]discover.DeviceNode{}
	for _, n := range []discover.DeviceNode{
		node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1), node("/dev/nvidia2", 195, 2),
		node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-modeset", 195, 254),
		node("/dev/nvidia-uvm", 235, 0), node("/dev/nvidia-uvm-tools", 235, 1),
	} {
		nodes[n.Path] = n
	}
	return Host{
		Driver: discover.Driver{Version: "550.54.15", CUDAVersion: "12.4", GPUs: []discover.GPU{
			{Index: 0, Minor: 0, UUID: "GPU-aaaa"}, {Index: 1, Minor: 2, UUID: "GPU-bbbb"},
		}},
		Devices: discover.DeviceNodes{Root: "/devroot", Nodes: nodes, Invalid: map[string]error{}},
		Files: []discover.File{
			lib(capabilities.Utility, "libnvidia-ml", 64),
			lib(capabilities.Compute, "libcuda", 64),
			lib(capabilities.Compute, "libcuda", 32),
			lib(capabilities.Graphics, "libGLX_nvidia", 64),
			{Kind: discover.KindBinary, Capability: capabilities.Utility, HostPath: "/drv/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi"},
			{Kind: discover.KindFirmware, HostPath: "/drv/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", ContainerPath: "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"},
		},
	}
}

// testRender writes hooks as a create with the default configuration does.
var testRender = Render{HookPath: "/opt/bin/gpu-hook", LDConfig: "/sbin/ldconfig"}

func req(t *testing.T, env ...string) request.Request {
	t.Helper()
	caps := &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}} // every request accepted
	r, _, err := request.FromSpec(&specs.Spec{Process: &specs.Process{Env: env, Capabilities: caps}}, request.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func paths[T any](items []T, get func(T) string) []string {
	var out []string
	for _, it := range items {
		out = append(out, get(it))
	}
	return out
}

func TestBuild(t *testing.T) {
	testCases := []struct {
		description string
		env         []string
		wantNodes   []string
		wantMounts  []string
		wantGPUs    []string
		wantHook    bool
	}{
		{description: "not a GPU container: only the docker hook removal", env: nil},
		{description: "all GPUs, default capabilities", env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			wantNodes:  []string{"/dev/nvidia0", "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"},
			wantMounts: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "/usr/bin/nvidia-smi", "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"},
			wantGPUs:   []string{"GPU-aaaa", "GPU-bbbb"}, wantHook: true},
		{description: "second GPU by index uses its minor", env: []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=utility"},
			wantNodes:  []string{"/dev/nvidia2", "/dev/nvidiactl"},
			wantMounts: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "/usr/bin/nvidia-smi", "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"},
			wantGPUs:   []string{"GPU-bbbb"}, wantHook: true},
		{description: "UUID, case-insensitive, and order kept", env: []string{"NVIDIA_VISIBLE_DEVICES=gpu-BBBB,0", "NVIDIA_DRIVER_CAPABILITIES=compute"},
			wantNodes:  []string{"/dev/nvidia2", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"},
			wantMounts: []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"},
			wantGPUs:   []string{"GPU-bbbb", "GPU-aaaa"}, wantHook: true},
		{description: "none: control nodes and files, no GPU node", env: []string{"NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=utility"},
			wantNodes:  []string{"/dev/nvidiactl"},
			wantMounts: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "/usr/bin/nvidia-smi", "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"},
			wantHook:   true},
		{description: "compat32 adds 32-bit libraries, graphics adds modeset", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,compat32,graphics"},
			wantNodes: []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"},
			wantMounts: []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "/usr/lib/i386-linux-gnu/libcuda.so.550.54.15",
				"/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.550.54.15", "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"},
			wantGPUs: []string{"GPU-aaaa"}, wantHook: true},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p, err := Build(req(t, tc.env...), testHost(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := paths(p.Edits.DeviceNodes, func(n edits.DeviceNode) string { return n.Path }); !reflect.DeepEqual(got, tc.wantNodes) {
				t.Errorf("nodes = %v, want %v", got, tc.wantNodes)
			}
			if got := paths(p.Edits.Mounts, func(m edits.Mount) string { return m.ContainerPath }); !reflect.DeepEqual(got, tc.wantMounts) {
				t.Errorf("mounts = %v, want %v", got, tc.wantMounts)
			}
			if got := paths(p.Devices, func(d Device) string { return d.UUID }); !reflect.DeepEqual(got, tc.wantGPUs) {
				t.Errorf("gpus = %v, want %v", got, tc.wantGPUs)
			}
			if !reflect.DeepEqual(p.Edits.RemoveHooks, []string{request.DockerHookName}) {
				t.Errorf("RemoveHooks = %v", p.Edits.RemoveHooks)
			}
			if len(p.Edits.Hooks) != 0 {
				t.Errorf("hooks in the plan's edits = %+v: hooks are rendered from intents", p.Edits.Hooks)
			}
			rendered := p.Rendered(testRender).Hooks
			if (len(rendered) == 1) != tc.wantHook {
				t.Fatalf("rendered hooks = %+v, want hook %v", rendered, tc.wantHook)
			}
			if tc.wantHook {
				h := rendered[0]
				if h.Stage != "createContainer" || h.Path != "/opt/bin/gpu-hook" || len(h.Env) == 0 || h.Args[1] != "update-ldcache" {
					t.Errorf("hook = %+v", h)
				}
				for _, m := range p.Edits.Mounts {
					if strings.Contains(m.ContainerPath, ".so.") && !strings.Contains(strings.Join(h.Args, " "), "--library "+m.ContainerPath) {
						t.Errorf("hook does not list library %s: %v", m.ContainerPath, h.Args)
					}
					if strings.Contains(m.ContainerPath, ".so.") && !slices.Contains(p.LoaderCache.Libraries, Library{Path: m.ContainerPath, Source: m.HostPath}) {
						t.Errorf("the loader-cache intent lacks %s from %s: %+v", m.ContainerPath, m.HostPath, p.LoaderCache)
					}
				}
				p.LoaderCache.Done = true
				if hooks := p.Rendered(testRender).Hooks; len(hooks) != 0 {
					t.Errorf("an update done at create is still rendered: %+v", hooks)
				}
			}
			for _, m := range p.Edits.Mounts {
				if !reflect.DeepEqual(m.Options[:4], []string{"ro", "nosuid", "nodev", "bind"}) || !strings.HasPrefix(m.HostPath, "/drv/") {
					t.Errorf("mount %+v: want read-only bind from the driver root", m)
				}
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	noUVM := testHost()
	delete(noUVM.Devices.Nodes, "/dev/nvidia-uvm")
	noCtl := testHost()
	delete(noCtl.Devices.Nodes, "/dev/nvidiactl")
	delete(noCtl.Devices.Nodes, "/dev/nvidia2")
	badNode := testHost()
	delete(badNode.Devices.Nodes, "/dev/nvidia0")
	badNode.Devices.Invalid["/dev/nvidia0"] = errors.New("bad device node: /devroot/dev/nvidia0 is a symlink, not a device node")
	noCuda := testHost()
	noCuda.Files = noCuda.Files[:1]
	only32 := testHost()
	only32.Files = append(only32.Files[:1:1], lib(capabilities.Compute, "libcuda", 32))

	testCases := []struct {
		description string
		host        Host
		env         []string
		wantErr     string
		is          error
	}{
		{description: "unknown index lists the GPUs", host: testHost(), env: []string{"NVIDIA_VISIBLE_DEVICES=0,7"},
			wantErr: `unknown device "7" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb)`, is: ErrUnknownDevice},
		{description: "unknown UUID and index together", host: testHost(), env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-zzzz,9"},
			wantErr: `unknown device "GPU-zzzz", "9" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb)`, is: ErrUnknownDevice},
		{description: "100,000 unknown tokens: the first five and the count", host: testHost(), env: []string{"NVIDIA_VISIBLE_DEVICES=" + manyTokens(100000)},
			wantErr: `unknown device "t0", "t1", "t2", "t3", "t4" and 99995 more in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb)`, is: ErrUnknownDevice},
		{description: "negative and padded indices are not indices", host: testHost(), env: []string{"NVIDIA_VISIBLE_DEVICES=-1,01"},
			wantErr: `unknown device "-1", "01" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb)`, is: ErrUnknownDevice},
		{description: "index and UUID of the same GPU", host: testHost(), env: []string{"NVIDIA_VISIBLE_DEVICES=1,GPU-bbbb"},
			wantErr: `invalid GPU request: "1" and "GPU-bbbb" in NVIDIA_VISIBLE_DEVICES both name GPU 1`, is: request.ErrInvalid},
		{description: "a MIG device on a host without MIG", host: testHost(), env: []string{"NVIDIA_VISIBLE_DEVICES=0:1"},
			wantErr: `unknown device: MIG device "0:1" in NVIDIA_VISIBLE_DEVICES: this host has no MIG devices`, is: ErrUnknownDevice},
		{description: "no GPUs on host", host: Host{Devices: discover.DeviceNodes{Root: "/d"}}, env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"},
			wantErr: "unknown device \"0\" in NVIDIA_VISIBLE_DEVICES: this host has no GPUs\nmissing device node: /dev/nvidiactl not found under device root \"/d\": check that the NVIDIA driver is loaded, or set driver.dev-root\nmissing driver library: libnvidia-ml.so. (capability utility) not found under driver root: check driver.root and that the driver's user-space libraries are installed", is: ErrUnknownDevice},
		{description: "every missing node reported at once", host: noCtl, env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"},
			wantErr: "missing device node: /dev/nvidia2 not found under device root \"/devroot\": check that the NVIDIA driver is loaded, or set driver.dev-root\nmissing device node: /dev/nvidiactl not found under device root \"/devroot\": check that the NVIDIA driver is loaded, or set driver.dev-root", is: ErrMissingNode},
		{description: "node that is not a device", host: badNode, env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"},
			wantErr: "missing device node: bad device node: /devroot/dev/nvidia0 is a symlink, not a device node", is: ErrMissingNode},
		{description: "compute without libcuda", host: noCuda, env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			wantErr: "missing driver library: libcuda.so.550.54.15 (capability compute) not found under driver root: check driver.root and that the driver's user-space libraries are installed", is: ErrMissingLibrary},
		{description: "compute with only the 32-bit libcuda", host: only32, env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,compat32"},
			wantErr: "missing driver library: libcuda.so.550.54.15 (capability compute) not found under driver root: check driver.root and that the driver's user-space libraries are installed", is: ErrMissingLibrary},
	}
	// What docker run --gpus writes: the request names the flag.
	dockerReq := func(t *testing.T, devices string) request.Request {
		r := req(t, "NVIDIA_VISIBLE_DEVICES="+devices)
		r.DockerGPUs = true
		return r
	}
	for _, tc := range []struct{ devices, want string }{
		{"0,1,2", "unknown device: docker run --gpus 3 asked for 3 GPUs, and this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb); use --gpus 2 or fewer, --gpus all, or --gpus device=<index or UUID>"},
		{"7", `unknown device "7" in docker run --gpus device=7: this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb)`},
		{"1,2", `unknown device "2" in docker run --gpus device=1,2: this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb)`},
	} {
		_, err := Build(dockerReq(t, tc.devices), testHost(), nil)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrUnknownDevice) {
			t.Errorf("docker --gpus, NVIDIA_VISIBLE_DEVICES=%s: error\n%v\nwant\n%s", tc.devices, err, tc.want)
		}
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := Build(req(t, tc.env...), tc.host, nil)
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error =\n%v\nwant\n%s", err, tc.wantErr)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error is not %v", tc.is)
			}
		})
	}
}

func TestBuildWarnsOnMissingOptionalNodes(t *testing.T) {
	h := testHost()
	delete(h.Devices.Nodes, "/dev/nvidia-uvm")
	delete(h.Devices.Nodes, "/dev/nvidia-modeset")
	p, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,graphics"), h, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`device node /dev/nvidia-uvm not found under device root "/devroot", not injected (CUDA needs it: load the nvidia-uvm module (nvidia-modprobe -u -c=0))`,
		`device node /dev/nvidia-modeset not found under device root "/devroot", not injected (load the nvidia-modeset module)`,
	}
	if !reflect.DeepEqual(p.Warnings, want) {
		t.Errorf("warnings = %q", p.Warnings)
	}
}

func TestIMEXAndMIGPlanning(t *testing.T) {
	h := testHost()
	h.Devices.Nodes["/dev/nvidia-caps-imex-channels/channel0"] = node("/dev/nvidia-caps-imex-channels/channel0", 511, 0)
	h.Devices.Nodes["/dev/nvidia-caps-imex-channels/channel5"] = node("/dev/nvidia-caps-imex-channels/channel5", 511, 5)
	testCases := []struct {
		description string
		env         []string
		wantNodes   []string
		wantErr     string
	}{
		{description: "named channel", env: []string{"NVIDIA_IMEX_CHANNELS=5"},
			wantNodes: []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps-imex-channels/channel5"}},
		{description: "all channels the host has", env: []string{"NVIDIA_IMEX_CHANNELS=all"},
			wantNodes: []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel5"}},
		{description: "missing channel", env: []string{"NVIDIA_IMEX_CHANNELS=7"},
			wantErr: `missing device node: /dev/nvidia-caps-imex-channels/channel7 not found under device root "/devroot": check that the NVIDIA driver is loaded, or set driver.dev-root`},
		{description: "MIG config on a host whose driver lists no MIG capabilities", env: []string{"NVIDIA_MIG_CONFIG_DEVICES=all"},
			wantErr: `NVIDIA_MIG_CONFIG_DEVICES=all: missing device node: the driver lists no /proc/driver/nvidia/capabilities/mig/config under proc root "": check driver.proc-root, and that the MIG instances exist (nvidia-smi -L)`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p, err := Build(req(t, append([]string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"}, tc.env...)...), h, nil)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := paths(p.Edits.DeviceNodes, func(n edits.DeviceNode) string { return n.Path }); !reflect.DeepEqual(got, tc.wantNodes) {
				t.Errorf("nodes = %v, want %v", got, tc.wantNodes)
			}
		})
	}
}

// TestRequirements: requirements are checked at planning, against the host's driver and every
// selected device (no hook process), in the words users search for; a malformed one is an
// error naming it, an unknown key a warning; NVIDIA_DISABLE_REQUIRE skips them.
func TestRequirements(t *testing.T) {
	h := testHost()
	h.Driver.GPUs[0].ComputeCapability, h.Driver.GPUs[0].Brand = "8.0", "tesla"
	h.Driver.GPUs[1].ComputeCapability, h.Driver.GPUs[1].Brand = "9.0", "nvidia"
	testCases := []struct {
		description string
		env         []string
		wantErr     string
		wantWarning string
	}{
		{description: "satisfied by the selected GPU", env: []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_ARCH=arch>=9.0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"}},
		{description: "unsatisfied by another selected GPU", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_ARCH=arch>=9.0"},
			wantErr: "unsatisfied condition: arch>=9.0 (host: cuda 12.4, driver 550.54.15; GPU 0: arch 8.0, brand tesla; GPU 1: arch 9.0, brand nvidia)"},
		{description: "the driver too old", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"},
			wantErr: "unsatisfied condition: cuda>=12.8, please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)"},
		{description: "legacy image: CUDA_VERSION is the requirement", env: []string{"CUDA_VERSION=12.6"},
			wantErr: "unsatisfied condition: cuda>=12.6, please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)"},
		{description: "disabled", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=99", "NVIDIA_DISABLE_REQUIRE=1"}},
		{description: "malformed", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>>12"},
			wantErr: `malformed requirement NVIDIA_REQUIRE_CUDA="cuda>>12": factor "cuda>>12": unknown operator ">>"`},
		{description: "unknown key: a warning", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_FOO=foo>=1"},
			wantWarning: `NVIDIA_REQUIRE_FOO="foo>=1": unknown key "foo"`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p, err := Build(req(t, tc.env...), h, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantWarning != "" && !slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.HasPrefix(w, tc.wantWarning) }) {
				t.Errorf("warnings = %q, want one starting %q", p.Warnings, tc.wantWarning)
			}
			for _, hk := range p.Rendered(testRender).Hooks {
				if hk.Stage == "prestart" {
					t.Errorf("a requirement hook: %+v", hk)
				}
			}
		})
	}
}

func manyTokens(n int) string {
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = "t" + strconv.Itoa(i)
	}
	return strings.Join(tokens, ",")
}

// TestCDIDevices: a CDI device is a device of the plan: the GPUs its nodes are join the plan's
// devices (their requirements and health checked as native ones'), its edits join ours (ours
// win at a shared path), and the loader-cache update of a spec gpu-ctk wrote becomes the
// plan's (its hook dropped, its libraries in LoaderCache); another program's hooks stay.
func TestCDIDevices(t *testing.T) {
	h := testHost()
	ldcache := edits.Hook{Stage: "createContainer", Path: "/usr/bin/gpu-hook", Args: []string{"gpu-hook", "update-ldcache", "--library", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"}, Env: HookEnv}
	theirs := edits.Hook{Stage: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}, Env: HookEnv}
	gpu1 := CDIDevice{Name: "nvidia.com/gpu=1", Nodes: []string{"/dev/nvidia2", "/dev/nvidiactl"}, Edits: edits.Edits{
		DeviceNodes: []edits.DeviceNode{{Path: "/dev/nvidia2", Type: "c", Major: 195, Minor: 2}, {Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, Why: "CDI"}},
		Mounts: []edits.Mount{{HostPath: "/drv/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", IDMapped: true},
			{HostPath: "/drv/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi"}},
		Hooks: []edits.Hook{ldcache},
	}}
	other := CDIDevice{Name: "example.com/x=y", Edits: edits.Edits{Env: []string{"X=1"}, Hooks: []edits.Hook{theirs},
		Mounts: []edits.Mount{{HostPath: "/opt/libx.so.1", ContainerPath: "/opt/libx.so.1"}}}}

	p, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"), h, []CDIDevice{gpu1, other})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(p.Devices, func(d Device) string { return d.UUID }); !reflect.DeepEqual(got, []string{"GPU-aaaa", "GPU-bbbb"}) {
		t.Errorf("devices = %v, want the native GPU 0 then CDI's GPU 1", got)
	}
	if i := slices.IndexFunc(p.Edits.DeviceNodes, func(n edits.DeviceNode) bool { return n.Path == "/dev/nvidiactl" }); i < 0 || p.Edits.DeviceNodes[i].Why != "control node: every GPU container" {
		t.Errorf("/dev/nvidiactl is not ours: %+v", p.Edits.DeviceNodes)
	}
	if !reflect.DeepEqual(p.Edits.Hooks, []edits.Hook{theirs}) {
		t.Errorf("hooks = %+v, want only the other program's", p.Edits.Hooks)
	}
	want := []Library{{Path: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", Source: "/drv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"},
		{Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", Source: "/drv/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"}}
	if !reflect.DeepEqual(p.LoaderCache.Libraries, want) {
		t.Errorf("loader cache = %+v\nwant %+v (the other spec's /opt/libx.so.1 is its own program's business)", p.LoaderCache.Libraries, want)
	}
	if !slices.Contains(p.Edits.Env, "X=1") {
		t.Errorf("env = %q", p.Edits.Env)
	}

	// Without a discovered host (a CDI-only create whose discovery failed) the plan does not
	// know the driver's version: the spec's own hook stays, and the plan has no update to do.
	p, err = Build(req(t, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"), Host{}, []CDIDevice{gpu1})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Edits.Hooks, []edits.Hook{ldcache}) || len(p.LoaderCache.Libraries) != 0 {
		t.Errorf("without a host: hooks = %+v, loader cache = %+v; want the spec's hook, no update", p.Edits.Hooks, p.LoaderCache.Libraries)
	}

	// Requirements cover the CDI device's GPU; health too.
	h.Driver.GPUs[1].ComputeCapability = "7.0"
	cdiOnly := "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"
	if _, err := Build(req(t, cdiOnly, "NVIDIA_REQUIRE_ARCH=arch>=8.0"), h, []CDIDevice{gpu1}); err == nil || !strings.HasPrefix(err.Error(), "unsatisfied condition: arch>=8.0") {
		t.Errorf("a CDI device's GPU below the requirement: %v", err)
	}
	h.Driver.GPUs[1].Health = &discover.Health{Signal: discover.HealthRecorded, Reason: "Xid 79"}
	if _, err := Build(req(t, cdiOnly), h, []CDIDevice{gpu1}); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("an unhealthy CDI device's GPU: %v", err)
	}
}

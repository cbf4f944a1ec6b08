package plan

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// migHost is testHost with GPU 0 (minor 0) in MIG mode holding three MIG devices and GPU 1
// (minor 2) whole; the driver's caps use device nodes of major 237.
func migHost() Host {
	h := testHost()
	h.Driver.GPUs[0].ComputeCapability, h.Driver.GPUs[0].Brand = "8.0", "tesla"
	h.Driver.GPUs[1].ComputeCapability, h.Driver.GPUs[1].Brand = "9.0", "nvidia"
	h.Driver.GPUs[0].MIGCapable, h.Driver.GPUs[0].MIGCurrent, h.Driver.GPUs[0].MIGPending = true, true, true
	h.Driver.GPUs[0].MIGDevices = []discover.MIGDevice{
		{Index: 0, UUID: "MIG-0000", GI: 1, CI: 0, Profile: "3g.40gb", GICap: 12, CICap: 13},
		{Index: 1, UUID: "MIG-1111", GI: 5, CI: 0, Profile: "2g.20gb", GICap: 48, CICap: 49},
		{Index: 2, UUID: "MIG-2222", GI: 13, CI: 0, Profile: "1g.10gb", GICap: 120, CICap: 121},
	}
	h.Driver.GPUs[1].MIGCapable = true
	h.MIGCaps = discover.MIGCaps{Major: 237, Config: 1, Monitor: 2}
	for _, m := range []int64{1, 12, 13, 48, 49} { // the host has nodes for some caps only
		p := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m)
		h.Devices.Nodes[p] = discover.DeviceNode{Path: p, HostPath: "/devroot" + p, Type: "c", Major: 237, Minor: m, FileMode: 0o444}
	}
	return h
}

// nodeList writes device nodes as "path type major:minor mode".
func nodeList(nodes []edits.DeviceNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, fmt.Sprintf("%s %s %d:%d %o", n.Path, n.Type, n.Major, n.Minor, n.FileMode))
	}
	return out
}

func TestBuildMIG(t *testing.T) {
	gpu0, gpu1 := "/dev/nvidia0 c 195:0 666", "/dev/nvidia2 c 195:2 666"
	cap := func(m int) string { return fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d c 237:%d 444", m, m) }
	ctl := []string{"/dev/nvidiactl c 195:255 666"} // utility only: no UVM nodes
	privileged := []string{"NVIDIA_DRIVER_CAPABILITIES=utility"}
	testCases := []struct {
		description string
		env         []string
		host        func(h *Host)
		wantDevices []string
		wantNodes   []string
		wantCaps    []string // ProcCaps
	}{
		{description: "G:I", env: []string{"NVIDIA_VISIBLE_DEVICES=0:1"},
			wantDevices: []string{"0:1"}, wantNodes: append([]string{gpu0, cap(48), cap(49)}, ctl...)},
		{description: "MIG UUID, any case", env: []string{"NVIDIA_VISIBLE_DEVICES=mig-1111"},
			wantDevices: []string{"0:1"}, wantNodes: append([]string{gpu0, cap(48), cap(49)}, ctl...)},
		{description: "legacy MIG-GPU-<uuid>/<gi>/<ci>", env: []string{"NVIDIA_VISIBLE_DEVICES=MIG-GPU-aaaa/13/0"},
			wantDevices: []string{"0:2"}, wantNodes: append([]string{gpu0, cap(120), cap(121)}, ctl...)},
		{description: "a MIG device and a whole GPU, in order; the parent node once", env: []string{"NVIDIA_VISIBLE_DEVICES=0:0,1,0:2"},
			wantDevices: []string{"0:0", "1", "0:2"}, wantNodes: append([]string{gpu0, cap(12), cap(13), gpu1, cap(120), cap(121)}, ctl...)},
		{description: "all: every MIG device and every GPU not in MIG mode", env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			wantDevices: []string{"0:0", "0:1", "0:2", "1"}, wantNodes: append([]string{gpu0, cap(12), cap(13), cap(48), cap(49), cap(120), cap(121), gpu1}, ctl...)},
		{description: "MIG manager: GPU 0 whole with config access to all its instances",
			env:         []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"},
			wantDevices: []string{"0"}, wantNodes: append([]string{gpu0, cap(1), cap(12), cap(13), cap(48), cap(49), cap(120), cap(121)}, ctl...)},
		{description: "MIG monitor: the monitor capability", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"},
			wantDevices: []string{"0"}, wantNodes: append([]string{gpu0, "/dev/nvidia-caps/nvidia-cap2 c 237:2 444", cap(12), cap(13), cap(48), cap(49), cap(120), cap(121)}, ctl...)},
		{description: "MIG manager with all: every GPU whole and every MIG device",
			env:         []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_CONFIG_DEVICES=all"},
			wantDevices: []string{"0", "0:0", "0:1", "0:2", "1"}, wantNodes: append([]string{gpu0, cap(12), cap(13), cap(48), cap(49), cap(120), cap(121), gpu1, cap(1)}, ctl...)},
		{description: "the /proc interface: capabilities for gpu-hook, no cap nodes", env: []string{"NVIDIA_VISIBLE_DEVICES=0:1"},
			host:        func(h *Host) { h.MIGCaps.Major = 0 },
			wantDevices: []string{"0:1"}, wantNodes: append([]string{gpu0}, ctl...), wantCaps: []string{"gpu0/mig/gi5/access", "gpu0/mig/gi5/ci0/access"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := migHost()
			if tc.host != nil {
				tc.host(&h)
			}
			p, err := Build(req(t, append(tc.env, privileged...)...), h, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := paths(p.Devices, func(d Device) string { return d.Index }); !reflect.DeepEqual(got, tc.wantDevices) {
				t.Errorf("devices = %v, want %v", got, tc.wantDevices)
			}
			if got := nodeList(p.Edits.DeviceNodes); !reflect.DeepEqual(got, tc.wantNodes) {
				t.Errorf("nodes =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.wantNodes, "\n"))
			}
			if !reflect.DeepEqual(p.Edits.ProcCaps, tc.wantCaps) {
				t.Errorf("proc caps = %v, want %v", p.Edits.ProcCaps, tc.wantCaps)
			}
			var procHook []string
			r := testRender
			r.ProcRoot = "/procroot"
			for _, hk := range p.Rendered(r).Hooks {
				if hk.Args[1] == "proc-caps" {
					procHook = hk.Args
				}
			}
			if tc.wantCaps != nil {
				want := []string{"gpu-hook", "proc-caps", "--proc-root", "/procroot"}
				for _, c := range tc.wantCaps {
					want = append(want, "--cap", c)
				}
				if !reflect.DeepEqual(procHook, want) {
					t.Errorf("proc-caps hook = %q\nwant %q", procHook, want)
				}
			} else if procHook != nil {
				t.Errorf("a proc-caps hook without /proc capabilities: %q", procHook)
			}
			// A cap node the host lacks is made from the driver's numbers, with the host path
			// it would have; one the host has is taken as stat'ed.
			for _, n := range p.Edits.DeviceNodes {
				if n.HostPath != "/devroot"+n.Path {
					t.Errorf("node %s host path %s", n.Path, n.HostPath)
				}
			}
		})
	}
}

// TestBuildMIGRequirements: a requirement on arch or brand is checked against a MIG device's
// parent, named by the device's index.
func TestBuildMIGRequirements(t *testing.T) {
	if _, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0:1,1", "NVIDIA_REQUIRE_ARCH=arch>=8.0"), migHost(), nil); err != nil {
		t.Fatal(err)
	}
	_, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0:1,1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"), migHost(), nil)
	if want := "unsatisfied condition: arch>=9.0 (host: cuda 12.4, driver 550.54.15; GPU 0:1: arch 8.0, brand tesla; GPU 1: arch 9.0, brand nvidia)"; err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

func TestBuildMIGErrors(t *testing.T) {
	list := "this host has MIG devices 0:0 (MIG-0000, 3g.40gb), 0:1 (MIG-1111, 2g.20gb), 0:2 (MIG-2222, 1g.10gb)"
	testCases := []struct {
		description string
		env         []string
		host        func(h *Host)
		wantErr     string
		is          error
	}{
		{description: "a GPU in MIG mode asked for whole", env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			wantErr: `GPU in MIG mode requested whole: "0" in NVIDIA_VISIBLE_DEVICES names GPU 0 (GPU-aaaa), which is in MIG mode: it cannot be given whole; ask for its MIG devices: 0:0 (MIG-0000, 3g.40gb), 0:1 (MIG-1111, 2g.20gb), 0:2 (MIG-2222, 1g.10gb) (a MIG manager also sets NVIDIA_MIG_CONFIG_DEVICES or NVIDIA_MIG_MONITOR_DEVICES)`,
			is:      ErrMIGEnabled},
		{description: "a GPU in MIG mode without MIG devices", env: []string{"NVIDIA_VISIBLE_DEVICES=0"}, host: func(h *Host) { h.Driver.GPUs[0].MIGDevices = nil }, is: ErrMIGEnabled,
			wantErr: `GPU in MIG mode requested whole: "0" in NVIDIA_VISIBLE_DEVICES names GPU 0 (GPU-aaaa), which is in MIG mode: it cannot be given whole; ask for its MIG devices: it has none yet (create them with nvidia-smi mig) (a MIG manager`},
		{description: "by UUID too", env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-aaaa"}, is: ErrMIGEnabled,
			wantErr: `GPU in MIG mode requested whole: "GPU-aaaa" in NVIDIA_VISIBLE_DEVICES names GPU 0 (GPU-aaaa), which is in MIG mode`},
		{description: "unknown MIG tokens list the MIG devices", env: []string{"NVIDIA_VISIBLE_DEVICES=0:7,MIG-nope,1:0,MIG-GPU-aaaa/1/9,00:1"}, is: ErrUnknownDevice,
			wantErr: `unknown device: MIG device "0:7", "MIG-nope", "1:0", "MIG-GPU-aaaa/1/9", "00:1" in NVIDIA_VISIBLE_DEVICES: ` + list},
		{description: "unknown whole GPU and MIG tokens together", env: []string{"NVIDIA_VISIBLE_DEVICES=5,0:9"}, is: ErrUnknownDevice,
			wantErr: "unknown device \"5\" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-aaaa, in MIG mode), 1 (GPU-bbbb)\nunknown device: MIG device \"0:9\" in NVIDIA_VISIBLE_DEVICES: " + list},
		{description: "one MIG device named twice", env: []string{"NVIDIA_VISIBLE_DEVICES=0:1,MIG-1111"}, is: request.ErrInvalid,
			wantErr: `invalid GPU request: "0:1" and "MIG-1111" in NVIDIA_VISIBLE_DEVICES both name MIG device 0:1`},
		{description: "no MIG devices at all", env: []string{"NVIDIA_VISIBLE_DEVICES=0:0"}, host: func(h *Host) { h.Driver.GPUs[0].MIGCurrent = false }, is: ErrUnknownDevice,
			wantErr: `unknown device: MIG device "0:0" in NVIDIA_VISIBLE_DEVICES: this host has no MIG devices`},
		{description: "MIG mode pending: not yet enabled", env: []string{"NVIDIA_VISIBLE_DEVICES=MIG-0000"}, host: func(h *Host) { h.Driver.GPUs[0].MIGPending = false }, is: ErrUnknownDevice,
			wantErr: `unknown device: MIG device "MIG-0000" in NVIDIA_VISIBLE_DEVICES: this host has no MIG devices`},
		{description: "a capability the driver does not list", env: []string{"NVIDIA_VISIBLE_DEVICES=0:2"}, host: func(h *Host) { h.Driver.GPUs[0].MIGDevices[2].CICap = 0 }, is: ErrMissingNode,
			wantErr: `MIG device 0:2 (MIG-2222, 1g.10gb): compute instance capability: missing device node: the driver lists no /proc/driver/nvidia/capabilities/gpu0/mig/gi13/ci0/access under proc root "": check driver.proc-root, and that the MIG instances exist (nvidia-smi -L)`},
		{description: "a stale capability node on the host", env: []string{"NVIDIA_VISIBLE_DEVICES=0:0"}, is: ErrMissingNode,
			host: func(h *Host) {
				h.Devices.Nodes["/dev/nvidia-caps/nvidia-cap12"] = discover.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap12", HostPath: "/devroot/dev/nvidia-caps/nvidia-cap12", Type: "c", Major: 508, Minor: 12}
			},
			wantErr: `MIG device 0:0 (MIG-0000, 3g.40gb): GPU instance capability: missing device node: /devroot/dev/nvidia-caps/nvidia-cap12 is c 508:12, but the driver says c 237:12: the node is stale; recreate it (nvidia-modprobe -f /proc/driver/nvidia/capabilities/gpu0/mig/gi1/access)`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := migHost()
			if tc.host != nil {
				tc.host(&h)
			}
			_, err := Build(req(t, tc.env...), h, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("error =\n%v\nwant prefix\n%s", err, tc.wantErr)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error does not wrap %v", tc.is)
			}
		})
	}
}

func TestDevices(t *testing.T) {
	got := paths(Devices(migHost().Driver.GPUs), func(d Device) string { return d.String() })
	want := []string{"0:0 (MIG-0000, 3g.40gb)", "0:1 (MIG-1111, 2g.20gb)", "0:2 (MIG-2222, 1g.10gb)", "1 (GPU-bbbb)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Devices = %q", got)
	}
}

// TestBuildMIGWholeEdits compares every edit of a MIG device's plan: nodes with numbers,
// modes and host paths, mounts with options, hooks with argv, env and timeout.
func TestBuildMIGWholeEdits(t *testing.T) {
	h := migHost()
	p, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0:1", "NVIDIA_DRIVER_CAPABILITIES=utility"), h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	want := edits.Edits{
		DeviceNodes: []edits.DeviceNode{
			{Path: "/dev/nvidia0", HostPath: "/devroot/dev/nvidia0", Type: "c", Major: 195, Minor: 0, FileMode: 0o666,
				Why: "MIG device 0:1 (MIG-1111, 2g.20gb): its GPU 0's node"},
			{Path: "/dev/nvidia-caps/nvidia-cap48", HostPath: "/devroot/dev/nvidia-caps/nvidia-cap48", Type: "c", Major: 237, Minor: 48, FileMode: 0o444,
				Why: "MIG device 0:1 (MIG-1111, 2g.20gb): GPU instance capability gpu0/mig/gi5/access"},
			{Path: "/dev/nvidia-caps/nvidia-cap49", HostPath: "/devroot/dev/nvidia-caps/nvidia-cap49", Type: "c", Major: 237, Minor: 49, FileMode: 0o444,
				Why: "MIG device 0:1 (MIG-1111, 2g.20gb): compute instance capability gpu0/mig/gi5/ci0/access"},
			{Path: "/dev/nvidiactl", HostPath: "/devroot/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: 0o666, Why: "control node: every GPU container"},
		},
		Mounts: []edits.Mount{
			{HostPath: "/drv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", ContainerPath: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", Options: ro,
				Why: "utility: library libnvidia-ml (64-bit)"},
			{HostPath: "/drv/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: ro, Why: "utility: binary nvidia-smi"},
			{HostPath: "/drv/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", ContainerPath: "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", Options: append(append([]string(nil), ro...), "noexec"),
				Why: "firmware: every GPU container (the GPU's GSP firmware)"},
		},
		Hooks: []edits.Hook{{Stage: "createContainer", Path: "/opt/bin/gpu-hook", Env: HookEnv, Timeout: 30,
			Args: []string{"gpu-hook", "update-ldcache", "--ldconfig", "/sbin/ldconfig", "--driver-version", "550.54.15", "--timeout", "30",
				"--library", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"},
			Why: "loader cache: SONAME links and /etc/ld.so.cache entries for the injected libraries (1); gpu-runtime makes them itself at create where it can (hook.ldcache-at-create)"}},
		RemoveHooks: []string{request.DockerHookName},
	}
	r := testRender
	r.HookTimeout = 30
	if got := p.Rendered(r); !reflect.DeepEqual(got, want) {
		t.Errorf("edits =\n%+v\nwant\n%+v", got, want)
	}
}

// TestMIGAccessWhy: a MIG manager's instance capabilities say which variables granted them.
func TestMIGAccessWhy(t *testing.T) {
	p, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all"), migHost(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "MIG access (NVIDIA_MIG_CONFIG_DEVICES=all, NVIDIA_MIG_MONITOR_DEVICES=all): 0 (GPU-aaaa)'s capability gpu0/mig/gi1/access"
	if !slices.ContainsFunc(p.Edits.DeviceNodes, func(n edits.DeviceNode) bool { return n.Why == want }) {
		t.Errorf("no node's why is %q: %q", want, paths(p.Edits.DeviceNodes, func(n edits.DeviceNode) string { return n.Why }))
	}
}

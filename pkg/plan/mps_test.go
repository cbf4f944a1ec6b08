package plan

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

func mpsHost() Host {
	h := testHost()
	h.MPS = MPS{
		Config: config.MPSConfig{Root: "/run/mps", Shares: map[string]config.MPSShare{
			"large": {Devices: []string{"0"}, ActiveThreadPercentage: 80},
			"small": {Devices: []string{"GPU-aaaa"}, ActiveThreadPercentage: 20, UID: 1000},
			"both":  {Devices: []string{"0", "1"}},
			"gone":  {Devices: []string{"7"}},
		}},
		Running: map[string]bool{"large": true, "small": true, "both": true, "gone": true},
	}
	return h
}

func mpsReq(t *testing.T, uid uint32, env ...string) request.Request {
	t.Helper()
	r := req(t, env...)
	r.MPSShare, r.UID = "", uid
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "NVIDIA_MPS_SHARE="); ok {
			r.MPSShare = v
			if r.Mode == request.NoGPU {
				r.Mode = request.AllGPUs
			}
		}
	}
	return r
}

// TestMPSPlan: a share's container gets the share's GPUs, its client view (read-only) and
// shared memory, none of its own CUDA_MPS_* settings, and none of the driver's MPS programs.
func TestMPSPlan(t *testing.T) {
	h := mpsHost()
	for _, name := range []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"} {
		h.Files = append(h.Files, discover.File{Kind: discover.KindBinary, Capability: capabilities.Compute, HostPath: "/drv/usr/bin/" + name, ContainerPath: "/usr/bin/" + name})
	}
	p, err := Build(mpsReq(t, 0, "NVIDIA_MPS_SHARE=large", "NVIDIA_VISIBLE_DEVICES=all"), h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Devices) != 1 || p.Devices[0].UUID != "GPU-aaaa" {
		t.Errorf("devices %v, want GPU 0 only", p.Devices)
	}
	wantMounts := []edits.Mount{
		{HostPath: "/run/mps/large/client", ContainerPath: "/tmp/nvidia-mps", Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"},
			Why: "MPS share large: its daemon's control socket, which clients connect to; not the daemon's privileged socket, lock, pid file or log pipe, and nothing the container can replace"},
		{HostPath: "/run/mps/large/shm", ContainerPath: "/dev/shm", Options: []string{"rw", "nosuid", "nodev", "bind"},
			Why: "MPS share large: the shared memory of its daemon's servers, none of another share's"},
	}
	if !reflect.DeepEqual(p.Edits.Mounts[:2], wantMounts) {
		t.Errorf("mounts %+v", p.Edits.Mounts[:2])
	}
	for _, m := range p.Edits.Mounts {
		if strings.Contains(m.ContainerPath, "nvidia-cuda-mps") {
			t.Errorf("%s mounted into a share's container", m.ContainerPath)
		}
	}
	if !reflect.DeepEqual(p.Edits.UnsetEnv, []string{"CUDA_MPS_*"}) || !reflect.DeepEqual(p.Edits.Env, []string{"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"}) {
		t.Errorf("env: unset %q, set %q", p.Edits.UnsetEnv, p.Edits.Env)
	}
	for _, d := range p.Edits.DeviceNodes {
		if d.Path == "/dev/nvidia2" {
			t.Error("GPU 1, outside the share, injected")
		}
	}
	// Without a share, a compute container keeps them.
	if p, err := Build(req(t, "NVIDIA_VISIBLE_DEVICES=0"), h, nil); err != nil || !slices.ContainsFunc(p.Edits.Mounts, func(m edits.Mount) bool { return m.ContainerPath == "/usr/bin/nvidia-cuda-mps-control" }) {
		t.Errorf("a container without a share lacks nvidia-cuda-mps-control: %v", err)
	}
	// A device list inside the share.
	if p, err := Build(mpsReq(t, 1000, "NVIDIA_MPS_SHARE=small", "NVIDIA_VISIBLE_DEVICES=GPU-aaaa"), mpsHost(), nil); err != nil || len(p.Devices) != 1 {
		t.Errorf("small with its GPU: %v, %v", p.Devices, err)
	}
}

func TestMPSPlanErrors(t *testing.T) {
	testCases := []struct {
		description string
		uid         uint32
		env         []string
		host        func(*Host)
		want        string
	}{
		{description: "unknown share", env: []string{"NVIDIA_MPS_SHARE=huge"},
			want: `unknown MPS share "huge" in NVIDIA_MPS_SHARE: the configured shares are both, gone, large, small`},
		{description: "no shares at all", env: []string{"NVIDIA_MPS_SHARE=huge"}, host: func(h *Host) { h.MPS.Config.Shares = nil },
			want: `unknown MPS share "huge" in NVIDIA_MPS_SHARE: no MPS shares are configured ([mps.shares.<name>] in the gpu-runtime config)`},
		{description: "daemon not running", env: []string{"NVIDIA_MPS_SHARE=large"}, host: func(h *Host) { h.MPS.Running["large"] = false },
			want: `MPS share "large" is not running: start it with gpu-ctk mps start large`},
		{description: "another user", uid: 1000, env: []string{"NVIDIA_MPS_SHARE=large"},
			want: `MPS share "large" serves uid 0, and the container runs as uid 1000: MPS servers are per user; run the container as uid 0, or give it a share whose uid is 1000`},
		{description: "a GPU outside the share", env: []string{"NVIDIA_MPS_SHARE=large", "NVIDIA_VISIBLE_DEVICES=1"},
			want: `GPU 1 (GPU-bbbb) in NVIDIA_VISIBLE_DEVICES is not in MPS share "large", which has GPU 0 (GPU-aaaa)`},
		{description: "a share whose GPU is gone", env: []string{"NVIDIA_MPS_SHARE=gone"},
			want: `MPS share "gone": device "7": unknown device (this host has GPUs 0 (GPU-aaaa), 1 (GPU-bbbb))`},
		{description: "a share on a GPU in MIG mode", env: []string{"NVIDIA_MPS_SHARE=both"},
			host: func(h *Host) { h.Driver.GPUs[1].MIGCurrent, h.Driver.GPUs[1].MIGPending = true, true },
			want: `MPS share "both": device 1 (GPU-bbbb) is in MIG mode: MPS on MIG is not supported`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := mpsHost()
			if tc.host != nil {
				tc.host(&h)
			}
			_, err := Build(mpsReq(t, tc.uid, tc.env...), h, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant %q", err, tc.want)
			}
			if !errors.Is(err, ErrMPS) && !errors.Is(err, ErrUnknownDevice) {
				t.Errorf("error wraps neither ErrMPS nor ErrUnknownDevice")
			}
		})
	}
}

// TestShareCDI: CDI devices on a share obey it as native ones do: the share's checks, its
// edits, only its GPUs; a CDI device that brings another GPU is refused, naming the device,
// the share and the fix.
func TestShareCDI(t *testing.T) {
	h := mpsHost()
	gpu0, gpu1 := wholeGPU(h.Driver.GPUs[0]), wholeGPU(h.Driver.GPUs[1])
	all := cdiDevices{Name: "nvidia.com/gpu=all", Devices: []Device{gpu0, gpu1}}
	first := cdiDevices{Name: "nvidia.com/gpu=0", Devices: []Device{gpu0}}
	second := cdiDevices{Name: "nvidia.com/gpu=1", Devices: []Device{gpu1}}
	imex := cdiDevices{Name: "nvidia.com/imex-channel=0"}
	testCases := []struct {
		description string
		share       string
		uid         uint32
		cdi         []cdiDevices
		host        func(*Host)
		shareEdits  bool
		wantEdits   bool
		want        string
	}{
		{description: "the share's GPU", share: "large", cdi: []cdiDevices{first}, shareEdits: true, wantEdits: true},
		{description: "beside native devices, whose plan has the share's edits", share: "large", cdi: []cdiDevices{first}},
		{description: "all the share's GPUs", share: "both", cdi: []cdiDevices{all}, shareEdits: true, wantEdits: true},
		{description: "no GPU: no share", share: "gone", cdi: []cdiDevices{imex}, shareEdits: true},
		{description: "every GPU of the host", share: "large", cdi: []cdiDevices{all, imex}, shareEdits: true,
			want: `CDI device "nvidia.com/gpu=all" gives GPU 1 (GPU-bbbb), not in MPS share "large", which has GPU 0 (GPU-aaaa): a CDI device comes whole; ask only for the share's GPUs (their CDI devices, or NVIDIA_VISIBLE_DEVICES=0)`},
		{description: "a share forced by mps.share", share: "large", cdi: []cdiDevices{first, second}, shareEdits: true,
			host: func(h *Host) { h.MPS.Config.Share = "large" },
			want: `CDI device "nvidia.com/gpu=1" gives GPU 1 (GPU-bbbb), not in MPS share "large" (mps.share: every GPU container of this runtime joins it), which has GPU 0 (GPU-aaaa): a CDI device comes whole; ask only for the share's GPUs (their CDI devices, or NVIDIA_VISIBLE_DEVICES=0)`},
		{description: "a share not running", share: "large", cdi: []cdiDevices{first}, host: func(h *Host) { h.MPS.Running["large"] = false },
			want: `MPS share "large" is not running: start it with gpu-ctk mps start large`},
		{description: "another user", share: "large", uid: 1000, cdi: []cdiDevices{first},
			want: `MPS share "large" serves uid 0, and the container runs as uid 1000: MPS servers are per user; run the container as uid 0, or give it a share whose uid is 1000`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := mpsHost()
			if tc.host != nil {
				tc.host(&h)
			}
			var p Plan
			err := p.shareCDI(request.Request{MPSShare: tc.share, UID: tc.uid}, h, tc.cdi, tc.shareEdits)
			if tc.want != "" {
				if err == nil || err.Error() != tc.want || !errors.Is(err, ErrMPS) {
					t.Errorf("error %v\nwant %s", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := edits.Edits{}
			if tc.wantEdits {
				want = mpsEdits(tc.share, h.MPS.Config)
			}
			if !reflect.DeepEqual(p.Edits, want) {
				t.Errorf("edits %+v\nwant %+v", p.Edits, want)
			}
		})
	}
}

// TestMemoryLimitHooksReadHostProc: the memory-limit hooks read the container's process in the
// host's /proc, where runc runs them, never under driver.proc-root (a fake host's /proc
// files have no processes: the cluster's shared claims failed to start so).
func TestMemoryLimitHooksReadHostProc(t *testing.T) {
	r := Render{HookPath: "/usr/bin/gpu-hook", ProcRoot: "/fake/procroot", CTKPath: "/usr/bin/gpu-ctk", DriverRoot: "/"}
	hooks := r.MemoryLimitHooks(edits.MemoryLimit{UUID: "GPU-1", Bytes: 1 << 30})
	if len(hooks) != 2 {
		t.Fatalf("%d hooks, want 2", len(hooks))
	}
	for _, h := range hooks {
		if slices.Contains(h.Args, "--proc-root") {
			t.Errorf("%s hook %v: reads the container's process under driver.proc-root", h.Stage, h.Args)
		}
	}
}

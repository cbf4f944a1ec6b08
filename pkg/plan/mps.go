package plan

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// ErrMPS marks a request for an MPS share that cannot be honoured. Its errors read as their
// message alone: each names the share already.
var ErrMPS = errors.New("MPS share unavailable")

// MPSPipeDir is where a share's client view (its daemon's control socket) is mounted in its
// containers, and what their CUDA_MPS_PIPE_DIRECTORY says.
const MPSPipeDir = "/tmp/nvidia-mps"

// MPS is the MPS shares' configuration, and which daemons run (of the share a request names).
type MPS struct {
	Config  config.MPSConfig
	Running map[string]bool
}

// mpsDevices narrows a request on a share to the share's GPUs (checkShare): "all" means
// them, a device list must stay inside them.
func mpsDevices(req request.Request, host Host, selected []Device) ([]Device, error) {
	members, err := checkShare(req, host)
	if err != nil {
		return nil, err
	}
	if req.Mode == request.AllGPUs {
		return members, nil
	}
	var errs []error
	for _, d := range selected {
		if !isMember(d, members) {
			errs = append(errs, quote.Marked(ErrMPS, "GPU %s in %s is not in MPS share %q, which has %s", d, request.EnvVisibleDevices, req.MPSShare, describeDevices(members)))
		}
	}
	return selected, errors.Join(errs...)
}

// checkShare checks that the share a request is on exists, runs, and serves the container's
// user, and returns its GPUs.
func checkShare(req request.Request, host Host) ([]Device, error) {
	name := req.MPSShare
	cfg := host.MPS.Config
	share, ok := cfg.Shares[name]
	if !ok {
		configured := "no MPS shares are configured ([mps.shares.<name>] in the gpu-runtime config)"
		if names := cfg.ShareNames(); len(names) > 0 {
			configured = "the configured shares are " + strings.Join(names, ", ")
		}
		return nil, quote.Marked(ErrMPS, "unknown MPS share %s in %s: %s", quote.Value(name), request.EnvMPSShare, configured)
	}
	if !host.MPS.Running[name] {
		return nil, quote.Marked(ErrMPS, "MPS share %q is not running: start it with gpu-ctk mps start %s", name, name)
	}
	if int64(req.UID) != int64(share.UID) {
		return nil, quote.Marked(ErrMPS, "MPS share %q serves uid %d, and the container runs as uid %d: MPS servers are per user; run the container as uid %d, or give it a share whose uid is %d",
			name, share.UID, req.UID, share.UID, req.UID)
	}
	return ShareDevices(name, share, host.Driver.GPUs)
}

func isMember(d Device, members []Device) bool {
	return slices.ContainsFunc(members, func(m Device) bool { return m.UUID == d.UUID })
}

// cdiDevices are a CDI device a request names, and the devices its nodes are (DevicesOf).
type cdiDevices struct {
	Name    string
	Devices []Device
}

// shareCDI holds the CDI devices of a request on an MPS share (asked for, or the runtime's
// mps.share) to what native devices are held to: checkShare, and every GPU they bring is the
// share's. A CDI device comes whole, so one that brings another GPU (nvidia.com/gpu=all where
// the share has fewer GPUs) is refused. With shareEdits (no native devices, whose plan has
// them), the share's edits are added. CDI devices that bring no GPU join no share.
func (p *Plan) shareCDI(req request.Request, host Host, cdi []cdiDevices, shareEdits bool) error {
	gpus := 0
	for _, c := range cdi {
		gpus += len(c.Devices)
	}
	if gpus == 0 {
		return nil
	}
	members, err := checkShare(req, host)
	if err != nil {
		return err
	}
	share := fmt.Sprintf("MPS share %q", req.MPSShare)
	if host.MPS.Config.Share == req.MPSShare {
		share += " (mps.share: every GPU container of this runtime joins it)"
	}
	indices := make([]string, len(members))
	for i, m := range members {
		indices[i] = m.Index
	}
	var errs []error
	for _, c := range cdi {
		var outside []string
		for _, d := range c.Devices {
			if !isMember(d, members) {
				outside = append(outside, "GPU "+d.String())
			}
		}
		if len(outside) > 0 {
			errs = append(errs, quote.Marked(ErrMPS, "CDI device %s gives %s, not in %s, which has %s: a CDI device comes whole; ask only for the share's GPUs (their CDI devices, or %s=%s)",
				quote.Value(c.Name), strings.Join(outside, ", "), share, describeDevices(members), request.EnvVisibleDevices, strings.Join(indices, ",")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if shareEdits {
		p.Edits.Add(mpsEdits(req.MPSShare, host.MPS.Config))
	}
	return nil
}

// ShareDevices resolves a share's devices on the host's GPUs: whole GPUs, none in MIG mode.
func ShareDevices(name string, share config.MPSShare, gpus []discover.GPU) ([]Device, error) {
	var members []Device
	var errs []error
	for _, tok := range share.Devices {
		d, err := resolveToken(tok, gpus)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("MPS share %q: device %s: %w (%s)", name, quote.Value(tok), err, describe(gpus)))
		case d.IsMIG() || d.GPU.MIGEnabled():
			errs = append(errs, quote.Marked(ErrMPS, "MPS share %q: device %s is in MIG mode: MPS on MIG is not supported", name, d))
		default:
			members = append(members, d)
		}
	}
	return members, errors.Join(errs...)
}

func describeDevices(devices []Device) string {
	parts := make([]string, len(devices))
	for i, d := range devices {
		parts[i] = "GPU " + d.String()
	}
	return strings.Join(parts, ", ")
}

// mpsEdits connects a container to its share: only that share's client view (its daemon's
// control socket, read-only) and shared memory; its own CUDA_MPS_* removed (they can only
// lower the administrator's limits).
func mpsEdits(name string, cfg config.MPSConfig) edits.Edits {
	return edits.Edits{
		UnsetEnv: []string{"CUDA_MPS_*"},
		Env:      []string{"CUDA_MPS_PIPE_DIRECTORY=" + MPSPipeDir},
		EnvWhy:   fmt.Sprintf("MPS share %s: the container's CUDA_MPS_* could only lower the share's limits; the share sets them", name),
		Mounts: []edits.Mount{
			{HostPath: cfg.ClientDir(name), ContainerPath: MPSPipeDir, Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"},
				Why: fmt.Sprintf("MPS share %s: its daemon's control socket, which clients connect to; not the daemon's privileged socket, lock, pid file or log pipe, and nothing the container can replace", name)},
			{HostPath: cfg.ShmDir(name), ContainerPath: "/dev/shm", Options: []string{"rw", "nosuid", "nodev", "bind"},
				Why: fmt.Sprintf("MPS share %s: the shared memory of its daemon's servers, none of another share's", name)},
		},
	}
}

// ClaimShare is an MPS share that a Kubernetes ResourceClaim is: one GPU, the claim's
// consumed compute (percent of SMs) and memory limit ("60G", "16384M"; "" for none).
type ClaimShare struct {
	Name    string
	Compute int
	Memory  string
	// MemoryBytes is the memory the claim consumed, in bytes (0: none), also applied as a
	// per-cgroup GPU memory limit where the driver offers it.
	MemoryBytes int64
}

// ClaimShareEdits connects a claim's containers to its share as mpsEdits does a share's, for
// a CDI spec, which cannot remove variables: the claim's limits are set in the client's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (device 0, the
// claim's one GPU), which replace what the container set — and which, like anything a client
// sets, could only lower the limits its daemon enforces.
func ClaimShareEdits(s ClaimShare, cfg config.MPSConfig) edits.Edits {
	e := mpsEdits(s.Name, cfg)
	e.UnsetEnv = nil
	e.EnvWhy = fmt.Sprintf("MPS share of claim %s: its daemon enforces the claim's limits; the container's CUDA_MPS_* are replaced by them (and could only lower them)", s.Name)
	e.Env = append(e.Env, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", s.Compute))
	if s.Memory != "" {
		e.Env = append(e.Env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0="+s.Memory)
	}
	if share := cfg.Shares[s.Name]; s.MemoryBytes > 0 && len(share.Devices) == 1 {
		e.MemoryLimits = []edits.MemoryLimit{{UUID: share.Devices[0], Bytes: s.MemoryBytes}}
	}
	return e
}

// WithoutMPSPrograms is withoutMPSPrograms for the CDI spec of a claim's share.
func WithoutMPSPrograms(mounts []edits.Mount) []edits.Mount { return withoutMPSPrograms(mounts) }

// mpsPrograms are the driver's MPS programs: the control daemon and front end, and the
// server it starts. A share's clients need neither: the daemon runs on the host.
var mpsPrograms = []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}

// withoutMPSPrograms drops the driver's MPS programs from a share container's mounts: the
// front end is how people change a daemon's defaults or end it. A tenant can bring its own
// copy; what keeps the daemon's privileged socket out of reach is the client view.
func withoutMPSPrograms(mounts []edits.Mount) []edits.Mount {
	return slices.DeleteFunc(slices.Clone(mounts), func(m edits.Mount) bool {
		return slices.Contains(mpsPrograms, path.Base(m.ContainerPath))
	})
}

// Package plan decides what to inject into one container: from a request (what the
// container asked for) and a host (what discovery found) it builds one edits.Edits value.
// Planning is pure: it does no I/O. It validates the whole plan — every requested GPU
// resolved, every required device node and file present — and reports every problem at once.
package plan

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// Sentinel errors callers tell apart with errors.Is.
var (
	ErrUnknownDevice  = errors.New("unknown device")
	ErrUnsupported    = errors.New("unsupported device request")
	ErrMissingNode    = errors.New("missing device node")
	ErrMissingLibrary = errors.New("missing driver library")
)

// HookEnv is the explicit environment of every hook gpu-runtime writes. A hook entry without
// env would inherit the container's environment (CVE-2025-23266).
var HookEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// Host is what the planner knows about the machine.
type Host struct {
	Driver  discover.Driver
	Files   []discover.File
	Devices discover.DeviceNodes
	// HookPath is the absolute path of gpu-hook; LDConfig the host's ldconfig.
	HookPath string
	LDConfig string
	// HookTimeout is every hook's timeout in seconds (0: none).
	HookTimeout int
}

// Plan is the outcome of planning.
type Plan struct {
	Edits edits.Edits
	// GPUs are the selected GPUs, in request order.
	GPUs []discover.GPU
	// Warnings are problems that do not stop the container (e.g. a missing optional node).
	Warnings []string
}

// Build plans the injection for req on host.
func Build(req request.Request, host Host) (Plan, error) {
	var p Plan
	p.Edits.RemoveHooks = []string{request.DockerHookName}
	if !req.IsGPU() {
		return p, nil
	}
	var errs []error

	if req.MIGConfig || req.MIGMonitor {
		errs = append(errs, fmt.Errorf("%w: %s/%s: MIG configuration and monitoring access is not supported yet", ErrUnsupported, request.EnvMIGConfig, request.EnvMIGMonitor))
	}
	gpus, err := selectGPUs(req, host.Driver.GPUs)
	if err != nil {
		errs = append(errs, err)
	}
	p.GPUs = gpus

	// Device nodes: each selected GPU, the control node, and per capability.
	type want struct {
		path     string
		required bool
		hint     string
	}
	var nodes []want
	for _, g := range gpus {
		nodes = append(nodes, want{path: "/dev/nvidia" + strconv.Itoa(g.Minor), required: true})
	}
	nodes = append(nodes, want{path: "/dev/nvidiactl", required: true})
	if req.Capabilities.Has(capabilities.Compute) {
		hint := "CUDA needs it: load the nvidia-uvm module (nvidia-modprobe -u -c=0)"
		nodes = append(nodes, want{path: "/dev/nvidia-uvm", hint: hint}, want{path: "/dev/nvidia-uvm-tools", hint: hint})
	}
	if req.Capabilities.Has(capabilities.Graphics) {
		nodes = append(nodes, want{path: "/dev/nvidia-modeset", hint: "load the nvidia-modeset module"})
	}
	for _, ch := range imexChannels(req, host.Devices) {
		nodes = append(nodes, want{path: ch, required: true})
	}
	for _, w := range nodes {
		node, ok := host.Devices.Nodes[w.path]
		switch {
		case ok:
			p.Edits.DeviceNodes = append(p.Edits.DeviceNodes, edits.DeviceNode(node))
		case host.Devices.Invalid[w.path] != nil:
			errs = append(errs, fmt.Errorf("%w: %w", ErrMissingNode, host.Devices.Invalid[w.path]))
		case w.required:
			errs = append(errs, fmt.Errorf("%w: %s not found under device root %q: check that the NVIDIA driver is loaded, or set driver.dev-root",
				ErrMissingNode, w.path, host.Devices.Root))
		default:
			p.Warnings = append(p.Warnings, fmt.Sprintf("device node %s not found under device root %q, not injected (%s)", w.path, host.Devices.Root, w.hint))
		}
	}

	// Driver files for the requested capabilities.
	var files []discover.File
	var libraries []string
	have := map[string]bool{}
	for _, f := range host.Files {
		if !wanted(f, req.Capabilities) {
			continue
		}
		files = append(files, f)
		if f.Kind == discover.KindLibrary {
			// A required library must be there for 64-bit programs: an i386 copy alone
			// (compat32) does not make the capability work.
			if f.Bits != 32 {
				have[f.Prefix] = true
			}
			libraries = append(libraries, f.ContainerPath)
		}
	}
	for _, c := range capabilities.All {
		if !req.Capabilities.Has(c) {
			continue
		}
		for _, prefix := range capabilities.FilesOf(c).Required {
			if !have[prefix] {
				errs = append(errs, fmt.Errorf("%w: %s.so.%s (capability %s) not found under driver root: check driver.root and that the driver's user-space libraries are installed",
					ErrMissingLibrary, prefix, host.Driver.Version, c))
			}
		}
	}
	if len(errs) > 0 {
		return Plan{}, errors.Join(errs...)
	}

	p.Edits.Mounts = mountsFor(files)
	if len(req.Requirements) > 0 && !req.DisableRequire {
		args := []string{"gpu-hook", "prestart", "--cuda", host.Driver.CUDAVersion, "--driver", host.Driver.Version}
		for _, g := range gpus {
			args = append(args, "--gpu", fmt.Sprintf("%d,%s,%s", g.Index, g.ComputeCapability, g.Brand))
		}
		p.Edits.Hooks = append(p.Edits.Hooks, edits.Hook{Stage: oci.StagePrestart, Path: host.HookPath, Args: args, Env: HookEnv, Timeout: host.HookTimeout})
	}
	if len(libraries) > 0 {
		args := []string{"gpu-hook", "update-ldcache", "--ldconfig", host.LDConfig, "--driver-version", host.Driver.Version}
		if host.HookTimeout > 0 {
			args = append(args, "--timeout", strconv.Itoa(host.HookTimeout))
		}
		for _, lib := range libraries {
			args = append(args, "--library", lib)
		}
		p.Edits.Hooks = append(p.Edits.Hooks, edits.Hook{
			Stage: oci.StageCreateContainer, Path: host.HookPath, Args: args, Env: HookEnv, Timeout: host.HookTimeout,
		})
	}
	return p, nil
}

// IMEXChannelDir holds the IMEX channel nodes.
const IMEXChannelDir = "/dev/nvidia-caps-imex-channels"

// imexChannels returns the channel node paths a request needs: the named ones, or every
// channel node the host has for "all".
func imexChannels(req request.Request, dn discover.DeviceNodes) []string {
	var out []string
	if req.AllIMEXChannels {
		for p := range dn.Nodes {
			if strings.HasPrefix(p, IMEXChannelDir+"/channel") {
				out = append(out, p)
			}
		}
		sort.Strings(out)
		return out
	}
	for _, ch := range req.IMEXChannels {
		out = append(out, fmt.Sprintf("%s/channel%d", IMEXChannelDir, ch))
	}
	return out
}

// wanted says whether a discovered file belongs in a container with caps.
func wanted(f discover.File, caps capabilities.Set) bool {
	if f.Kind == discover.KindFirmware {
		return true
	}
	if f.Bits == 32 && !caps.Has(capabilities.Compat32) {
		return false
	}
	return caps.Has(f.Capability)
}

// selectGPUs resolves the request's device list against the host's GPUs.
func selectGPUs(req request.Request, gpus []discover.GPU) ([]discover.GPU, error) {
	switch req.Mode {
	case request.AllGPUs:
		return gpus, nil
	case request.DeviceList:
	default:
		return nil, nil
	}
	var out []discover.GPU
	var unknown []string
	var errs []error
	seen := map[int]string{}
	for _, tok := range req.Devices {
		g, err := resolveToken(tok, gpus)
		if errors.Is(err, ErrUnsupported) {
			errs = append(errs, err)
			continue
		}
		if err != nil {
			unknown = append(unknown, tok)
			continue
		}
		if prev, dup := seen[g.Index]; dup {
			errs = append(errs, fmt.Errorf("%w: %q and %q in %s both name GPU %d", request.ErrInvalid, prev, tok, request.EnvVisibleDevices, g.Index))
			continue
		}
		seen[g.Index] = tok
		out = append(out, g)
	}
	if len(unknown) > 0 {
		errs = append([]error{fmt.Errorf("%w %s in %s: %s", ErrUnknownDevice, quote.List(unknown), request.EnvVisibleDevices, describe(gpus))}, errs...)
	}
	return out, errors.Join(errs...)
}

func resolveToken(tok string, gpus []discover.GPU) (discover.GPU, error) {
	switch {
	case strings.HasPrefix(tok, "MIG-") || strings.Contains(tok, ":"):
		return discover.GPU{}, fmt.Errorf("%w: MIG device %q in %s: MIG devices are not supported yet; name whole GPUs by index or UUID", ErrUnsupported, tok, request.EnvVisibleDevices)
	case strings.Contains(tok, "/") && strings.Contains(tok, "="):
		return discover.GPU{}, fmt.Errorf("%w: CDI device %q in %s: CDI names are not supported in this variable yet; use an index or UUID", ErrUnsupported, tok, request.EnvVisibleDevices)
	}
	if idx, err := strconv.Atoi(tok); err == nil && idx >= 0 && strconv.Itoa(idx) == tok {
		for _, g := range gpus {
			if g.Index == idx {
				return g, nil
			}
		}
		return discover.GPU{}, ErrUnknownDevice
	}
	for _, g := range gpus {
		if strings.EqualFold(g.UUID, tok) {
			return g, nil
		}
	}
	return discover.GPU{}, ErrUnknownDevice
}

// describe lists the GPUs that exist, for error messages.
func describe(gpus []discover.GPU) string {
	if len(gpus) == 0 {
		return "this host has no GPUs"
	}
	sorted := append([]discover.GPU(nil), gpus...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	parts := make([]string, len(sorted))
	for i, g := range sorted {
		parts[i] = fmt.Sprintf("%d (%s)", g.Index, g.UUID)
	}
	return "this host has GPUs " + strings.Join(parts, ", ")
}

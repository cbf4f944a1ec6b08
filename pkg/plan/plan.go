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

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// Sentinel errors callers tell apart with errors.Is.
var (
	ErrUnknownDevice  = errors.New("unknown device")
	ErrMissingNode    = errors.New("missing device node")
	ErrMissingLibrary = errors.New("missing driver library")
)

// LDCacheSubcommand is gpu-hook's subcommand that updates the container's loader cache: the
// createContainer hook the plan adds for the injected libraries (gpu-runtime may do its work
// at create and drop it).
const LDCacheSubcommand = "update-ldcache"

// SystemDirs are the program directories of a host, in the order of the PATH systemd gives
// services: where gpu-runtime looks after PATH, and the PATH of every hook.
var SystemDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// HookEnv is the explicit environment of every hook gpu-runtime writes. A hook entry without
// env would inherit the container's environment (CVE-2025-23266).
var HookEnv = []string{"PATH=" + strings.Join(SystemDirs, ":")}

// Host is what the planner knows about the machine.
type Host struct {
	Driver  discover.Driver
	Files   []discover.File
	Devices discover.DeviceNodes
	// MIGCaps is how the driver exposes MIG capabilities; ProcRoot where its /proc is read.
	MIGCaps  discover.MIGCaps
	ProcRoot string
	// HookPath is the absolute path of gpu-hook; LDConfig the host's ldconfig.
	HookPath string
	LDConfig string
	// HookTimeout is every hook's timeout in seconds (0: none).
	HookTimeout int
	// HookLog and HookLogFormat are the low-level runtime's --log and --log-format of this
	// create: the loader-cache hook appends what it notes there (runc drops a successful
	// hook's stderr). Empty: no --log.
	HookLog, HookLogFormat string
	// MPS are the MPS shares (for a request that names one).
	MPS MPS
	// UnhealthyAll says what NVIDIA_VISIBLE_DEVICES=all does with an unhealthy device:
	// config.HealthAllSkip ("" too) or config.HealthAllFail. Each device's health is in Driver's GPUs.
	UnhealthyAll string
}

// Plan is the outcome of planning.
type Plan struct {
	Edits edits.Edits
	// Devices are the selected devices (whole GPUs and MIG devices), in request order.
	Devices []Device
	// Warnings are problems that do not stop the container (e.g. a missing optional node).
	Warnings []string
}

// Build plans the injection for req on host: the edits of each selected device, then the
// edits every GPU container gets (Common), then what the request adds (MIG config or
// monitor access, IMEX channels, the requirement check).
func Build(req request.Request, host Host) (Plan, error) {
	var p Plan
	p.Edits.RemoveHooks = []string{request.DockerHookName}
	if !req.IsGPU() {
		return p, nil
	}
	var errs []error
	devices, err := selectDevices(req, host.Driver)
	if err == nil && req.MPSShare != "" {
		devices, err = mpsDevices(req, host, devices)
	}
	if err != nil {
		errs = append(errs, err)
	}
	devices, healthWarnings, err := screenAll(req, devices, host.UnhealthyAll)
	if err != nil {
		errs = append(errs, err)
	}
	p.Devices = devices
	for _, d := range devices {
		de, err := d.Edits(host)
		if err != nil {
			errs = append(errs, err)
		}
		p.Edits.Add(de)
	}
	if req.MPSShare != "" && len(errs) == 0 {
		p.Edits.Add(mpsEdits(req.MPSShare, host.MPS.Config))
	}
	if req.MIGConfig || req.MIGMonitor {
		me, err := migAccessEdits(req, devices, host)
		if err != nil {
			errs = append(errs, err)
		}
		p.Edits.Add(me)
	}
	common, warnings, err := Common(req.Capabilities, host)
	if err != nil {
		errs = append(errs, err)
	}
	if req.MPSShare != "" {
		common.Mounts = withoutMPSPrograms(common.Mounts)
	}
	p.Warnings = append(healthWarnings, warnings...)
	p.Edits.Add(common)
	for _, ch := range imexChannels(req, host.Devices) {
		node, err := host.node(ch, request.EnvIMEXChannels+": IMEX channel "+strings.TrimPrefix(ch, IMEXChannelDir+"/channel"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Edits.Add(edits.Edits{DeviceNodes: []edits.DeviceNode{node}})
	}
	if len(errs) > 0 {
		return Plan{}, errors.Join(errs...)
	}
	if len(p.Edits.ProcCaps) > 0 {
		p.Edits.Hooks = append(p.Edits.Hooks, ProcCapsHook(p.Edits.ProcCaps, host))
	}
	if err := p.requirementHook(req, host); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// ProcCapsHook is the hook that shows a container the driver's /proc interface for the MIG
// capabilities caps: runc refuses mounts under /proc, gpu-hook makes them (a plan's, and a CDI
// spec's, for Edits.ProcCaps).
func ProcCapsHook(caps []string, host Host) edits.Hook {
	args := []string{"gpu-hook", "proc-caps", "--proc-root", host.ProcRoot}
	for _, c := range caps {
		args = append(args, "--cap", c)
	}
	return edits.Hook{Stage: oci.StageCreateContainer, Path: host.HookPath, Args: args, Env: HookEnv, Timeout: host.HookTimeout,
		Why: "MIG capabilities of the driver's /proc interface: runc refuses mounts under /proc, the hook shows the container only these"}
}

// ForCDI plans what gpu-runtime adds to a container whose GPUs all come from CDI devices,
// which bring their own edits: docker's hook removed, and the requirement check of the
// devices the CDI devices inject (DevicesOf). On an MPS share, ShareCDI adds the share's
// checks and edits.
func ForCDI(req request.Request, host Host, devices []Device) (Plan, error) {
	p := Plan{Devices: devices}
	p.Edits.RemoveHooks = []string{request.DockerHookName}
	err := p.requirementHook(req, host)
	return p, err
}

// AddCDIDevices adds to p, planned for a request's other devices, the devices its CDI
// devices inject: the requirement check covers them too.
func (p *Plan) AddCDIDevices(req request.Request, host Host, devices []Device) {
	p.Devices = append(p.Devices, devices...)
	hooks := p.Edits.Hooks[:0:0]
	for _, h := range p.Edits.Hooks {
		if h.Stage != oci.StagePrestart {
			hooks = append(hooks, h)
		}
	}
	p.Edits.Hooks = hooks
	p.prestartHook(req, host)
}

// JoinLibraries makes p's loader-cache hook also cover the libraries of other's (a CDI spec's
// edits applied to the same container): the runtime keeps one gpu-hook update-ldcache per
// container (oci.WithHook replaces a hook of the same path and subcommand), so without this
// the libraries only the CDI spec mounts would get no links and no cache entries.
func (p *Plan) JoinLibraries(other edits.Edits) {
	const sub = LDCacheSubcommand
	for i := range p.Edits.Hooks {
		ours := &p.Edits.Hooks[i]
		if len(ours.Args) < 2 || ours.Args[1] != sub {
			continue
		}
		have := map[string]bool{}
		for j := 2; j+1 < len(ours.Args); j++ {
			if ours.Args[j] == "--library" {
				have[ours.Args[j+1]] = true
			}
		}
		for _, h := range other.Hooks {
			if h.Path != ours.Path || h.Stage != ours.Stage || len(h.Args) < 2 || h.Args[1] != sub {
				continue
			}
			for j := 2; j+1 < len(h.Args); j++ {
				if lib := h.Args[j+1]; h.Args[j] == "--library" && !have[lib] {
					have[lib] = true
					ours.Args = append(ours.Args, "--library", lib)
				}
			}
		}
	}
}

// requirementHook checks the request's requirements (if any) and adds their prestart check
// against the host's driver and p's devices. Each requirement is parsed first: a malformed
// one fails the create here, before the low-level runtime runs; unknown keys are warnings.
func (p *Plan) requirementHook(req request.Request, host Host) error {
	if !req.ChecksRequirements() {
		return nil
	}
	list := make([]requirements.Requirement, len(req.Requirements))
	for i, r := range req.Requirements {
		list[i] = requirements.Requirement(r)
	}
	warnings, err := requirements.Validate(list)
	p.Warnings = append(p.Warnings, warnings...)
	if err != nil {
		return err
	}
	p.prestartHook(req, host)
	return nil
}

// prestartHook adds the prestart check of the request's requirements against the host's
// driver and p's devices: a MIG device's arch and brand are its parent's.
func (p *Plan) prestartHook(req request.Request, host Host) {
	if !req.ChecksRequirements() {
		return
	}
	names := make([]string, len(req.Requirements))
	for i, r := range req.Requirements {
		names[i] = r.Name
	}
	args := []string{"gpu-hook", "prestart", "--cuda", host.Driver.CUDAVersion, "--driver", host.Driver.Version}
	for _, d := range p.Devices {
		args = append(args, "--gpu", fmt.Sprintf("%s,%s,%s", d.Index, d.GPU.ComputeCapability, d.GPU.Brand))
	}
	p.Edits.Hooks = append(p.Edits.Hooks, edits.Hook{Stage: oci.StagePrestart, Path: host.HookPath, Args: args, Env: HookEnv, Timeout: host.HookTimeout,
		Why: "requirements: checks " + strings.Join(names, ", ") + " against this driver and the selected devices before the container starts"})
}

// managerVars names the MIG manager variables a request set, for reasons.
func managerVars(req request.Request) string {
	var vars []string
	if req.MIGConfig {
		vars = append(vars, request.EnvMIGConfig+"=all")
	}
	if req.MIGMonitor {
		vars = append(vars, request.EnvMIGMonitor+"=all")
	}
	return strings.Join(vars, ", ")
}

// Common returns the edits every GPU container with the capabilities caps gets, whatever
// devices it has: the control nodes (nvidiactl; the UVM nodes for compute; nvidia-modeset
// for graphics), the driver files of the capabilities as read-only mounts, and the hook that
// updates the container's loader cache. A missing optional node is a warning; a missing
// control node or required library an error.
func Common(caps capabilities.Set, host Host) (edits.Edits, []string, error) {
	var e edits.Edits
	var warnings []string
	var errs []error
	type want struct {
		path     string
		required bool
		hint     string
		why      string
	}
	nodes := []want{{path: "/dev/nvidiactl", required: true, why: "control node: every GPU container"}}
	if caps.Has(capabilities.Compute) {
		hint := "CUDA needs it: load the nvidia-uvm module (nvidia-modprobe -u -c=0)"
		nodes = append(nodes, want{path: "/dev/nvidia-uvm", hint: hint, why: "compute: CUDA unified memory"},
			want{path: "/dev/nvidia-uvm-tools", hint: hint, why: "compute: CUDA unified memory tools (profilers)"})
	}
	if caps.Has(capabilities.Graphics) {
		nodes = append(nodes, want{path: "/dev/nvidia-modeset", hint: "load the nvidia-modeset module", why: "graphics: display mode setting"})
	}
	for _, w := range nodes {
		node, err := host.node(w.path, w.why)
		switch {
		case err == nil:
			e.DeviceNodes = append(e.DeviceNodes, node)
		case w.required || host.Devices.Invalid[w.path] != nil:
			errs = append(errs, err)
		default:
			warnings = append(warnings, fmt.Sprintf("device node %s not found under device root %q, not injected (%s)", w.path, host.Devices.Root, w.hint))
		}
	}

	// Driver files for the requested capabilities.
	var files []discover.File
	var libraries []string
	have := map[string]bool{}
	for _, f := range host.Files {
		if !wanted(f, caps) {
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
		if !caps.Has(c) {
			continue
		}
		for _, prefix := range capabilities.FilesOf(c).Required {
			if !have[prefix] {
				errs = append(errs, fmt.Errorf("%w: %s.so.%s (capability %s) not found under driver root: check driver.root and that the driver's user-space libraries are installed",
					ErrMissingLibrary, prefix, host.Driver.Version, c))
			}
		}
	}
	e.Mounts = mountsFor(files)
	if len(libraries) > 0 {
		args := []string{"gpu-hook", LDCacheSubcommand, "--ldconfig", host.LDConfig, "--driver-version", host.Driver.Version}
		if host.HookTimeout > 0 {
			args = append(args, "--timeout", strconv.Itoa(host.HookTimeout))
		}
		if host.HookLog != "" {
			args = append(args, "--log", host.HookLog)
			if host.HookLogFormat != "" {
				args = append(args, "--log-format", host.HookLogFormat)
			}
		}
		for _, lib := range libraries {
			args = append(args, "--library", lib)
		}
		e.Hooks = append(e.Hooks, edits.Hook{
			Stage: oci.StageCreateContainer, Path: host.HookPath, Args: args, Env: HookEnv, Timeout: host.HookTimeout,
			Why: fmt.Sprintf("loader cache: SONAME links and /etc/ld.so.cache entries for the injected libraries (%d); gpu-runtime makes them itself at create and leaves this hook out where it can (hook.ldcache-at-create)", len(libraries)),
		})
	}
	return e, warnings, errors.Join(errs...)
}

// nodeEdit is the edit that injects a host device node.
func nodeEdit(n discover.DeviceNode, why string) edits.DeviceNode {
	return edits.DeviceNode{Path: n.Path, HostPath: n.HostPath, Type: n.Type, Major: n.Major, Minor: n.Minor,
		FileMode: n.FileMode, UID: n.UID, GID: n.GID, Why: why}
}

// node returns the device node at a container path under the device root, or the error
// saying why it cannot be injected.
func (h Host) node(p, why string) (edits.DeviceNode, error) {
	if n, ok := h.Devices.Nodes[p]; ok {
		return nodeEdit(n, why), nil
	}
	if err := h.Devices.Invalid[p]; err != nil {
		return edits.DeviceNode{}, fmt.Errorf("%w: %w", ErrMissingNode, err)
	}
	return edits.DeviceNode{}, fmt.Errorf("%w: %s not found under device root %q: check that the NVIDIA driver is loaded, or set driver.dev-root",
		ErrMissingNode, p, h.Devices.Root)
}

// migAccessEdits grants NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES=all: the
// mig/config or mig/monitor capability, and every GPU and compute instance capability of the
// selected MIG-capable GPUs (a MIG manager's view).
func migAccessEdits(req request.Request, devices []Device, host Host) (edits.Edits, error) {
	var e edits.Edits
	var errs []error
	for _, c := range []struct {
		asked bool
		env   string
		name  string
		minor int
	}{{req.MIGConfig, request.EnvMIGConfig, "mig/config", host.MIGCaps.Config}, {req.MIGMonitor, request.EnvMIGMonitor, "mig/monitor", host.MIGCaps.Monitor}} {
		if !c.asked {
			continue
		}
		ce, err := host.capEdits(c.name, c.minor, c.env+"=all: the "+c.name+" capability")
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=all: %w", c.env, err))
		}
		e.Add(ce)
	}
	for _, d := range devices {
		if d.IsMIG() || !d.GPU.MIGCapable {
			continue
		}
		for i := range d.GPU.MIGDevices {
			m := &d.GPU.MIGDevices[i]
			for _, c := range []struct {
				path  string
				minor int
			}{{discover.CapPath(d.GPU.Minor, m.GI, -1), m.GICap}, {discover.CapPath(d.GPU.Minor, m.GI, m.CI), m.CICap}} {
				ce, err := host.capEdits(c.path, c.minor, fmt.Sprintf("MIG access (%s): %s's capability %s", managerVars(req), d, c.path))
				if err != nil {
					errs = append(errs, fmt.Errorf("MIG access to GPU %s: %w", d, err))
				}
				e.Add(ce)
			}
		}
	}
	return e, errors.Join(errs...)
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

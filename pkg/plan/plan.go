// Package plan decides what to inject into one container: from a request (by any channel),
// a host (what discovery found) and the CDI devices the request names (resolved by the
// caller) it builds one Plan — the devices, one edits.Edits value, and as data the intents
// that must run in the low-level runtime's lifecycle (LoaderCache, ProcCaps), rendered as
// hooks only when the spec is written (Rendered). Planning does no I/O. It validates the
// whole plan — every device resolved and healthy, every node and file present, every
// requirement met — and reports every problem at once.
package plan

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// Sentinel errors callers tell apart with errors.Is.
var (
	ErrUnknownDevice  = errors.New("unknown device")
	ErrMissingNode    = errors.New("missing device node")
	ErrMissingLibrary = errors.New("missing driver library")
)

// HookName is the file name of gpu-hook; LDCacheSubcommand its subcommand that updates the
// container's loader cache.
const (
	HookName          = "gpu-hook"
	LDCacheSubcommand = "update-ldcache"
)

// SystemDirs are the program directories of a host, in the order of the PATH systemd gives
// services: where gpu-runtime looks after PATH, and the PATH of every hook.
var SystemDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// HookEnv is the explicit environment of every hook gpu-runtime writes. A hook entry without
// env would inherit the container's environment (CVE-2025-23266).
var HookEnv = []string{"PATH=" + strings.Join(SystemDirs, ":")}

// Host is what discovery found, nothing of how hooks are written (Render).
type Host struct {
	Driver  discover.Driver
	Files   []discover.File
	Devices discover.DeviceNodes
	// MIGCaps is how the driver exposes MIG capabilities; ProcRoot where its /proc is read.
	MIGCaps  discover.MIGCaps
	ProcRoot string
	MPS      MPS
	// Topology is each GPU's place on the host's buses, by GPU UUID: only where asked for
	// (gpuhost.Options.Topology; the DRA kubelet plugin publishes it).
	Topology map[string]discover.Topology
	// UnhealthyAll says what NVIDIA_VISIBLE_DEVICES=all does with an unhealthy device:
	// config.HealthAllSkip ("" too) or config.HealthAllFail. Each device's health is in Driver's GPUs.
	UnhealthyAll string
	// NoCgroups, when set, says why the low-level runtime can neither create device nodes
	// nor write a device cgroup (gpu-runtime runs rootless, or runtime.no-cgroups): every
	// device node is then a bind mount of the host's node (noCgroups).
	NoCgroups string
}

// Plan is every device the container gets, whatever named it, and everything to change in
// its spec, as data: what must run in the low-level runtime's lifecycle is an intent
// (LoaderCache, Edits.ProcCaps) until the spec is written (Rendered); requirements are
// checked here, not by a hook.
type Plan struct {
	Edits edits.Edits
	// Devices are the selected devices (whole GPUs and MIG devices), in request order, then
	// those the CDI devices give.
	Devices []Device
	// LeftOut are the unhealthy devices "all" left out (health.all = "skip"): an intent, written
	// as the container's EnvLeftOut (Rendered).
	LeftOut     []LeftOut
	LoaderCache LoaderCache
	Warnings    []string // problems that do not stop the container (a missing optional node)
}

// LoaderCache is the intent to make the injected libraries loadable in the container: their
// SONAME links, /etc/ld.so.cache entries and the CUDA forward-compatibility preference (for
// DriverVersion, the host's). gpu-runtime does it at create where it can (Done: no hook);
// otherwise it is the gpu-hook update-ldcache hook (Rendered).
type LoaderCache struct {
	Libraries     []Library
	DriverVersion string
	Done          bool
}

// Library is an injected library: its container path and the host file mounted there.
type Library struct {
	Path, Source string
}

// add adds a library once (by container path).
func (l *LoaderCache) add(lib Library) {
	if !slices.ContainsFunc(l.Libraries, func(x Library) bool { return x.Path == lib.Path }) {
		l.Libraries = append(l.Libraries, lib)
	}
}

// CDIDevice is a CDI device a request names, resolved by the caller (which has the CDI
// library): its edits (its spec's common edits with the device's) and the container paths of
// the device nodes it injects, common ones included, which say what GPUs it gives (DevicesOf).
type CDIDevice struct {
	Name  string
	Edits edits.Edits
	Nodes []string
}

// Build plans the injection for req on host with the CDI devices it names: the native
// devices' edits (whole GPUs, MIG devices, MPS shares), Common's, what the request adds (MIG
// access, IMEX channels), then the CDI devices' edits, ours winning at a shared path, then the
// DGX/HGX features' nodes (NVIDIA_GDS=enabled, …). Health,
// MPS shares and requirements are checked the same way for every device, native or CDI.
func Build(req request.Request, host Host, cdi []CDIDevice) (Plan, error) {
	var p Plan
	p.Edits.RemoveHooks = []string{request.DockerHookName}
	if !req.IsGPU() {
		return p, nil
	}
	var err error
	native := req.NativeDevices()
	if native {
		err = p.native(req, host)
	}
	if len(cdi) > 0 && err == nil {
		err = p.addCDI(req, host, cdi, native)
	}
	if err == nil {
		err = p.addFeatures(req, host)
	}
	if err != nil {
		return Plan{}, err
	}
	p.noCgroups(host)
	// An unsatisfied requirement leaves the plan to the caller, to show (gpu-ctk explain).
	return p, p.checkRequirements(req, host)
}

// native plans the devices the request names itself and the edits of a GPU container. Every
// problem is in the error (errors.Join drops the nil ones).
func (p *Plan) native(req request.Request, host Host) error {
	devices, err := selectDevices(req, host.Driver)
	if err == nil && req.MPSShare != "" {
		devices, err = mpsDevices(req, host, devices)
	}
	devices, leftOut, healthWarnings, healthErr := screenAll(req, devices, host.UnhealthyAll)
	errs := []error{err, healthErr}
	p.Devices, p.LeftOut = devices, leftOut
	for _, d := range devices {
		de, err := d.Edits(host)
		errs = append(errs, err)
		p.Edits.Add(de)
	}
	if req.MPSShare != "" && errors.Join(errs...) == nil {
		p.Edits.Add(mpsEdits(req.MPSShare, host.MPS.Config))
	}
	if req.MIGConfig || req.MIGMonitor {
		me, err := migAccessEdits(req, devices, host)
		errs = append(errs, err)
		p.Edits.Add(me)
	}
	common, libs, warnings, err := Common(req.Capabilities, host)
	errs = append(errs, err)
	p.Warnings = append(healthWarnings, warnings...)
	if req.MPSShare != "" {
		common.Mounts = withoutMPSPrograms(common.Mounts)
	}
	p.Edits.Add(common)
	p.LoaderCache.DriverVersion = host.Driver.Version
	for _, l := range libs {
		p.LoaderCache.add(l)
	}
	for _, ch := range imexChannels(req, host.Devices) {
		node, err := host.node(ch, request.EnvIMEXChannels+": IMEX channel "+strings.TrimPrefix(ch, IMEXChannelDir+"/channel"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Edits.Add(edits.Edits{DeviceNodes: []edits.DeviceNode{node}})
	}
	return errors.Join(errs...)
}

// addCDI adds the CDI devices a request names: the GPUs they give join the plan's devices,
// checked for health and, on an MPS share, held to the share; their edits come after ours.
// The gpu-hook update-ldcache hook of a spec gpu-ctk wrote becomes the plan's: its libraries
// join LoaderCache, so that one update covers both, at create where it can.
func (p *Plan) addCDI(req request.Request, host Host, cdi []CDIDevice, native bool) error {
	resolved := make([]cdiDevices, len(cdi))
	var names []string
	var given []Device
	for i, c := range cdi {
		resolved[i] = cdiDevices{Name: c.Name, Devices: DevicesOf(c.Nodes, host)}
		names = append(names, c.Name)
		given = append(given, resolved[i].Devices...)
	}
	if err := checkCDIHealth(names, given); err != nil {
		return err
	}
	if req.MPSShare != "" {
		if err := p.shareCDI(req, host, resolved, !native); err != nil {
			return err
		}
	}
	for _, d := range given {
		if !slices.ContainsFunc(p.Devices, func(x Device) bool { return x.UUID == d.UUID }) {
			p.Devices = append(p.Devices, d)
		}
	}
	if p.LoaderCache.DriverVersion == "" {
		p.LoaderCache.DriverVersion = host.Driver.Version
	}
	for _, c := range cdi {
		e := c.Edits
		if req.MPSShare != "" && len(given) > 0 {
			e.Mounts = withoutMPSPrograms(e.Mounts)
		}
		// The spec's own loader-cache hook joins the plan's, which needs the driver's version
		// (CUDA forward compatibility): without a discovered host the hook stays as the spec
		// wrote it.
		if p.LoaderCache.DriverVersion != "" {
			e.Hooks = slices.DeleteFunc(slices.Clone(e.Hooks), isLDCacheHook)
		}
		if len(e.Hooks) != len(c.Edits.Hooks) {
			for _, m := range e.Mounts {
				if isLibrary(m.ContainerPath) && (m.Type == "" || m.Type == "bind") {
					p.LoaderCache.add(Library{Path: m.ContainerPath, Source: m.HostPath})
				}
			}
		}
		p.Edits.Add(e)
	}
	return nil
}

// isLDCacheHook says whether h is gpu-hook's loader-cache update, as gpu-ctk writes it into
// CDI specs (Rendered): by its program's name and subcommand, not by what it lists.
func isLDCacheHook(h edits.Hook) bool {
	return path.Base(h.Path) == HookName && len(h.Args) > 1 && h.Args[1] == LDCacheSubcommand
}

// isLibrary says whether a mounted file is one ldconfig enters: its name starts with "lib"
// or "ld-" and holds ".so" (glibc's elf/ldconfig.c, search_dir).
func isLibrary(p string) bool {
	name := path.Base(p)
	return (strings.HasPrefix(name, "lib") || strings.HasPrefix(name, "ld-")) && strings.Contains(name, ".so")
}

// checkRequirements checks the request's requirements against the driver and every device of
// the plan, native and CDI (requirements.Check: unknown keys are warnings, an unsatisfied
// requirement requirements.ErrUnsatisfied).
func (p *Plan) checkRequirements(req request.Request, host Host) error {
	if !req.ChecksRequirements() {
		return nil
	}
	warnings, err := requirements.Check(req.Requirements, RequirementHost(host.Driver, p.Devices))
	p.Warnings = append(p.Warnings, warnings...)
	return err
}

// RequirementHost is what requirements are checked against: the driver's versions, and the
// arch and brand of each device (a MIG device's are its parent's).
func RequirementHost(drv discover.Driver, devices []Device) requirements.Host {
	h := requirements.Host{CUDA: drv.CUDAVersion, Driver: drv.Version}
	for _, d := range devices {
		h.GPUs = append(h.GPUs, requirements.GPU{ID: d.Index, Arch: d.GPU.ComputeCapability, Brand: d.GPU.Brand})
	}
	return h
}

// Common returns the edits every GPU container with the capabilities caps gets: the control
// nodes (nvidiactl; UVM for compute; nvidia-modeset for graphics), the capabilities' driver
// files as read-only mounts, and the injected libraries. A missing optional node is a
// warning; a missing nvidiactl or required library an error.
func Common(caps capabilities.Set, host Host) (edits.Edits, []Library, []string, error) {
	var e edits.Edits
	var warnings []string
	var errs []error
	type want struct {
		path, hint, why string
		required        bool
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

	// Driver files for the requested capabilities (32-bit ones with compat32), and firmware.
	var libraries []Library
	have := map[string]bool{}
	for _, f := range host.Files {
		if f.Kind != discover.KindFirmware && !(caps.Has(f.Capability) && (f.Bits != 32 || caps.Has(capabilities.Compat32))) {
			continue
		}
		e.Mounts = append(e.Mounts, mountFor(f))
		if f.Kind == discover.KindLibrary {
			// A required library must be there for 64-bit programs: an i386 copy alone
			// (compat32) does not make the capability work.
			if f.Bits != 32 {
				have[f.Prefix] = true
			}
			libraries = append(libraries, Library{Path: f.ContainerPath, Source: f.HostPath})
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
	return e, libraries, warnings, errors.Join(errs...)
}

// nodeEdit is the edit that injects a host device node.
func nodeEdit(n discover.DeviceNode, why string) edits.DeviceNode {
	return edits.DeviceNode{Path: n.Path, HostPath: n.HostPath, Type: n.Type, Major: n.Major, Minor: n.Minor,
		FileMode: n.FileMode, UID: n.UID, GID: n.GID, Why: why}
}

// node returns the device node at a container path, or why it cannot be injected.
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
// mig/config or mig/monitor capability, and every instance capability of the selected
// MIG-capable GPUs.
func migAccessEdits(req request.Request, devices []Device, host Host) (edits.Edits, error) {
	var e edits.Edits
	var errs []error
	var vars []string // the MIG manager variables set, for reasons
	for _, c := range []struct {
		asked bool
		env   string
		name  string
		minor int
	}{{req.MIGConfig, request.EnvMIGConfig, "mig/config", host.MIGCaps.Config}, {req.MIGMonitor, request.EnvMIGMonitor, "mig/monitor", host.MIGCaps.Monitor}} {
		if !c.asked {
			continue
		}
		vars = append(vars, c.env+"=all")
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
				ce, err := host.capEdits(c.path, c.minor, fmt.Sprintf("MIG access (%s): %s's capability %s", strings.Join(vars, ", "), d, c.path))
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

// imexChannels returns the channel node paths a request names, or the host's for "all".
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

// Package runtime is gpu-runtime's create path: read the bundle's spec, decide whether the
// container asked for GPUs, discover the host, plan, validate and apply the injection, and
// write the spec back atomically. It never execs anything; main does that afterwards.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// HookName is the file name of the hook binary.
const HookName = "gpu-hook"

// ErrRuntimeNotFound: none of the configured low-level runtimes exists.
var ErrRuntimeNotFound = errors.New("low-level runtime not found")

// Options configure one invocation.
type Options struct {
	Config config.Config
	// Executable is gpu-runtime's own path (to find gpu-hook beside it and to avoid exec'ing itself).
	Executable string
	Cwd        string
	Logger     logrus.FieldLogger
	// CDI resolves and applies CDI devices. gpu-runtime has none — the CDI library's size and
	// start-up cost would land on every call, start and delete included — and hands a create
	// that names CDI devices to HandOff (gpu-ctk, which has one).
	CDI     CDI
	HandOff func() error

	// RuncLog and RuncLogFormat are the create's --log and --log-format, passed on to the
	// loader-cache hook (PrepareBundle sets them from the invocation).
	RuncLog, RuncLogFormat string

	// Seams, in containerd's style: nil means the real thing. FindDeviceNodes scans the
	// device root (discover.FindDeviceNodes); QueryNVML answers a discovery-cache miss (by
	// default `gpu-ctk info --json`, found next to Executable or in PATH).
	FindDeviceNodes func(devRoot string) (discover.DeviceNodes, error)
	QueryNVML       func(ctx context.Context, driverRoot string) (discover.Driver, error)
}

// CDI resolves CDI devices (reference §10).
type CDI interface {
	// Resolve resolves the named devices and those the cdi.k8s.io/ annotations name, all of
	// them: an unresolvable one is an error naming it and listing the devices the specs offer.
	Resolve(names []string, annotations map[string]string) (CDIDevices, error)
}

// CDIDevices are resolved CDI devices.
type CDIDevices interface {
	// Names are their qualified names.
	Names() []string
	// DeviceNodes are the container paths of the device nodes their edits (and their
	// specs' common edits) inject; NodesOf those of one of them (one of Names).
	DeviceNodes() []string
	NodesOf(name string) []string
	// Apply applies those edits to spec, as the CDI library does.
	Apply(spec *specs.Spec) error
	// Edits describes those edits in gpu-runtime's model, each saying which device or spec
	// brought it (gpu-ctk explain).
	Edits() (edits.Edits, error)
}

// ErrNoCDI: CDI devices were asked for where nothing can resolve them.
var ErrNoCDI = errors.New("CDI devices requested, but no CDI resolver is available")

// controlNode is in every NVIDIA GPU container: a spec that already has it was given its
// GPUs by the engine (CDI in podman or containerd 2.x, or --device) and is left alone.
const controlNode = "/dev/nvidiactl"

// PrepareBundle applies the GPU injection to the bundle of a create/run invocation. A
// container that asks for no GPU (and carries no docker GPU hook) is left byte-identical
// and costs no NVML work; so is one whose GPUs the engine already injected.
func PrepareBundle(inv oci.Invocation, opts Options) error {
	bundle := inv.BundleDir(opts.Cwd)
	log := opts.Logger.WithFields(logrus.Fields{"container_id": inv.ContainerID, "bundle": bundle})

	path := oci.ConfigPath(bundle)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	if inv.Log != "" {
		opts.RuncLog, opts.RuncLogFormat = inv.Log, inv.LogFormat
		if !filepath.IsAbs(opts.RuncLog) {
			opts.RuncLog = filepath.Join(opts.Cwd, opts.RuncLog)
		}
	}
	in, err := Decide(path, raw, opts, log)
	if err != nil || in.HandedOff {
		return err
	}
	if in.Unchanged != "" {
		if in.Unchanged == UnchangedEngineInjected {
			log.Info(in.Unchanged)
		} else {
			log.Debug(in.Unchanged)
		}
		return nil
	}
	if log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		for _, line := range in.Plan.Edits.Describe() {
			log.Debug(line)
		}
	}
	if err := in.Apply(); err != nil {
		return err
	}
	updateLDCacheAtCreate(in, bundle, opts, log)
	if err := in.File.Write(); err != nil {
		return err
	}
	fields := logrus.Fields{
		"gpus":         deviceIDs(in.Plan.Devices),
		"capabilities": in.Request.Capabilities.String(),
		"devices":      len(in.Plan.Edits.DeviceNodes),
		"mounts":       len(in.Plan.Edits.Mounts),
	}
	if in.CDI != nil {
		fields["cdi_devices"] = in.CDI.Names()
	}
	log.WithFields(fields).Info("injected NVIDIA GPUs")
	return nil
}

// Why a spec is left unchanged (Injection.Unchanged).
const (
	UnchangedNoGPU          = "no GPU requested; spec unchanged"
	UnchangedEngineInjected = "the spec already has NVIDIA devices (injected by the engine through CDI, or given with --device); spec unchanged"
)

// Injection is what a create does to a spec, decided, resolved and planned; nothing is
// edited until Apply, nothing written until File.Write. gpu-ctk explain shows it.
type Injection struct {
	// Unchanged says why the spec is left as it is ("" when it is edited); HandedOff that
	// the create was handed to Options.HandOff, which did the work.
	Unchanged string
	HandedOff bool
	File      *oci.SpecFile
	Request   request.Request
	// Host is what discovery found (zero when nothing needed it).
	Host plan.Host
	Plan plan.Plan
	// CDI are the CDI devices the request names, resolved; nil for none.
	CDI CDIDevices
}

// Decide reads the spec at path (raw, its bytes) and decides the injection: whether the
// container asks for GPUs, which, and every edit, all resolved and validated before
// anything is touched. Warnings go to log.
func Decide(path string, raw []byte, opts Options, log logrus.FieldLogger) (Injection, error) {
	in, warnings, err := readRequest(path, raw, request.Policy{
		AcceptEnvWhenUnprivileged: opts.Config.Request.AcceptEnvvarWhenUnprivileged,
		AcceptVolumeMounts:        opts.Config.Request.AcceptDeviceListAsVolumeMounts,
	})
	for _, w := range warnings {
		log.Warn(w)
	}
	if err != nil || in.Unchanged != "" {
		return in, err
	}
	if forced := opts.Config.MPS.Share; forced != "" && in.Request.IsGPU() {
		// This runtime handler's containers all join its share: not the container's choice.
		in.Request.MPSShare = forced
	}
	req := in.Request
	if req.WantsCDI() && opts.CDI == nil {
		if opts.HandOff == nil {
			return in, ErrNoCDI
		}
		log.Debug("CDI devices requested: handing the create to gpu-ctk")
		in.HandedOff = true
		return in, opts.HandOff()
	}

	if req.WantsCDI() {
		if in.CDI, err = opts.CDI.Resolve(req.CDIDevices, req.CDIAnnotations); err != nil {
			return in, err
		}
	}
	// Native devices: every device unless only CDI devices were named.
	native := req.Mode != request.NoGPU && !(req.Mode == request.DeviceList && len(req.Devices) == 0)
	checks := req.ChecksRequirements()
	gpuCDI := in.CDI != nil && hasGPUNode(in.CDI.DeviceNodes()) // its GPUs' health is checked
	// On an MPS share, CDI devices get only the share's GPUs, as native ones: which GPUs
	// they bring must be known.
	shareCDI := gpuCDI && req.MPSShare != ""
	in.Host = plan.Host{Devices: discover.DeviceNodes{Root: opts.Config.Driver.DevRoot}}
	switch {
	case native || (in.CDI != nil && checks) || shareCDI:
		if in.Host, err = discoverHost(opts, log); err != nil {
			return in, err
		}
	case gpuCDI: // only for health: CDI devices need no discovery, so its failure is a warning
		if host, err := discoverHost(opts, log); err != nil {
			log.Warnf("the health of the GPUs of CDI devices %s is not checked: %v", quote.List(in.CDI.Names()), err)
			gpuCDI = false
		} else {
			in.Host = host
		}
	}
	var cdiDevices []plan.Device // the devices CDI's device nodes are, where it matters
	if gpuCDI || (in.CDI != nil && checks) {
		cdiDevices = plan.DevicesOf(in.CDI.DeviceNodes(), in.Host)
	}
	if gpuCDI {
		if err := plan.CheckCDIHealth(in.CDI.Names(), cdiDevices); err != nil {
			return in, err
		}
	}
	in.Host.MPS = plan.MPS{Config: opts.Config.MPS}
	if req.MPSShare != "" {
		// Files only: the pid file gpu-ctk mps start wrote and the share's mount.
		in.Host.MPS.Running = map[string]bool{req.MPSShare: mps.Check(opts.Config.MPS, req.MPSShare).Running}
	}
	var p plan.Plan
	switch {
	case !native:
		var checked []plan.Device // the requirement check's devices: only CDI's
		if checks {
			checked = cdiDevices
		}
		p, err = plan.ForCDI(req, in.Host, checked)
	default:
		p, err = plan.Build(req, in.Host)
		if err != nil && !errors.Is(err, requirements.ErrMalformed) { // a malformed requirement is reported as it is
			err = fmt.Errorf("plan GPU injection: %w", err)
		}
		if err == nil && in.CDI != nil && checks {
			p.AddCDIDevices(req, in.Host, cdiDevices)
		}
	}
	if err == nil && shareCDI {
		cdi := make([]plan.CDIDevice, 0, len(in.CDI.Names()))
		for _, n := range in.CDI.Names() {
			cdi = append(cdi, plan.CDIDevice{Name: n, Devices: plan.DevicesOf(in.CDI.NodesOf(n), in.Host)})
		}
		if err = p.ShareCDI(req, in.Host, cdi, !native); err != nil {
			err = fmt.Errorf("plan GPU injection: %w", err)
		}
	}
	if err != nil {
		return in, err
	}
	if in.CDI != nil && native {
		// Both: ours replace CDI's edits they share, the loader-cache hook included, which
		// must then cover the CDI spec's libraries too.
		ce, err := in.CDI.Edits()
		if err != nil {
			return in, fmt.Errorf("CDI devices %s: %w", quote.List(in.CDI.Names()), err)
		}
		p.JoinLibraries(ce)
	}
	for _, w := range p.Warnings {
		log.Warn(w)
	}
	in.Plan = p
	if err := in.checkVolumeTargets(filepath.Dir(path)); err != nil {
		return in, err
	}
	return in, nil
}

// checkVolumeTargets refuses the injection where the image's links lead one of its mounts
// (ours or the CDI devices') into a volume of the container (checkVolumeTargets). A spec
// without one root path (the engine's structure, trusted) is not checked.
func (in Injection) checkVolumeTargets(bundle string) error {
	root, err := in.File.Root()
	if err != nil || root == nil || root.Path == "" || in.File.Spec == nil {
		return nil // no one root to resolve in: the loader-cache step says why
	}
	rootPath := root.Path
	if !filepath.IsAbs(rootPath) {
		rootPath = filepath.Join(bundle, rootPath)
	}
	mounts := in.Plan.Edits.Mounts
	if in.CDI != nil {
		ce, err := in.CDI.Edits()
		if err != nil {
			return err
		}
		mounts = append(slices.Clone(mounts), ce.Mounts...)
	}
	return checkVolumeTargets(rootPath, in.File.Spec.Mounts, mounts)
}

// Apply edits the spec in memory: CDI's edits first, then ours, which replace what they
// share (a node by path, a rule, a mount by destination), so a device named both ways is
// injected once.
func (in Injection) Apply() error {
	if in.CDI != nil {
		if err := in.CDI.Apply(in.File.Spec); err != nil {
			return fmt.Errorf("apply CDI devices %s: %w", quote.List(in.CDI.Names()), err)
		}
	}
	if err := in.Plan.Edits.Apply(in.File.Spec); err != nil {
		return fmt.Errorf("edit spec: %w", err)
	}
	return nil
}

// hasDevice reports whether the spec has a device node at path.
func hasDevice(s *specs.Spec, path string) bool {
	if s.Linux == nil {
		return false
	}
	for _, d := range s.Linux.Devices {
		if filepath.Clean(d.Path) == path {
			return true
		}
	}
	return false
}

// hasGPUNode reports whether container device-node paths include a GPU's /dev/nvidia<N>.
func hasGPUNode(paths []string) bool {
	for _, p := range paths {
		if n, ok := strings.CutPrefix(filepath.Clean(p), "/dev/nvidia"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return true
		}
	}
	return false
}

// hasDockerHook reports whether the spec carries docker's --gpus hook (a walk of the decoded
// hooks: nanoseconds).
func hasDockerHook(sf *oci.SpecFile) bool {
	return oci.HasHookNamed(sf.Spec, request.DockerHookName)
}

func discoverHost(opts Options, log logrus.FieldLogger) (plan.Host, error) {
	cfg := opts.Config
	hookPath, err := HookPath(cfg.Hook.Path, opts.Executable)
	if err != nil {
		return plan.Host{}, err
	}
	findNodes := opts.FindDeviceNodes
	if findNodes == nil {
		findNodes = discover.FindDeviceNodes
	}
	devices, err := findNodes(cfg.Driver.DevRoot)
	if err != nil {
		return plan.Host{}, err
	}
	query := opts.QueryNVML
	if query == nil {
		query = func(ctx context.Context, root string) (discover.Driver, error) {
			// Located only on a cache miss, the only time gpu-ctk runs.
			ctkPath, err := toolPath(CTKName, "", opts.Executable, "install gpu-ctk next to gpu-runtime or in PATH (it answers NVML queries)")
			if err != nil {
				return discover.Driver{}, err
			}
			return NVMLQuery(ctkPath)(ctx, root)
		}
	}
	dopts := discover.Options{DriverRoot: cfg.Driver.Root, DevRoot: cfg.Driver.DevRoot, ProcRoot: cfg.Driver.ProcRoot, Timeout: cfg.Discovery.TimeoutDuration(), Query: query}
	if cfg.Discovery.Cache {
		dopts.CacheFile = cfg.Discovery.CacheFile
	}
	res, err := discover.Discover(dopts, devices)
	if res.CacheProblem != "" {
		log.Warn(res.CacheProblem)
	}
	if err != nil {
		return plan.Host{}, err
	}
	log.WithField("cache_hit", res.CacheHit).Debug("discovered host")
	// Health is read for every create, never cached: a small file and one /proc file per GPU.
	for _, w := range discover.ReadHealth(res.Host.Driver.GPUs, discover.HealthOptions{File: cfg.Health.File, ProcRoot: cfg.Driver.ProcRoot}) {
		log.Warn(w)
	}
	return plan.Host{Driver: res.Host.Driver, Files: res.Host.Files, Devices: devices, MIGCaps: res.Host.MIGCaps, ProcRoot: cfg.Driver.ProcRoot,
		HookPath: hookPath, LDConfig: cfg.Hook.LDConfig, HookTimeout: cfg.Hook.TimeoutSeconds(),
		HookLog: opts.RuncLog, HookLogFormat: opts.RuncLogFormat, UnhealthyAll: cfg.Health.All}, nil
}

// HookPath returns the absolute path of gpu-hook: the configured one, else next to the
// gpu-runtime executable, else from PATH.
func HookPath(configured, executable string) (string, error) {
	return toolPath(HookName, configured, executable, "set hook.path in the gpu-runtime config")
}

// toolPath finds one of our binaries: the configured path, else next to executable, else PATH.
func toolPath(name, configured, executable, hint string) (string, error) {
	if configured != "" {
		return checkExecutable(configured, "hook.path")
	}
	if executable != "" {
		beside := filepath.Join(filepath.Dir(executable), name)
		if _, err := os.Stat(beside); err == nil {
			return checkExecutable(beside, name)
		}
	}
	p, err := lookPath(name)
	if err != nil {
		return "", fmt.Errorf("find %s: not next to %s nor in PATH; %s", name, executable, hint)
	}
	return filepath.Abs(p)
}

// systemDirs are searched after PATH: engines do not always give the runtime one (podman's
// cleanup runs `<runtime> delete` with an empty environment).
var systemDirs = plan.SystemDirs

// lookPath finds an executable by name in PATH, then in the system directories.
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range systemDirs {
		candidate := filepath.Join(dir, name)
		if fi, serr := os.Stat(candidate); serr == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", err
}

func checkExecutable(p, setting string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", setting, p, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s %s: not an executable file", setting, p)
	}
	return filepath.Abs(p)
}

// LowLevelRuntime returns the first configured runtime that exists: a name is looked up in
// PATH, a path used as is. gpu-runtime itself is skipped so a misconfiguration cannot loop.
func LowLevelRuntime(candidates []string, self string) (string, error) {
	var tried []string
	for _, c := range candidates {
		var p string
		var err error
		if filepath.IsAbs(c) || filepath.Base(c) != c {
			p = c
			_, err = checkExecutable(c, "runtime.runtimes")
		} else {
			p, err = lookPath(c)
		}
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", c, err))
			continue
		}
		if sameFile(p, self) {
			tried = append(tried, fmt.Sprintf("%s (is gpu-runtime itself)", c))
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("%w: tried %v; install runc or set runtime.runtimes in the gpu-runtime config", ErrRuntimeNotFound, tried)
}

func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func deviceIDs(devices []plan.Device) []string {
	out := make([]string, len(devices))
	for i, d := range devices {
		out[i] = d.UUID
	}
	return out
}

// readRequest reads what the spec at path (raw, its bytes) asks for under policy: the first
// half of Decide, which AsksForGPU shares. in.Unchanged says why a spec that asks for
// nothing (or was given its GPUs by the engine) is left as it is; warnings are the
// request's.
func readRequest(path string, raw []byte, policy request.Policy) (in Injection, warnings []string, err error) {
	if !request.MayRequestGPU(raw) {
		in.Unchanged = UnchangedNoGPU
		return in, nil, nil
	}
	if in.File, err = oci.ParseSpec(path, raw); err != nil {
		return in, nil, err
	}
	if hasDevice(in.File.Spec, controlNode) {
		in.Unchanged = UnchangedEngineInjected
		return in, nil, nil
	}
	if in.Request, warnings, err = request.FromSpec(in.File.Spec, policy); err != nil {
		return in, warnings, err
	}
	in.Request.DockerGPUs = hasDockerHook(in.File)
	if !in.Request.IsGPU() && !in.Request.DockerGPUs {
		in.Unchanged = UnchangedNoGPU
	}
	return in, warnings, nil
}

// AsksForGPU reports whether a create's container asks gpu-runtime for GPUs, judged with the
// default configuration: an NVIDIA variable, a device-plugin mount, a CDI name or annotation,
// or docker's --gpus hook. A spec that cannot be read or parsed, or a request that does not
// parse, counts as asking (its create must then fail with the real error). main uses it when
// the configuration is broken, to let every other container run.
func AsksForGPU(inv oci.Invocation, cwd string) bool {
	path := oci.ConfigPath(inv.BundleDir(cwd))
	raw, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	in, _, err := readRequest(path, raw, request.Policy{
		AcceptEnvWhenUnprivileged: config.Default().Request.AcceptEnvvarWhenUnprivileged,
		AcceptVolumeMounts:        true, // a broken config may have meant to accept them
	})
	return err != nil || in.Unchanged == ""
}

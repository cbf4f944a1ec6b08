// Package create is gpu-runtime's create path: read the bundle's spec, decide whether the
// container asked for GPUs and which (every request channel into one plan, CDI devices
// resolved by gpu-ctk), build the host (internal/gpuhost), plan and check the injection
// (requirements included), update the loader cache at create where that gives what the hook
// would, apply the edits in one place and write the spec back atomically. It never execs
// anything; main does that afterwards. gpu-ctk explain runs the same decision.
package create

import (
	"cmp"
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

	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
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
	// device root; QueryNVML answers a discovery-cache miss (by default `gpu-ctk info`).
	// Rootless says why gpu-runtime runs rootless, "" when it does not (gpuhost.Rootless).
	FindDeviceNodes func(devRoot string) (discover.DeviceNodes, error)
	QueryNVML       func(ctx context.Context, driverRoot string) (discover.Driver, error)
	Rootless        func() string
}

// CDI resolves CDI devices into gpu-runtime's model.
type CDI interface {
	// Resolve resolves the named devices and those the cdi.k8s.io/ annotations name for a
	// container running as user (who owns device nodes a spec gives no owner, as in the CDI
	// library): an unresolvable one is an error naming it and the devices the specs offer.
	Resolve(names []string, annotations map[string]string, user specs.User) ([]plan.CDIDevice, error)
}

// ErrNoCDI: CDI devices were asked for where nothing can resolve them.
var ErrNoCDI = errors.New("CDI devices requested, but no CDI resolver is available")

// controlNode is in every NVIDIA GPU container: a spec that already has it (a device node,
// or rootless a bind mount) was given its GPUs by the engine (CDI in podman or containerd
// 2.x, or --device) or by gpu-runtime, and is left alone.
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
		if in.Unchanged != UnchangedNoGPU {
			log.Info(in.Unchanged)
		} else {
			log.Debug(in.Unchanged)
		}
		return nil
	}
	in.UpdateLoaderCache(opts, false, log)
	e, err := in.Apply()
	if err != nil {
		return err
	}
	if log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		for _, line := range e.Describe() {
			log.Debug(line)
		}
	}
	if err := in.File.Write(); err != nil {
		return err
	}
	fields := logrus.Fields{
		"gpus":         deviceIDs(in.Plan.Devices),
		"capabilities": in.Request.Capabilities.String(),
		"devices":      len(e.DeviceNodes),
		"mounts":       len(e.Mounts),
	}
	if len(in.CDINames) > 0 {
		fields["cdi_devices"] = in.CDINames
	}
	log.WithFields(fields).Info("injected NVIDIA GPUs")
	return nil
}

// Why a spec is left unchanged (Injection.Unchanged).
const (
	UnchangedNoGPU          = "no GPU requested; spec unchanged"
	UnchangedEngineInjected = "the spec already has NVIDIA devices (injected by the engine through CDI, or given with --device); spec unchanged"
	UnchangedInjected       = "the spec already has NVIDIA devices: gpu-runtime injected them (" + InjectedAnnotation + "); spec unchanged"
)

// InjectedAnnotation is the annotation a create leaves in the spec it injected, naming the
// devices (UUIDs, comma-separated; "none" for none): gpu-ctk explain and a second pass
// over the same spec know it was gpu-runtime's.
const InjectedAnnotation = "dev.gpu-runtime.injected"

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
	// CDINames are the CDI devices the request names, resolved into Plan.
	CDINames []string
	// LoaderCacheWhy says where the loader cache is updated, and why (UpdateLoaderCache).
	LoaderCacheWhy string
	// Render says how the plan's intents are written as hooks.
	Render plan.Render
	bundle string
}

// Decide reads the spec at path (raw, its bytes) and decides the injection: whether the
// container asks for GPUs, which (every request channel resolved into one plan), and every
// edit, all validated before anything is touched, requirements included. Warnings go to log.
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
	in.bundle = filepath.Dir(path)
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
	var cdi []plan.CDIDevice
	if req.WantsCDI() {
		var user specs.User
		if in.File.Spec.Process != nil {
			user = in.File.Spec.Process.User
		}
		if cdi, err = opts.CDI.Resolve(req.CDIDevices, req.CDIAnnotations, user); err != nil {
			return in, err
		}
		for _, c := range cdi {
			in.CDINames = append(in.CDINames, c.Name)
		}
	}
	// The host is discovered for native devices, and for CDI devices that give GPUs (their
	// health and share), or whose requirements are checked; a CDI device that gives no GPU
	// needs none, so its failure is then a warning.
	native := req.NativeDevices()
	gpuCDI := slices.ContainsFunc(cdi, func(c plan.CDIDevice) bool { return hasGPUNode(c.Nodes) })
	isRootless := opts.Rootless
	if isRootless == nil {
		isRootless = gpuhost.Rootless
	}
	rootless := isRootless()
	if rootless != "" {
		// Root's cache cannot be read; the user's runtime directory keeps the user's.
		opts.Config.Discovery.CacheFile = gpuhost.RootlessCacheFile(opts.Config, os.Getenv("XDG_RUNTIME_DIR"))
	}
	in.Host = plan.Host{Devices: discover.DeviceNodes{Root: opts.Config.Driver.DevRoot}}
	switch {
	case native || req.ChecksRequirements() || req.MPSShare != "" && gpuCDI:
		if in.Host, err = discoverHost(opts, log); err != nil {
			return in, err
		}
	case gpuCDI:
		if host, err := discoverHost(opts, log); err != nil {
			log.Warnf("the health of the GPUs of CDI devices %s is not checked: %v", quote.List(in.CDINames), err)
		} else {
			in.Host = host
		}
	}
	in.Host.MPS.Config = opts.Config.MPS
	var noCgroupsWarning string
	if in.Host.NoCgroups, noCgroupsWarning = gpuhost.NoCgroups(opts.Config, func() string { return rootless }); noCgroupsWarning != "" {
		log.Warn(noCgroupsWarning)
	}
	if req.MPSShare != "" {
		// Files only: the pid file gpu-ctk mps start wrote and the share's mount.
		in.Host.MPS.Running = map[string]bool{req.MPSShare: mps.Check(opts.Config.MPS, req.MPSShare).Running}
	}
	p, err := plan.Build(req, in.Host, cdi)
	in.Plan = p // with an unsatisfied requirement: what it was checked against
	if err != nil {
		if !errors.Is(err, requirements.ErrMalformed) && !errors.Is(err, requirements.ErrUnsatisfied) { // reported as they are
			err = fmt.Errorf("plan GPU injection: %w", err)
		}
		return in, err
	}
	for _, w := range p.Warnings {
		log.Warn(w)
	}
	if len(p.LoaderCache.Libraries) > 0 || len(p.Edits.ProcCaps) > 0 { // a hook may be written: gpu-hook must exist
		if in.Render, err = Render(opts); err != nil {
			return in, err
		}
	}
	if root, err := in.rootPath(); err == nil { // without one root, the loader-cache step says why
		return in, checkVolumeTargets(root, in.File.Spec.Mounts, in.Plan.Edits.Mounts)
	}
	return in, nil
}

// Render is how a create with opts writes the plan's intents as hooks; gpu-ctk cdi generate
// writes them the same way (without a runc log to pass on).
func Render(opts Options) (plan.Render, error) {
	cfg := opts.Config
	hookPath, err := HookPath(cfg.Hook.Path, opts.Executable)
	if err != nil {
		return plan.Render{}, err
	}
	return plan.Render{HookPath: hookPath, LDConfig: cfg.Hook.LDConfig, HookTimeout: cfg.Hook.TimeoutSeconds(),
		HookLog: opts.RuncLog, HookLogFormat: opts.RuncLogFormat, ProcRoot: cfg.Driver.ProcRoot}, nil
}

// rootPath is the container root's host path, "" when the spec has no one root.path (the
// engine's structure, trusted: the steps that need it say so).
func (in Injection) rootPath() (string, error) {
	root, err := in.File.Root()
	switch {
	case err != nil:
		return "", err
	case root == nil || root.Path == "":
		return "", errors.New("the spec has no root.path")
	case !filepath.IsAbs(root.Path):
		return filepath.Join(in.bundle, root.Path), nil
	}
	return root.Path, nil
}

// Edits are the edits the spec gets: the plan's, its intents rendered as hooks where they
// must run in the low-level runtime's lifecycle, and the annotation that says so.
func (in Injection) Edits() edits.Edits {
	e := in.Plan.Rendered(in.Render)
	devices := cmp.Or(strings.Join(deviceIDs(in.Plan.Devices), ","), "none")
	e.Add(edits.Edits{Annotations: map[string]string{InjectedAnnotation: devices}})
	return e
}

// Apply edits the spec in memory: every edit of the one plan, native and CDI devices alike,
// in one place (edits.Apply). It returns the edits it made.
func (in Injection) Apply() (edits.Edits, error) {
	e := in.Edits()
	if err := e.Apply(in.File.Spec); err != nil {
		return e, fmt.Errorf("edit spec: %w", err)
	}
	return e, nil
}

// hasDevice reports whether the spec has a device node at path.
func hasDevice(s *specs.Spec, path string) bool {
	return s.Linux != nil && slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return filepath.Clean(d.Path) == path })
}

// hasMount reports whether the spec bind-mounts something at path: rootless, engines give a
// --device as a bind mount of the host's node (and gpu-runtime its own, NoCgroups).
func hasMount(s *specs.Spec, path string) bool {
	return slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool {
		return filepath.Clean(m.Destination) == path &&
			(m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind"))
	})
}

// hasGPUNode reports whether container device-node paths include a GPU's /dev/nvidia<N>.
func hasGPUNode(paths []string) bool {
	return slices.ContainsFunc(paths, func(p string) bool {
		n, ok := strings.CutPrefix(filepath.Clean(p), "/dev/nvidia")
		return ok && n != "" && strings.Trim(n, "0123456789") == ""
	})
}

// discoverHost builds the host as a create sees it (internal/gpuhost): the discovery cache, NVML
// through a gpu-ctk child on a miss, health.
func discoverHost(opts Options, log logrus.FieldLogger) (plan.Host, error) {
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
	res, err := gpuhost.Build(opts.Config, gpuhost.Options{Query: query, Cache: true, Health: true, FindDeviceNodes: opts.FindDeviceNodes})
	for _, w := range res.Warnings {
		log.Warn(w)
	}
	if err != nil {
		return plan.Host{}, err
	}
	log.WithField("cache_hit", res.CacheHit).Debug("discovered host")
	return res.Host, nil
}

// HookPath returns the absolute path of gpu-hook: the configured one, else next to the
// gpu-runtime executable, else from PATH.
func HookPath(configured, executable string) (string, error) {
	return toolPath(plan.HookName, configured, executable, "set hook.path in the gpu-runtime config")
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
// half of Decide, shared with AsksForGPU. in.Unchanged says why a spec that asks for nothing
// (or was given its GPUs by the engine) is left as it is.
func readRequest(path string, raw []byte, policy request.Policy) (in Injection, warnings []string, err error) {
	if !request.MayRequestGPU(raw) {
		in.Unchanged = UnchangedNoGPU
		return in, nil, nil
	}
	if in.File, err = oci.ParseSpec(path, raw); err != nil {
		return in, nil, err
	}
	if hasDevice(in.File.Spec, controlNode) || hasMount(in.File.Spec, controlNode) {
		in.Unchanged = UnchangedEngineInjected
		if in.File.Spec.Annotations[InjectedAnnotation] != "" {
			in.Unchanged = UnchangedInjected
		}
		return in, nil, nil
	}
	if in.Request, warnings, err = request.FromSpec(in.File.Spec, policy); err != nil {
		return in, warnings, err
	}
	in.Request.DockerGPUs = oci.HasHookNamed(in.File.Spec, request.DockerHookName)
	if !in.Request.IsGPU() && !in.Request.DockerGPUs {
		in.Unchanged = UnchangedNoGPU
	}
	return in, warnings, nil
}

// AsksForGPU reports whether a create's container asks for GPUs, judged with the default
// configuration (an NVIDIA variable, a device-plugin mount, a CDI name or annotation, docker's
// --gpus hook), for a broken configuration to let every other container run. A spec or
// request that does not parse counts as asking: its create must fail with the real error.
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

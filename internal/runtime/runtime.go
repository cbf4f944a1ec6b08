// Package runtime is gpu-runtime's create path: read the bundle's spec, decide whether the
// container asked for GPUs, discover the host, plan, validate and apply the injection, and
// write the spec back atomically. It never execs anything; main does that afterwards.
package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
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
}

// PrepareBundle applies the GPU injection to the bundle of a create/run invocation. A
// container that asks for no GPU (and carries no docker GPU hook) is left byte-identical
// and costs no NVML work.
func PrepareBundle(inv oci.Invocation, opts Options) error {
	bundle := inv.BundleDir(opts.Cwd)
	log := opts.Logger.WithFields(logrus.Fields{"container_id": inv.ContainerID, "bundle": bundle})

	path := oci.ConfigPath(bundle)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	if !request.MayRequestGPU(raw) {
		log.Debug("no GPU requested; spec unchanged")
		return nil
	}
	sf, err := oci.ParseSpec(path, raw)
	if err != nil {
		return err
	}
	policy := request.Policy{
		AcceptEnvWhenUnprivileged: opts.Config.Request.AcceptEnvvarWhenUnprivileged,
		AcceptVolumeMounts:        opts.Config.Request.AcceptDeviceListAsVolumeMounts,
	}
	req, warnings, err := request.FromSpec(sf.Spec, policy)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	dockerHook := hasDockerHook(sf)
	if !req.IsGPU() && !dockerHook {
		log.Debug("no GPU requested; spec unchanged")
		return nil
	}

	host := plan.Host{Devices: discover.DeviceNodes{Root: opts.Config.Driver.DevRoot}}
	if req.IsGPU() {
		if host, err = discoverHost(opts, log); err != nil {
			return err
		}
	}
	p, err := plan.Build(req, host)
	if err != nil {
		return fmt.Errorf("plan GPU injection: %w", err)
	}
	for _, w := range p.Warnings {
		log.Warn(w)
	}
	if err := p.Edits.Apply(sf.Spec); err != nil {
		return fmt.Errorf("edit spec: %w", err)
	}
	if err := sf.Write(); err != nil {
		return err
	}
	log.WithFields(logrus.Fields{
		"gpus":         deviceIDs(p.Devices),
		"capabilities": req.Capabilities.String(),
		"devices":      len(p.Edits.DeviceNodes),
		"mounts":       len(p.Edits.Mounts),
	}).Info("injected NVIDIA GPUs")
	return nil
}

// hasDockerHook: the raw check skips the walk for the usual spec without one.
func hasDockerHook(sf *oci.SpecFile) bool {
	return bytes.Contains(sf.Raw, []byte(request.DockerHookName)) && oci.HasHookNamed(sf.Spec, request.DockerHookName)
}

func discoverHost(opts Options, log logrus.FieldLogger) (plan.Host, error) {
	cfg := opts.Config
	hookPath, err := HookPath(cfg.Hook.Path, opts.Executable)
	if err != nil {
		return plan.Host{}, err
	}
	devices, err := discover.FindDeviceNodes(cfg.Driver.DevRoot)
	if err != nil {
		return plan.Host{}, err
	}
	dopts := discover.Options{DriverRoot: cfg.Driver.Root, DevRoot: cfg.Driver.DevRoot, ProcRoot: cfg.Driver.ProcRoot, Timeout: cfg.Discovery.TimeoutDuration(), Query: func(ctx context.Context, root string) (discover.Driver, error) {
		// Located only on a cache miss, the only time gpu-ctk runs.
		ctkPath, err := toolPath(CTKName, "", opts.Executable, "install gpu-ctk next to gpu-runtime or in PATH (it answers NVML queries)")
		if err != nil {
			return discover.Driver{}, err
		}
		return NVMLQuery(ctkPath)(ctx, root)
	}}
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
	return plan.Host{Driver: res.Host.Driver, Files: res.Host.Files, Devices: devices, MIGCaps: res.Host.MIGCaps, ProcRoot: cfg.Driver.ProcRoot,
		HookPath: hookPath, LDConfig: cfg.Hook.LDConfig, HookTimeout: cfg.Hook.TimeoutSeconds()}, nil
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
var systemDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

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

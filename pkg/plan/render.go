package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// Render says how a plan's intents are written as hooks when they must run in the low-level
// runtime's lifecycle: which gpu-hook and ldconfig, the hooks' timeout, where the hook logs
// (the low-level runtime's --log and --log-format of this create; empty: none), and where
// the host's /proc is (driver.proc-root).
type Render struct {
	HookPath, LDConfig     string
	HookTimeout            int
	HookLog, HookLogFormat string
	ProcRoot               string
	// CTKPath is gpu-ctk and DriverRoot the driver root, for the memory-limit hooks.
	CTKPath, DriverRoot string
}

// Rendered returns the plan's edits with its intents written: as hooks, the loader-cache update
// unless it was done at create, and the MIG capabilities of a driver's /proc interface; as the
// container's EnvLeftOut, the devices "all" left out.
func (p Plan) Rendered(r Render) edits.Edits {
	e := p.Edits
	e.Hooks = slices.Clone(e.Hooks)
	if len(p.LeftOut) > 0 {
		e.Env = append(slices.Clone(e.Env), EnvLeftOut+"="+leftOutEnv(p.LeftOut))
		why := "devices left out: the unhealthy devices \"all\" did not give this container (health.all = \"skip\")"
		e.EnvWhy = strings.TrimPrefix(e.EnvWhy+"; "+why, "; ")
	}
	if len(p.LoaderCache.Libraries) > 0 && !p.LoaderCache.Done {
		e.Hooks = append(e.Hooks, r.LDCacheHook(p.LoaderCache))
	}
	if len(e.ProcCaps) > 0 {
		e.Hooks = append(e.Hooks, r.ProcCapsHook(e.ProcCaps))
	}
	for _, l := range e.MemoryLimits {
		e.Hooks = append(e.Hooks, r.MemoryLimitHooks(l)...)
	}
	return e
}

// MemoryLimitHooks are the hooks of a per-cgroup GPU memory limit: gpu-hook memory-limit at
// createRuntime, in the runtime's namespaces once the container's cgroup exists, sets it
// through gpu-ctk (NVML); the same with --clear at poststop clears it. Where the driver does
// not offer such limits, or the container has no cgroup v2 group, both do nothing.
func (r Render) MemoryLimitHooks(l edits.MemoryLimit) []edits.Hook {
	// No --proc-root: the container's process is read in the host's /proc, where the hook
	// runs; driver.proc-root is where the driver's /proc files are (a fake host's are elsewhere).
	args := []string{HookName, "memory-limit", "--ctk", r.CTKPath, "--driver-root", r.DriverRoot, "--device", l.UUID}
	if r.HookTimeout > 0 {
		args = append(args, "--timeout", strconv.Itoa(r.HookTimeout))
	}
	set := append(slices.Clone(args), "--bytes", strconv.FormatInt(l.Bytes, 10))
	unset := append(slices.Clone(args), "--clear")
	why := fmt.Sprintf("GPU memory limit: the claim consumed %d bytes of shared GPU %s; NVML's per-cgroup limit (driver R615 or later) holds the container's cgroup to it", l.Bytes, l.UUID)
	return []edits.Hook{
		{Stage: oci.StageCreateRuntime, Path: r.HookPath, Args: set, Env: HookEnv, Timeout: r.HookTimeout, Why: why},
		{Stage: oci.StagePoststop, Path: r.HookPath, Args: unset, Env: HookEnv, Timeout: r.HookTimeout, Why: why + "; cleared when the container stops"},
	}
}

// LDCacheHook is the loader-cache update as a createContainer hook: gpu-hook update-ldcache,
// after the mounts, in the container's namespaces.
func (r Render) LDCacheHook(l LoaderCache) edits.Hook {
	args := []string{HookName, LDCacheSubcommand, "--ldconfig", r.LDConfig, "--driver-version", l.DriverVersion}
	if r.HookTimeout > 0 {
		args = append(args, "--timeout", strconv.Itoa(r.HookTimeout))
	}
	if r.HookLog != "" {
		args = append(args, "--log", r.HookLog)
		if r.HookLogFormat != "" {
			args = append(args, "--log-format", r.HookLogFormat)
		}
	}
	for _, lib := range l.Libraries {
		args = append(args, "--library", lib.Path)
	}
	return edits.Hook{Stage: oci.StageCreateContainer, Path: r.HookPath, Args: args, Env: HookEnv, Timeout: r.HookTimeout,
		Why: fmt.Sprintf("loader cache: SONAME links and /etc/ld.so.cache entries for the injected libraries (%d); gpu-runtime makes them itself at create where it can (hook.ldcache-at-create)", len(l.Libraries))}
}

// ProcCapsHook is the hook that shows a container the driver's /proc interface for the MIG
// capabilities caps: runc refuses mounts under /proc, gpu-hook makes them.
func (r Render) ProcCapsHook(caps []string) edits.Hook {
	args := []string{HookName, "proc-caps", "--proc-root", r.ProcRoot}
	for _, c := range caps {
		args = append(args, "--cap", c)
	}
	return edits.Hook{Stage: oci.StageCreateContainer, Path: r.HookPath, Args: args, Env: HookEnv, Timeout: r.HookTimeout,
		Why: "MIG capabilities of the driver's /proc interface: runc refuses mounts under /proc, the hook shows the container only these"}
}

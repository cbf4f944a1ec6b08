// Package edits is the one description of what gpu-runtime injects into a container:
// device nodes (each with its cgroup rule), mounts, hooks, environment, groups and
// annotations, in the shape of a CDI spec's containerEdits (a CDI device's edits are read into
// it). A planner produces an Edits value; Apply is the only place that turns it into changes
// of an OCI spec.
package edits

import (
	"cmp"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// DeviceNode is a device node to create in the container, with the numbers read from the
// host, and its cgroup rule.
type DeviceNode struct {
	Path     string      `json:"path"`     // path in the container, e.g. /dev/nvidia0
	HostPath string      `json:"hostPath"` // where it was found on the host (under the device root)
	Type     string      `json:"type"`     // "c" or "b"
	Major    int64       `json:"major"`
	Minor    int64       `json:"minor"`
	FileMode os.FileMode `json:"fileMode"`
	UID      uint32      `json:"uid"`
	GID      uint32      `json:"gid"`
	// Access is what the cgroup rule allows: "" for "rwm" (a CDI spec may say less).
	Access string `json:"access,omitempty"`
	// Why says what brought this edit, for people (Describe); it is not written into the spec.
	Why string `json:"why"`
}

// Mount is a mount into the container: a bind mount of a host file unless Type says
// otherwise (a CDI spec's may).
type Mount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Type          string   `json:"type,omitempty"` // "" for "bind"
	Options       []string `json:"options"`
	// IDMapped: in a container with a user namespace, a bind mount gets its ID mappings, as
	// the CDI library applies a spec's mounts.
	IDMapped bool   `json:"idMapped,omitempty"`
	Why      string `json:"why"` // as DeviceNode's
}

// Hook is an OCI hook to add.
type Hook struct {
	Stage   string   `json:"stage"` // one of the oci.Stage* constants
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Timeout int      `json:"timeout,omitempty"` // seconds before the runtime kills it, failing the create; 0: none
	Why     string   `json:"why"`               // as DeviceNode's
}

// Edits is everything to change in a container's spec.
type Edits struct {
	// UnsetEnv removes the container's variables of these names ("CUDA_MPS_*": a prefix)
	// before Env is set: what the container must not decide for itself.
	UnsetEnv    []string
	Env         []string
	EnvWhy      string // why UnsetEnv and Env are there
	DeviceNodes []DeviceNode
	Mounts      []Mount
	Hooks       []Hook
	// RemoveHooks names hook executables to drop from every stage (e.g. docker's
	// nvidia-container-runtime-hook, whose request gpu-runtime honours itself).
	RemoveHooks    []string
	AdditionalGIDs []uint32          // groups the container's process joins (a CDI spec's)
	Annotations    map[string]string `json:"annotations,omitempty"` // what gpu-runtime records of its injection
	// ProcCaps are MIG capabilities of a driver that uses the /proc interface (paths under
	// /proc/driver/nvidia/capabilities, e.g. "gpu0/mig/gi1/access"): the container may
	// open these and no other. The runtime refuses spec mounts under /proc, so the planner
	// turns them into a gpu-hook entry; Apply ignores them.
	ProcCaps []string
	// MemoryLimits are per-cgroup GPU memory limits the container gets (a Kubernetes claim of a
	// shared GPU): the planner renders each as gpu-hook memory-limit hooks, createRuntime to set
	// it on the container's cgroup, poststop to clear it; Apply ignores them.
	MemoryLimits []MemoryLimit
}

// MemoryLimit is a limit of what the container's cgroup may allocate on one GPU.
type MemoryLimit struct {
	UUID  string `json:"uuid"`
	Bytes int64  `json:"bytes"`
}

// Add appends o's edits to e. A device node or mount at a container path e already has,
// and a capability or hook removal already listed, are not added again: two MIG devices of
// one GPU share its device node.
func (e *Edits) Add(o Edits) {
	e.UnsetEnv = appendNew(e.UnsetEnv, o.UnsetEnv, itself)
	e.Env = append(e.Env, o.Env...)
	if e.EnvWhy == "" {
		e.EnvWhy = o.EnvWhy
	}
	e.DeviceNodes = appendNew(e.DeviceNodes, o.DeviceNodes, func(n DeviceNode) string { return n.Path })
	e.Mounts = appendNew(e.Mounts, o.Mounts, func(m Mount) string { return m.ContainerPath })
	e.Hooks = append(e.Hooks, o.Hooks...)
	e.RemoveHooks = appendNew(e.RemoveHooks, o.RemoveHooks, itself)
	e.ProcCaps = appendNew(e.ProcCaps, o.ProcCaps, itself)
	e.MemoryLimits = appendNew(e.MemoryLimits, o.MemoryLimits, func(l MemoryLimit) string { return l.UUID })
	if e.Annotations == nil && len(o.Annotations) > 0 {
		e.Annotations = map[string]string{}
	}
	maps.Copy(e.Annotations, o.Annotations)
	e.AdditionalGIDs = appendNew(e.AdditionalGIDs, o.AdditionalGIDs, itself)
}

// appendNew appends to list each of items whose key it does not hold yet.
func appendNew[T any, K comparable](list, items []T, key func(T) K) []T {
	for _, it := range items {
		if !slices.ContainsFunc(list, func(x T) bool { return key(x) == key(it) }) {
			list = append(list, it)
		}
	}
	return list
}

func itself[T any](v T) T { return v }

// Apply changes spec according to e: the one place where injection becomes spec changes. The
// edits are made in a fixed order: hook removals, env, devices, mounts (after the spec's own,
// the injected ones sorted by depth among themselves, so that one inside another comes after
// it; ID-mapped ones take the mappings of spec's user namespace), groups, annotations, hooks.
func (e Edits) Apply(spec *specs.Spec) error {
	var opts []oci.SpecOpt
	for _, name := range e.RemoveHooks {
		opts = append(opts, oci.WithoutHooksNamed(name))
	}
	opts = append(opts, oci.WithoutEnv(e.UnsetEnv...))
	if len(e.Env) > 0 {
		opts = append(opts, oci.WithEnv(e.Env...))
	}
	devices := make([]oci.Device, len(e.DeviceNodes))
	for i, d := range e.DeviceNodes {
		devices[i] = oci.Device{LinuxDevice: specs.LinuxDevice{Path: d.Path, Type: d.Type, Major: d.Major, Minor: d.Minor,
			FileMode: &d.FileMode, UID: &d.UID, GID: &d.GID}, Access: d.Access}
	}
	opts = append(opts, oci.WithDevices(devices...))
	mounts := make([]specs.Mount, len(e.Mounts))
	for i, m := range e.Mounts {
		mounts[i] = specs.Mount{Destination: m.ContainerPath, Type: cmp.Or(m.Type, "bind"), Source: m.HostPath, Options: m.Options}
		if m.IDMapped && mounts[i].Type == "bind" && oci.HasUserNamespace(spec.Linux) {
			mounts[i].UIDMappings, mounts[i].GIDMappings = spec.Linux.UIDMappings, spec.Linux.GIDMappings
		}
	}
	slices.SortStableFunc(mounts, func(a, b specs.Mount) int { return depth(a.Destination) - depth(b.Destination) })
	opts = append(opts, oci.WithMounts(mounts...))
	if len(e.AdditionalGIDs) > 0 {
		opts = append(opts, oci.WithAdditionalGIDs(e.AdditionalGIDs...))
	}
	if len(e.Annotations) > 0 {
		opts = append(opts, oci.WithAnnotations(e.Annotations))
	}
	for _, h := range e.Hooks {
		hook := specs.Hook{Path: h.Path, Args: h.Args, Env: h.Env}
		if h.Timeout > 0 {
			hook.Timeout = &h.Timeout
		}
		opts = append(opts, oci.WithHook(h.Stage, hook))
	}
	return oci.Apply(spec, opts...)
}

// depth is how many components a container path has.
func depth(p string) int { return strings.Count(path.Clean(p), "/") }

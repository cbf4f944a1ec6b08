package oci

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecOpt is one edit of a spec. Every SpecOpt creates the parents it needs and is
// idempotent: applying it twice gives the same spec as applying it once.
type SpecOpt func(*specs.Spec) error

// Apply runs opts in order, stopping at the first error.
func Apply(s *specs.Spec, opts ...SpecOpt) error {
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return err
		}
	}
	return nil
}

// Device is a device node to add and the access its cgroup rule allows ("" for "rwm").
type Device struct {
	specs.LinuxDevice
	Access string
}

// WithDevices adds each device node of ds with its cgroup allow rule, in one pass over the
// spec's lists, replacing a node at the same (cleaned) path and an identical rule. The rule
// names type, major and minor: never a wildcard.
func WithDevices(ds ...Device) SpecOpt {
	return func(s *specs.Spec) error {
		if len(ds) == 0 {
			return nil
		}
		rules := make([]specs.LinuxDeviceCgroup, len(ds))
		paths := make([]string, len(ds))
		ruleKeys := make([]string, len(ds))
		nodes := make([]specs.LinuxDevice, len(ds))
		for i, d := range ds {
			if d.Path == "" || !filepath.IsAbs(d.Path) {
				return fmt.Errorf("add device %q: path must be absolute", d.Path)
			}
			if d.Type != "c" && d.Type != "b" {
				return fmt.Errorf("add device %s: type %q is not c or b", d.Path, d.Type)
			}
			major, minor := d.Major, d.Minor
			rules[i] = specs.LinuxDeviceCgroup{Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: cmp.Or(d.Access, "rwm")}
			paths[i], ruleKeys[i], nodes[i] = filepath.Clean(d.Path), ruleKey(rules[i]), d.LinuxDevice
		}
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		// Paths compare cleaned: an existing /dev//nvidia1 is the node at /dev/nvidia1, and
		// left beside ours it would decide what the container's /dev/nvidia1 is.
		s.Linux.Devices = replaceAll(s.Linux.Devices, nodes, paths, func(d specs.LinuxDevice) string { return filepath.Clean(d.Path) })
		s.Linux.Resources.Devices = replaceAll(s.Linux.Resources.Devices, rules, ruleKeys, ruleKey)
		return nil
	}
}

// replaceAll returns list with every element whose key is among keys removed, then the
// added elements appended, each only at its last occurrence: what removing and appending
// them one at a time gives. key returns "" for an element that matches nothing.
func replaceAll[T any](list, added []T, keys []string, key func(T) string) []T {
	last := make(map[string]int, len(keys))
	for i, k := range keys {
		last[k] = i
	}
	out := make([]T, 0, len(list)+len(added))
	for _, e := range list {
		k := key(e)
		if _, replaced := last[k]; k == "" || !replaced {
			out = append(out, e)
		}
	}
	for i, e := range added {
		if last[keys[i]] == i {
			out = append(out, e)
		}
	}
	return out
}

// ruleKey identifies a cgroup device rule that names its major and minor; "" for one that
// does not (it is never replaced).
func ruleKey(r specs.LinuxDeviceCgroup) string {
	if r.Major == nil || r.Minor == nil {
		return ""
	}
	return fmt.Sprintf("%t %s %s %d:%d", r.Allow, r.Type, r.Access, *r.Major, *r.Minor)
}

// WithMounts adds each mount of ms in turn, replacing any mount at the same destination, in
// one pass over the spec's mounts.
func WithMounts(ms ...specs.Mount) SpecOpt {
	return func(s *specs.Spec) error {
		keys := make([]string, len(ms))
		for i, m := range ms {
			if !filepath.IsAbs(m.Destination) || (m.Type == "bind" || m.Type == "") && !filepath.IsAbs(m.Source) {
				return fmt.Errorf("add mount %s -> %s: source and destination must be absolute", m.Source, m.Destination)
			}
			keys[i] = filepath.Clean(m.Destination)
		}
		if len(ms) == 0 {
			return nil
		}
		s.Mounts = replaceAll(s.Mounts, ms, keys, func(m specs.Mount) string { return filepath.Clean(m.Destination) })
		return nil
	}
}

// The hook stages.
const (
	StagePrestart        = "prestart"
	StageCreateRuntime   = "createRuntime"
	StageCreateContainer = "createContainer"
	StageStartContainer  = "startContainer"
	StagePoststart       = "poststart"
	StagePoststop        = "poststop"
)

// Stages are the hook stages, in the order of HookLists.
var Stages = []string{StagePrestart, StageCreateRuntime, StageCreateContainer, StageStartContainer, StagePoststart, StagePoststop}

// HookLists returns every stage's list of h, in the order of Stages.
func HookLists(h *specs.Hooks) []*[]specs.Hook {
	return []*[]specs.Hook{&h.Prestart, &h.CreateRuntime, &h.CreateContainer, &h.StartContainer, &h.Poststart, &h.Poststop} //nolint:staticcheck // prestart is deprecated but still what engines use
}

// WithHook adds a hook to a stage unless an identical one is there: two different hooks of
// one program (a CDI spec's, one per device) both stay. The hook must have an absolute path
// and a non-empty env: a hook without env inherits the container's environment.
func WithHook(stage string, h specs.Hook) SpecOpt {
	return func(s *specs.Spec) error {
		if !filepath.IsAbs(h.Path) {
			return fmt.Errorf("add %s hook %q: path must be absolute", stage, h.Path)
		}
		if len(h.Env) == 0 {
			return fmt.Errorf("add %s hook %s: env must not be empty", stage, h.Path)
		}
		i := slices.Index(Stages, stage)
		if i < 0 {
			return fmt.Errorf("unknown hook stage %q", stage)
		}
		if s.Hooks == nil {
			s.Hooks = &specs.Hooks{}
		}
		list := HookLists(s.Hooks)[i]
		if !slices.ContainsFunc(*list, func(e specs.Hook) bool { return reflect.DeepEqual(e, h) }) {
			*list = append(*list, h)
		}
		return nil
	}
}

// WithoutHooksNamed removes, from every stage, hooks whose executable's base name (path or
// argv[0]) is name.
func WithoutHooksNamed(name string) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Hooks == nil {
			return nil
		}
		for _, list := range HookLists(s.Hooks) {
			*list = slices.DeleteFunc(*list, func(h specs.Hook) bool { return hookNamed(h, name) })
			if len(*list) == 0 {
				*list = nil
			}
		}
		if reflect.ValueOf(*s.Hooks).IsZero() {
			s.Hooks = nil
		}
		return nil
	}
}

// HasHookNamed reports whether any stage of s runs an executable called name.
func HasHookNamed(s *specs.Spec, name string) bool {
	if s.Hooks == nil {
		return false
	}
	return slices.ContainsFunc(HookLists(s.Hooks), func(list *[]specs.Hook) bool {
		return slices.ContainsFunc(*list, func(h specs.Hook) bool { return hookNamed(h, name) })
	})
}

// HasUserNamespace reports whether a spec's linux section (nil for none) has a user namespace.
func HasUserNamespace(l *specs.Linux) bool {
	return l != nil && slices.ContainsFunc(l.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.UserNamespace })
}

// hookNamed reports whether a hook runs an executable called name.
func hookNamed(h specs.Hook, name string) bool {
	return filepath.Base(h.Path) == name || len(h.Args) > 0 && filepath.Base(h.Args[0]) == name
}

// envKey is the name of a "KEY=value" entry.
func envKey(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k
}

// WithoutEnv removes the container's variables of each name; a name ending in "*" is a prefix
// ("CUDA_MPS_*").
func WithoutEnv(names ...string) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Process == nil || len(names) == 0 {
			return nil
		}
		s.Process.Env = slices.DeleteFunc(s.Process.Env, func(e string) bool {
			k := envKey(e)
			return slices.ContainsFunc(names, func(n string) bool {
				prefix, isPrefix := strings.CutSuffix(n, "*")
				return isPrefix && strings.HasPrefix(k, prefix) || k == n
			})
		})
		return nil
	}
}

// WithEnv sets process environment variables ("KEY=value"), replacing existing entries.
func WithEnv(kvs ...string) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		for _, kv := range kvs {
			key, _, ok := strings.Cut(kv, "=")
			if !ok || key == "" {
				return fmt.Errorf("set env %q: want KEY=value", kv)
			}
			s.Process.Env = append(slices.DeleteFunc(s.Process.Env, func(e string) bool { return envKey(e) == key }), kv)
		}
		return nil
	}
}

// WithAdditionalGIDs adds groups to the process's additional groups, each once; 0 is skipped,
// as the CDI library skips it (the process's primary group is its own).
func WithAdditionalGIDs(gids ...uint32) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		for _, g := range gids {
			if g != 0 && !slices.Contains(s.Process.User.AdditionalGids, g) {
				s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, g)
			}
		}
		return nil
	}
}

// WithAnnotations sets annotations in the spec.
func WithAnnotations(a map[string]string) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		maps.Copy(s.Annotations, a)
		return nil
	}
}

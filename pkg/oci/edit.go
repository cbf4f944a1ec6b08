package oci

import (
	"fmt"
	"path/filepath"
	"reflect"
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

// WithDevice adds a device node and its cgroup allow rule together. An existing node at the
// same path and an identical rule are replaced. The rule names type, major and minor
// explicitly: a wildcard rule is never produced.
func WithDevice(d specs.LinuxDevice) SpecOpt {
	return func(s *specs.Spec) error {
		if d.Path == "" || !filepath.IsAbs(d.Path) {
			return fmt.Errorf("add device %q: path must be absolute", d.Path)
		}
		if d.Type != "c" && d.Type != "b" {
			return fmt.Errorf("add device %s: type %q is not c or b", d.Path, d.Type)
		}
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		devices := s.Linux.Devices[:0:0]
		for _, existing := range s.Linux.Devices {
			if existing.Path != d.Path {
				devices = append(devices, existing)
			}
		}
		s.Linux.Devices = append(devices, d)

		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		major, minor := d.Major, d.Minor
		rule := specs.LinuxDeviceCgroup{Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: "rwm"}
		rules := s.Linux.Resources.Devices[:0:0]
		for _, r := range s.Linux.Resources.Devices {
			if !sameRule(r, rule) {
				rules = append(rules, r)
			}
		}
		s.Linux.Resources.Devices = append(rules, rule)
		return nil
	}
}

func sameRule(a, b specs.LinuxDeviceCgroup) bool {
	return a.Allow == b.Allow && a.Type == b.Type && a.Access == b.Access &&
		a.Major != nil && b.Major != nil && *a.Major == *b.Major &&
		a.Minor != nil && b.Minor != nil && *a.Minor == *b.Minor
}

// WithMount adds a mount, replacing any mount at the same destination.
func WithMount(m specs.Mount) SpecOpt {
	return func(s *specs.Spec) error {
		if !filepath.IsAbs(m.Destination) || !filepath.IsAbs(m.Source) {
			return fmt.Errorf("add mount %s -> %s: source and destination must be absolute", m.Source, m.Destination)
		}
		mounts := s.Mounts[:0:0]
		for _, existing := range s.Mounts {
			if filepath.Clean(existing.Destination) != filepath.Clean(m.Destination) {
				mounts = append(mounts, existing)
			}
		}
		s.Mounts = append(mounts, m)
		return nil
	}
}

// Hook stages gpu-runtime writes.
const (
	StagePrestart        = "prestart"
	StageCreateRuntime   = "createRuntime"
	StageCreateContainer = "createContainer"
	StageStartContainer  = "startContainer"
	StagePoststart       = "poststart"
	StagePoststop        = "poststop"
)

func stageList(h *specs.Hooks, stage string) (*[]specs.Hook, error) {
	switch stage {
	case StagePrestart:
		return &h.Prestart, nil //nolint:staticcheck // prestart is deprecated but still what engines use
	case StageCreateRuntime:
		return &h.CreateRuntime, nil
	case StageCreateContainer:
		return &h.CreateContainer, nil
	case StageStartContainer:
		return &h.StartContainer, nil
	case StagePoststart:
		return &h.Poststart, nil
	case StagePoststop:
		return &h.Poststop, nil
	}
	return nil, fmt.Errorf("unknown hook stage %q", stage)
}

// WithHook adds a hook to a stage, replacing hooks of that stage with the same path and
// first argument after argv[0] (the hook's subcommand). The hook must have an absolute path
// and a non-empty env: a hook without env inherits the container's environment.
func WithHook(stage string, h specs.Hook) SpecOpt {
	return func(s *specs.Spec) error {
		if !filepath.IsAbs(h.Path) {
			return fmt.Errorf("add %s hook %q: path must be absolute", stage, h.Path)
		}
		if len(h.Env) == 0 {
			return fmt.Errorf("add %s hook %s: env must not be empty", stage, h.Path)
		}
		if s.Hooks == nil {
			s.Hooks = &specs.Hooks{}
		}
		list, err := stageList(s.Hooks, stage)
		if err != nil {
			return err
		}
		kept := (*list)[:0:0]
		for _, existing := range *list {
			if !(existing.Path == h.Path && subcommand(existing) == subcommand(h)) {
				kept = append(kept, existing)
			}
		}
		*list = append(kept, h)
		return nil
	}
}

func subcommand(h specs.Hook) string {
	if len(h.Args) > 1 {
		return h.Args[1]
	}
	return ""
}

// WithoutHooksNamed removes, from every stage, hooks whose executable's base name (path or
// argv[0]) is name.
func WithoutHooksNamed(name string) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Hooks == nil {
			return nil
		}
		for _, stage := range []string{StagePrestart, StageCreateRuntime, StageCreateContainer, StageStartContainer, StagePoststart, StagePoststop} {
			list, _ := stageList(s.Hooks, stage)
			kept := (*list)[:0:0]
			for _, h := range *list {
				if !HookNamed(h, name) {
					kept = append(kept, h)
				}
			}
			if len(kept) == 0 {
				kept = nil
			}
			*list = kept
		}
		if reflect.ValueOf(*s.Hooks).IsZero() {
			s.Hooks = nil
		}
		return nil
	}
}

// HookNamed reports whether a hook runs an executable called name.
func HookNamed(h specs.Hook, name string) bool {
	if filepath.Base(h.Path) == name {
		return true
	}
	return len(h.Args) > 0 && filepath.Base(h.Args[0]) == name
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
			env := s.Process.Env[:0:0]
			for _, e := range s.Process.Env {
				if k, _, _ := strings.Cut(e, "="); k != key {
					env = append(env, e)
				}
			}
			s.Process.Env = append(env, kv)
		}
		return nil
	}
}

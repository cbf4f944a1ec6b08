// Package cdi is gpu-runtime's side of the Container Device Interface (reference §10),
// built on tags.cncf.io/container-device-interface: it resolves and applies CDI devices for a
// create (Resolver, used by gpu-ctk on gpu-runtime's behalf) and writes a CDI spec for this
// host from the same plan the runtime injects (Generate). Only gpu-ctk links it: the library
// is kept out of gpu-runtime's every start.
package cdi

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/internal/runtime"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// ErrUnresolvable marks CDI devices no spec in the spec directories defines.
var ErrUnresolvable = errors.New("unresolvable CDI devices")

// Resolver resolves CDI device names from the specs in a list of directories.
type Resolver struct {
	cache *cdi.Cache
	dirs  []string
}

// NewResolver reads the specs of dirs (later directories take precedence, as in the CDI
// library). Specs that do not load are reported by Resolve's error when a device is missing.
func NewResolver(dirs []string) (*Resolver, error) {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil && c == nil {
		return nil, fmt.Errorf("read CDI specs in %s: %w", strings.Join(dirs, ", "), err)
	}
	return &Resolver{cache: c, dirs: dirs}, nil
}

// Devices lists the qualified names of every device the specs define, sorted.
func (r *Resolver) Devices() []string {
	names := r.cache.ListDevices()
	sort.Strings(names)
	return names
}

// Problems lists, per spec file, why it did not load.
func (r *Resolver) Problems() []string {
	var out []string
	for path, errs := range r.cache.GetErrors() {
		for _, err := range errs {
			out = append(out, fmt.Sprintf("%s: %v", path, err))
		}
	}
	sort.Strings(out)
	return out
}

// Resolve implements runtime.CDI: names, then those the cdi.k8s.io/ annotations name, each
// once; every one must resolve before anything is applied.
func (r *Resolver) Resolve(names []string, annotations map[string]string) (runtime.CDIDevices, error) {
	if len(annotations) > 0 {
		_, annotated, err := cdi.ParseAnnotations(annotations)
		if err != nil {
			return nil, fmt.Errorf("CDI annotations: %w", err)
		}
		sort.Strings(annotated) // map order: keep the result stable
		names = append(append([]string(nil), names...), annotated...)
	}
	var d devices
	seen := map[string]bool{}
	var unresolved []string
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		dev := r.cache.GetDevice(n)
		if dev == nil {
			unresolved = append(unresolved, n)
			continue
		}
		d.names = append(d.names, n)
		d.devices = append(d.devices, dev)
	}
	if len(unresolved) > 0 {
		return nil, r.unresolvable(unresolved)
	}
	d.cache = r.cache
	return d, nil
}

// unresolvable says which names did not resolve, what the specs offer, and which specs did
// not load.
func (r *Resolver) unresolvable(names []string) error {
	offer := "offer no devices"
	if all := r.Devices(); len(all) > 0 {
		offer = "offer " + quote.Join(all, 20)
	}
	msg := fmt.Sprintf("%s: the CDI specs in %s %s; generate a spec for this host with gpu-ctk cdi generate --output /etc/cdi/nvidia.yaml",
		quote.List(names), strings.Join(r.dirs, ", "), offer)
	if p := r.Problems(); len(p) > 0 {
		msg += "; specs that did not load: " + strings.Join(p, "; ")
	}
	return fmt.Errorf("%w %s", ErrUnresolvable, msg)
}

// devices are resolved CDI devices.
type devices struct {
	cache   *cdi.Cache
	names   []string
	devices []*cdi.Device
}

func (d devices) Names() []string { return d.names }

// DeviceNodes lists the container paths of the nodes the devices and their specs inject.
func (d devices) DeviceNodes() []string {
	var out []string
	specSeen := map[*cdi.Spec]bool{}
	for _, dev := range d.devices {
		for _, n := range dev.ContainerEdits.DeviceNodes {
			out = append(out, n.Path)
		}
		if s := dev.GetSpec(); !specSeen[s] {
			specSeen[s] = true
			for _, n := range s.ContainerEdits.DeviceNodes {
				out = append(out, n.Path)
			}
		}
	}
	return out
}

// NodesOf lists the container paths of the nodes one of the devices injects, with those of
// its spec's common edits (injected with it).
func (d devices) NodesOf(name string) []string {
	var out []string
	for i, dev := range d.devices {
		if d.names[i] != name {
			continue
		}
		for _, n := range dev.ContainerEdits.DeviceNodes {
			out = append(out, n.Path)
		}
		for _, n := range dev.GetSpec().ContainerEdits.DeviceNodes {
			out = append(out, n.Path)
		}
	}
	return out
}

// Apply injects the devices with the CDI library: each spec's common edits once, then the
// devices' own.
func (d devices) Apply(spec *specs.Spec) error {
	if _, err := d.cache.InjectDevices(spec, d.names...); err != nil {
		return err
	}
	return nil
}

// Edits describes what the devices inject in gpu-runtime's model, for people (gpu-ctk
// explain): each spec's common edits once, then each device's, applied by the CDI library to
// an empty spec (so node numbers are filled in from the host as Apply fills them), every edit
// saying which spec or device brought it.
func (d devices) Edits() (edits.Edits, error) {
	var out edits.Edits
	specSeen := map[*cdi.Spec]bool{}
	for i, dev := range d.devices {
		if s := dev.GetSpec(); !specSeen[s] {
			specSeen[s] = true
			e, err := editsOf(s.ApplyEdits, fmt.Sprintf("CDI spec %s (kind %s): common edits", s.GetPath(), s.GetVendor()+"/"+s.GetClass()))
			if err != nil {
				return out, err
			}
			out.Add(e)
		}
		e, err := editsOf(dev.ApplyEdits, "CDI device "+d.names[i])
		if err != nil {
			return out, err
		}
		out.Add(e)
	}
	return out, nil
}

// editsOf applies one set of CDI edits to an empty spec and reads them back.
func editsOf(apply func(*specs.Spec) error, why string) (edits.Edits, error) {
	s := &specs.Spec{Process: &specs.Process{}}
	if err := apply(s); err != nil {
		return edits.Edits{}, fmt.Errorf("%s: %w", why, err)
	}
	var e edits.Edits
	e.Env = s.Process.Env
	if s.Linux != nil {
		for _, n := range s.Linux.Devices {
			node := edits.DeviceNode{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, Why: why}
			if n.FileMode != nil {
				node.FileMode = *n.FileMode
			}
			if n.UID != nil {
				node.UID = *n.UID
			}
			if n.GID != nil {
				node.GID = *n.GID
			}
			e.DeviceNodes = append(e.DeviceNodes, node)
		}
	}
	for _, m := range s.Mounts {
		e.Mounts = append(e.Mounts, edits.Mount{HostPath: m.Source, ContainerPath: m.Destination, Options: m.Options, Why: why})
	}
	if s.Hooks != nil {
		for _, stage := range []struct {
			name  string
			hooks []specs.Hook
		}{{oci.StagePrestart, s.Hooks.Prestart}, //nolint:staticcheck // a CDI spec may still name the deprecated stage
			{oci.StageCreateRuntime, s.Hooks.CreateRuntime}, {oci.StageCreateContainer, s.Hooks.CreateContainer},
			{oci.StageStartContainer, s.Hooks.StartContainer}, {oci.StagePoststart, s.Hooks.Poststart}, {oci.StagePoststop, s.Hooks.Poststop}} {
			for _, h := range stage.hooks {
				hook := edits.Hook{Stage: stage.name, Path: h.Path, Args: h.Args, Env: h.Env, Why: why}
				if h.Timeout != nil {
					hook.Timeout = *h.Timeout
				}
				e.Hooks = append(e.Hooks, hook)
			}
		}
	}
	return e, nil
}

package cdi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"go.yaml.in/yaml/v3"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specsgo "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// DefaultKind is the kind of the spec Generate writes.
const DefaultKind = "nvidia.com/gpu"

// Device name strategies: what a device entry is named after.
const (
	NameIndex = "index" // "0", "0:1"
	NameUUID  = "uuid"  // "GPU-…", "MIG-…"
	NameBoth  = "both"
)

// AllDevice names the entry that holds every device, as NVIDIA_VISIBLE_DEVICES=all.
const AllDevice = "all"

// GenerateOptions say what spec Generate writes.
type GenerateOptions struct {
	Kind         string           // vendor.com/class; DefaultKind when empty
	NameStrategy string           // NameIndex, NameUUID or NameBoth (the default)
	Capabilities capabilities.Set // whose driver files the spec carries; every one when nil
}

// Generate writes the CDI spec of a host from the plan the runtime injects: the spec's
// common edits are plan.Common (control nodes, the capabilities' driver files, the
// loader-cache hook), each device entry a plan.Device's edits (a whole GPU not in MIG mode,
// or a MIG device: a GPU in MIG mode has no entry of its own), named by index and/or UUID,
// and "all" holds every device. cdiVersion is the lowest version that can express the spec.
// The spec is validated by the CDI library.
func Generate(host plan.Host, r plan.Render, o GenerateOptions) (*specsgo.Spec, []string, error) {
	strategy := cmp.Or(o.NameStrategy, NameBoth)
	var named []NamedDevice
	for _, d := range plan.Devices(host.Driver.GPUs) {
		names := map[string][]string{NameIndex: {d.Index}, NameUUID: {d.UUID}, NameBoth: {d.Index, d.UUID}}[strategy]
		if names == nil {
			return nil, nil, fmt.Errorf("--device-name-strategy %q: want %s, %s or %s", o.NameStrategy, NameIndex, NameUUID, NameBoth)
		}
		for _, n := range names {
			named = append(named, NamedDevice{Name: n, Device: d})
		}
	}
	return generate(host, r, cmp.Or(o.Kind, DefaultKind), o.Capabilities, named, true, "", config.MPSConfig{})
}

// NamedDevice is a device entry of a spec: its name and the device it injects.
type NamedDevice struct {
	Name   string
	Device plan.Device
	// Share, when set, is the MPS share of a Kubernetes claim the device joins: the device
	// gets its client view, shared memory and limits (plan.ClaimShareEdits) and the spec none
	// of the driver's MPS programs.
	Share *plan.ClaimShare
}

// DevicesOptions say what spec GenerateDevices writes.
type DevicesOptions struct {
	Kind         string           // vendor.com/class
	Capabilities capabilities.Set // whose driver files the spec carries; every one when nil
	// ScratchDir is where the spec is written to be validated as a consumer reads it (then
	// removed): "" is the system's temporary directory.
	ScratchDir string
	// MPS is where the devices' shares (NamedDevice.Share) are.
	MPS config.MPSConfig
}

// GenerateDevices writes a spec with exactly the devices given, by the same plan as Generate
// — common edits plan.Common with the loader-cache hook, each entry its device's edits — and
// no "all" entry: the spec of one Kubernetes ResourceClaim (gpu-kubelet-plugin), whose
// entries are named after the claim.
func GenerateDevices(host plan.Host, r plan.Render, o DevicesOptions, devices []NamedDevice) (*specsgo.Spec, []string, error) {
	return generate(host, r, o.Kind, o.Capabilities, devices, false, o.ScratchDir, o.MPS)
}

// generate writes the spec of kind with the devices named, and with all an "all" entry that
// holds every one; caps nil means every capability; scratch is where it is validated.
func generate(host plan.Host, r plan.Render, kind string, caps capabilities.Set, named []NamedDevice, all bool, scratch string, mps config.MPSConfig) (*specsgo.Spec, []string, error) {
	if err := validateKind(kind); err != nil {
		return nil, nil, err
	}
	if caps == nil {
		caps = capabilities.Everything()
	}
	common, libs, warnings, err := plan.Common(caps, host)
	if err != nil {
		return nil, warnings, err
	}
	if slices.ContainsFunc(named, func(n NamedDevice) bool { return n.Share != nil }) {
		common.Mounts = plan.WithoutMPSPrograms(common.Mounts)
	}
	// The loader-cache update runs in the low-level runtime's lifecycle: CDI-native engines
	// have no gpu-runtime to do it at create.
	common = plan.Plan{Edits: common, LoaderCache: plan.LoaderCache{Libraries: libs, DriverVersion: host.Driver.Version}}.Rendered(r)
	spec := &specsgo.Spec{Kind: kind, ContainerEdits: containerEdits(common, r)}
	var every edits.Edits
	added := map[string]bool{} // by UUID: a device named twice is in "all" once
	for _, n := range named {
		e, err := n.Device.Edits(host)
		if err != nil {
			return nil, warnings, err
		}
		if n.Share != nil {
			e.Add(plan.ClaimShareEdits(*n.Share, mps))
		}
		if !added[n.Device.UUID] {
			every.Add(e)
			added[n.Device.UUID] = true
		}
		spec.Devices = append(spec.Devices, specsgo.Device{Name: n.Name, ContainerEdits: containerEdits(e, r)})
	}
	if all {
		spec.Devices = append(spec.Devices, specsgo.Device{Name: AllDevice, ContainerEdits: containerEdits(every, r)})
	}
	if spec.Version, err = specsgo.MinimumRequiredVersion(spec); err != nil {
		return nil, warnings, fmt.Errorf("CDI version of the spec: %w", err)
	}
	if err := ValidateIn(spec, scratch); err != nil {
		return nil, warnings, err
	}
	return spec, warnings, nil
}

// validateKind checks a kind is vendor.com/class.
func validateKind(kind string) error {
	vendor, class := parser.ParseQualifier(kind)
	if vendor == "" || class == "" {
		return fmt.Errorf("--kind %q: want vendor.com/class, such as %s", kind, DefaultKind)
	}
	if err := cmp.Or(parser.ValidateVendorName(vendor), parser.ValidateClassName(class)); err != nil {
		return fmt.Errorf("--kind %q: %w", kind, err)
	}
	return nil
}

// Marshal writes a spec as YAML (with the document marker the CDI library writes) or JSON.
func Marshal(spec *specsgo.Spec, format string) ([]byte, error) {
	switch format {
	case "yaml", "":
		data, err := yaml.Marshal(spec)
		if err != nil {
			return nil, fmt.Errorf("encode CDI spec: %w", err)
		}
		return append([]byte("---\n"), data...), nil
	case "json":
		data, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode CDI spec: %w", err)
		}
		return append(data, '\n'), nil
	}
	return nil, fmt.Errorf("--format %q: want yaml or json", format)
}

// containerEdits writes edits in the CDI spec's shape. MIG capabilities of a driver's /proc
// interface become the gpu-hook proc-caps hook that grants them.
func containerEdits(e edits.Edits, r plan.Render) specsgo.ContainerEdits {
	var out specsgo.ContainerEdits
	out.Env = e.Env
	for _, n := range e.DeviceNodes {
		out.DeviceNodes = append(out.DeviceNodes, &specsgo.DeviceNode{Path: n.Path, HostPath: n.HostPath, Type: n.Type,
			Major: n.Major, Minor: n.Minor, FileMode: &n.FileMode, UID: &n.UID, GID: &n.GID})
	}
	for _, m := range e.Mounts {
		out.Mounts = append(out.Mounts, &specsgo.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: "bind", Options: m.Options})
	}
	hooks := e.Hooks
	if len(e.ProcCaps) > 0 {
		hooks = append(hooks, r.ProcCapsHook(e.ProcCaps))
	}
	for _, l := range e.MemoryLimits {
		hooks = append(hooks, r.MemoryLimitHooks(l)...)
	}
	for _, h := range hooks {
		hook := &specsgo.Hook{HookName: h.Stage, Path: h.Path, Args: h.Args, Env: h.Env}
		if h.Timeout > 0 {
			hook.Timeout = &h.Timeout
		}
		out.Hooks = append(out.Hooks, hook)
	}
	return out
}

// Validate checks a spec as a CDI consumer reading it would (the library's own validation,
// through a file, as consumers read specs), in the system's temporary directory.
func Validate(spec *specsgo.Spec) error { return ValidateIn(spec, "") }

// ValidateIn is Validate with the file written under dir ("": the system's temporary
// directory) and removed.
func ValidateIn(spec *specsgo.Spec, dir string) error {
	data, err := Marshal(spec, "json")
	if err != nil {
		return err
	}
	dir, err = os.MkdirTemp(dir, "gpu-ctk-cdi-")
	if err != nil {
		return fmt.Errorf("validate CDI spec: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return fmt.Errorf("validate CDI spec: %w", err)
	}
	if _, err := cdi.ReadSpec(p, 0); err != nil {
		return fmt.Errorf("the CDI library refuses the spec: %w", err)
	}
	return nil
}

// FeatureKind is the kind of a DGX/HGX feature's spec, as NVIDIA's nvidia-ctk cdi generate
// --mode names it: nvidia.com/gds, nvidia.com/mofed, nvidia.com/gdrcopy, nvidia.com/nvswitch.
func FeatureKind(f request.Feature) string { return "nvidia.com/" + string(f) }

// GenerateFeature writes the CDI spec of a DGX/HGX feature on a host, as NVIDIA's gated
// specs: one device, "all", with every node of the feature the host has (plan.FeatureNodes,
// the nodes NVIDIA_GDS=enabled and the like inject), and no common edits. A host without the
// feature's nodes has no spec: the error says how it gets them.
func GenerateFeature(host plan.Host, f request.Feature, kind string) (*specsgo.Spec, error) {
	kind = cmp.Or(kind, FeatureKind(f))
	if err := validateKind(kind); err != nil {
		return nil, err
	}
	nodes, err := plan.FeatureNodes(f, host, "")
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("--mode %s: %s", f, plan.FeatureMissing(f, host.Devices.Root, "no spec written"))
	}
	spec := &specsgo.Spec{Kind: kind, Devices: []specsgo.Device{{Name: AllDevice,
		ContainerEdits: containerEdits(edits.Edits{DeviceNodes: nodes}, plan.Render{})}}}
	if spec.Version, err = specsgo.MinimumRequiredVersion(spec); err != nil {
		return nil, fmt.Errorf("CDI version of the spec: %w", err)
	}
	if err := Validate(spec); err != nil {
		return nil, err
	}
	return spec, nil
}

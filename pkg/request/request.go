// Package request reads what a container asks for — which GPUs, which driver capabilities,
// which driver requirements — from its OCI process environment. The container's
// environment is attacker input: this package only parses it into plain values and never acts
// on it.
package request

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// Environment variable names read from the container.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCapabilities   = "NVIDIA_DRIVER_CAPABILITIES"
	EnvRequirePrefix  = "NVIDIA_REQUIRE_"
	EnvRequireCUDA    = "NVIDIA_REQUIRE_CUDA"
	EnvDisableRequire = "NVIDIA_DISABLE_REQUIRE"
	EnvCUDAVersion    = "CUDA_VERSION"
	EnvIMEXChannels   = "NVIDIA_IMEX_CHANNELS"
	EnvMIGConfig      = "NVIDIA_MIG_CONFIG_DEVICES"
	EnvMIGMonitor     = "NVIDIA_MIG_MONITOR_DEVICES"
	EnvMPSShare       = "NVIDIA_MPS_SHARE"
)

// MaxIMEXChannel is the highest IMEX channel number.
const MaxIMEXChannel = 2047

// Mode says how NVIDIA_VISIBLE_DEVICES selected devices.
type Mode int

// The device selection modes.
const (
	// NoGPU: not a GPU container; the spec is left alone.
	NoGPU Mode = iota
	// AllGPUs: every GPU of the host.
	AllGPUs
	// NoDevices: a GPU container with driver files and control nodes but no GPU.
	NoDevices
	// DeviceList: the GPUs named in Request.Devices, in order.
	DeviceList
)

// ErrInvalid marks a malformed request.
var ErrInvalid = errors.New("invalid GPU request")

// Request is what a container asks for.
type Request struct {
	Mode    Mode
	Devices []string // DeviceList only: the tokens as written (indices, UUIDs, MIG names)
	// CDIDevices are fully qualified CDI device names (vendor.com/class=name) asked for in
	// NVIDIA_VISIBLE_DEVICES or by volume mount, in order; CDIAnnotations the cdi.k8s.io/
	// annotations of the spec, still to be parsed (by the CDI library).
	CDIDevices     []string
	CDIAnnotations map[string]string
	Capabilities   capabilities.Set
	// Requirements holds each NVIDIA_REQUIRE_* expression (NVIDIA_REQUIRE_JETPACK* excluded),
	// sorted by variable name, and for a legacy CUDA image the implied cuda>= requirement.
	Requirements   []requirements.Requirement
	DisableRequire bool
	// Legacy is set for a legacy CUDA image: CUDA_VERSION set and NVIDIA_REQUIRE_CUDA empty.
	Legacy bool
	// IMEXChannels are the IMEX channel numbers asked for; AllIMEXChannels asks for every one.
	IMEXChannels    []int
	AllIMEXChannels bool
	// MIGConfig and MIGMonitor are NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES = all.
	MIGConfig  bool
	MIGMonitor bool
	// MPSShare is the MPS share ([mps.shares.<name>]) the container joins: it gets the
	// share's GPUs (NVIDIA_VISIBLE_DEVICES=all means them), pipe directory and shared memory.
	MPSShare string
	// UID is the user the container's process runs as (an MPS share serves one).
	UID uint32
	// DockerGPUs says the spec carries docker's --gpus hook: NVIDIA_VISIBLE_DEVICES was then
	// written by docker from the flag (--gpus 3 becomes 0,1,2), and errors name the flag.
	DockerGPUs bool
	// Features are the DGX/HGX device sets enabled (NVIDIA_GDS=enabled, …), in Features'
	// order; FeatureNotes say which feature variable had a value other than "enabled".
	Features     []Feature
	FeatureNotes []string
}

// IsGPU reports whether the container asked for GPU injection at all.
func (r Request) IsGPU() bool { return r.Mode != NoGPU || r.WantsCDI() }

// NativeDevices reports whether the container asked for devices gpu-runtime resolves itself
// (not only CDI devices): a device list with tokens of its own, all, none, or an MPS share.
func (r Request) NativeDevices() bool {
	return r.Mode != NoGPU && !(r.Mode == DeviceList && len(r.Devices) == 0)
}

// WantsCDI reports whether the container asked for CDI devices (by name or annotation).
func (r Request) WantsCDI() bool { return len(r.CDIDevices) > 0 || len(r.CDIAnnotations) > 0 }

// ChecksRequirements reports whether the container's NVIDIA_REQUIRE_* are to be checked: it has
// some and did not set NVIDIA_DISABLE_REQUIRE.
func (r Request) ChecksRequirements() bool { return len(r.Requirements) > 0 && !r.DisableRequire }

// Env is a container environment with getenv semantics: for a variable listed more
// than once, the last entry wins (what docker and containerd produce when merging).
type Env map[string]string

// ParseEnv turns a "KEY=value" list into an Env. Entries without '=' are ignored.
func ParseEnv(list []string) Env {
	env := make(Env, len(list))
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			env[k] = v
		}
	}
	return env
}

// build reads a request whose device list is visible (set says whether the container
// named one at all); capabilities and requirements come from env.
func build(env Env, visible string, set bool) (Request, error) {
	var req Request

	_, hasCUDAVersion := env[EnvCUDAVersion]
	req.Legacy = hasCUDAVersion && env[EnvRequireCUDA] == ""

	switch {
	case !set && req.Legacy:
		req.Mode = AllGPUs
	case !set:
		return Request{Mode: NoGPU}, nil
	default:
		mode, devices, err := parseVisibleDevices(visible)
		if err != nil {
			return Request{}, err
		}
		if mode == NoGPU {
			return Request{Mode: NoGPU}, nil
		}
		req.Mode = mode
		for _, d := range devices {
			switch {
			case parser.IsQualifiedName(d):
				req.CDIDevices = append(req.CDIDevices, d)
			case strings.Contains(d, "/") && strings.Contains(d, "="): // meant as a CDI name
				_, _, _, err := parser.ParseQualifiedName(d)
				return Request{}, fmt.Errorf("%w: %s in %s is not a CDI device name (vendor.com/class=name): %w", ErrInvalid, quote.Value(d), EnvVisibleDevices, quote.Error(err))
			default:
				req.Devices = append(req.Devices, d)
			}
		}
	}

	capsValue, capsSet := env[EnvCapabilities]
	if req.Legacy && !capsSet {
		req.Capabilities = capabilities.Everything()
	} else {
		caps, err := capabilities.Parse(capsValue)
		if err != nil {
			return Request{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		req.Capabilities = caps
	}

	if err := parseIMEX(env[EnvIMEXChannels], &req); err != nil {
		return Request{}, err
	}
	for _, m := range []struct {
		name string
		dst  *bool
	}{{EnvMIGConfig, &req.MIGConfig}, {EnvMIGMonitor, &req.MIGMonitor}} {
		switch v := strings.TrimSpace(env[m.name]); v {
		case "", "none", "void":
		case "all":
			*m.dst = true
		default:
			return Request{}, fmt.Errorf("%w: %s: only \"all\" is supported", ErrInvalid, quote.Var(m.name, v))
		}
	}

	req.Features, req.FeatureNotes = parseFeatures(env)
	req.Requirements, req.DisableRequire = envRequirements(env)
	return req, nil
}

// parseIMEX reads NVIDIA_IMEX_CHANNELS: "all", "none"/"void"/empty, or channel numbers.
func parseIMEX(value string, req *Request) error {
	seen := map[int]bool{}
	for _, tok := range strings.Split(value, ",") {
		tok = strings.TrimSpace(tok)
		switch tok {
		case "", "none", "void":
			continue
		case "all":
			req.AllIMEXChannels = true
			continue
		}
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > MaxIMEXChannel || strconv.Itoa(n) != tok {
			return fmt.Errorf("%w: IMEX channel %s in %s: want a number from 0 to %d, or all", ErrInvalid, quote.Value(tok), quote.Var(EnvIMEXChannels, value), MaxIMEXChannel)
		}
		if !seen[n] {
			seen[n] = true
			req.IMEXChannels = append(req.IMEXChannels, n)
		}
	}
	if req.AllIMEXChannels {
		req.IMEXChannels = nil
	}
	return nil
}

// parseVisibleDevices implements the NVIDIA_VISIBLE_DEVICES rules: split on ',', trim,
// drop empty tokens; "void" alone → not a GPU container; "all" or "none" alone decide; else
// an ordered list without duplicates. all, none and void stand alone: a list that mixes one
// with anything (NVIDIA's "0,none" meant none, "all,void" no GPU container) is an error
// rather than a silent container without GPUs.
func parseVisibleDevices(value string) (Mode, []string, error) {
	var tokens []string
	for _, tok := range strings.Split(value, ",") {
		if tok = strings.TrimSpace(tok); tok != "" {
			tokens = append(tokens, tok)
		}
	}
	if len(tokens) == 0 {
		return NoGPU, nil, nil
	}
	alone := func(tok string) bool { return tok == "all" || tok == "none" || tok == "void" }
	if i := slices.IndexFunc(tokens, alone); i >= 0 && len(tokens) > 1 {
		return NoGPU, nil, fmt.Errorf("%w: %s: %q cannot be combined with other devices (all, none and void each stand alone)",
			ErrInvalid, quote.Var(EnvVisibleDevices, value), tokens[i])
	}
	switch tokens[0] {
	case "void":
		return NoGPU, nil, nil
	case "all":
		return AllGPUs, nil, nil
	case "none":
		return NoDevices, nil, nil
	}
	seen := make(map[string]bool, len(tokens))
	for _, tok := range tokens {
		if seen[tok] {
			return NoGPU, nil, fmt.Errorf("%w: device %s is listed twice in %s", ErrInvalid, quote.Value(tok), quote.Var(EnvVisibleDevices, value))
		}
		seen[tok] = true
	}
	return DeviceList, tokens, nil
}

// EnvRequirements returns the requirement checks a container environment carries and whether
// NVIDIA_DISABLE_REQUIRE turns them off, whether or not it asks for a GPU (gpu-ctk explain
// checks an image's requirements for a container that asks for none).
func EnvRequirements(env Env) ([]requirements.Requirement, bool) { return envRequirements(env) }

// envRequirements returns the requirement checks a container environment asks for — each
// NVIDIA_REQUIRE_* but NVIDIA_REQUIRE_JETPACK*, sorted by name, then a legacy CUDA image's
// implied rule (CUDA_VERSION=12.4.1 gives cuda>=12.4, named CUDA_VERSION) — and whether
// NVIDIA_DISABLE_REQUIRE turns them off.
func envRequirements(env Env) ([]requirements.Requirement, bool) {
	var reqs []requirements.Requirement
	for k, v := range env {
		if strings.HasPrefix(k, EnvRequirePrefix) && !strings.HasPrefix(k, "NVIDIA_REQUIRE_JETPACK") && strings.TrimSpace(v) != "" {
			reqs = append(reqs, requirements.Requirement{Name: k, Expression: v})
		}
	}
	slices.SortFunc(reqs, func(a, b requirements.Requirement) int { return strings.Compare(a.Name, b.Name) })
	if cuda, ok := env[EnvCUDAVersion]; ok && env[EnvRequireCUDA] == "" {
		parts := strings.SplitN(strings.TrimSpace(cuda), ".", 3)
		if len(parts) >= 2 && parts[0] != "" && parts[1] != "" {
			reqs = append(reqs, requirements.Requirement{Name: EnvCUDAVersion, Expression: "cuda>=" + parts[0] + "." + parts[1]})
		}
	}
	disabled, _ := strconv.ParseBool(env[EnvDisableRequire]) // anything but a true value: false
	return reqs, disabled
}

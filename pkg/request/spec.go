package request

import (
	"bytes"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// DockerHookName is the prestart hook dockerd adds for --gpus (moby daemon/nvidia_linux.go),
// and the executable dockerd must find on its PATH to accept --gpus at all. gpu-runtime
// honours the request it stands for through the spec and removes the entry.
const DockerHookName = "nvidia-container-runtime-hook"

// DeviceListMountDir is where a device plugin requests devices with /dev/null mounts:
// a mount of /dev/null at <DeviceListMountDir>/<device> asks for <device>.
const DeviceListMountDir = "/var/run/nvidia-container-devices"

// Policy says which request channels are honoured (config section [request]).
type Policy struct {
	// AcceptEnvWhenUnprivileged honours NVIDIA_VISIBLE_DEVICES from containers without
	// CAP_SYS_ADMIN in their bounding set.
	AcceptEnvWhenUnprivileged bool
	// AcceptVolumeMounts honours devices named by /dev/null mounts under DeviceListMountDir;
	// when present they replace NVIDIA_VISIBLE_DEVICES.
	AcceptVolumeMounts bool
}

// FromSpec reads a container's request from its spec under a policy. Warnings say which
// request was ignored and why.
func FromSpec(spec *specs.Spec, p Policy) (Request, []string, error) {
	var list []string
	if spec.Process != nil {
		list = spec.Process.Env
	}
	env, trusted := ParseEnv(list), p.AcceptEnvWhenUnprivileged || Privileged(spec)
	req, warnings, err := fromSpec(spec, p, env, trusted)
	if err != nil {
		return req, warnings, err
	}
	if spec.Process != nil {
		req.UID = spec.Process.User.UID
	}
	annotations := cdiAnnotations(spec.Annotations)
	if len(annotations) == 0 {
		return req, warnings, nil
	}
	if !trusted {
		// A tenant can write pod annotations: on a multi-tenant host they grant nothing.
		return req, append(warnings, "CDI annotations "+quote.List(slices.Sorted(maps.Keys(annotations)))+" ignored: "+untrusted), nil
	}
	req.CDIAnnotations = annotations
	if req.Mode == NoGPU { // asked for by annotations alone: its requirements still apply
		req.Requirements, req.DisableRequire = envRequirements(env)
	}
	return req, warnings, nil
}

// cdiAnnotations returns the annotations whose key starts with CDIAnnotationPrefix.
func cdiAnnotations(all map[string]string) map[string]string {
	out := maps.Clone(all)
	maps.DeleteFunc(out, func(k, _ string) bool { return !strings.HasPrefix(k, CDIAnnotationPrefix) })
	return out
}

// untrusted says why a request of an unprivileged container was ignored.
const untrusted = "the container is unprivileged and request.accept-envvar-when-unprivileged is false"

// fromSpec is FromSpec for the environment (env) and volume-mount channels; trusted says the
// container's own request is honoured.
func fromSpec(spec *specs.Spec, p Policy, env Env, trusted bool) (Request, []string, error) {
	if p.AcceptVolumeMounts {
		ids, share, err := volumeMounts(spec.Mounts)
		if err != nil {
			return Request{}, nil, err
		}
		if len(ids) > 0 || share != "" {
			var warnings []string
			if !trusted {
				// The devices come from the orchestrator; the container's own env may not
				// add IMEX channels or MIG access, so it is not even parsed.
				env, warnings = withoutEnvAccess(env)
			}
			devices := strings.Join(ids, ",")
			if len(ids) == 0 {
				devices = "all" // the share's GPUs
			}
			req, err := build(env, devices, true)
			if err == nil {
				err = migAccessAllowed(req, spec)
			}
			req.MPSShare = share
			return req, warnings, err
		}
	}
	visible, set := env[EnvVisibleDevices]
	if !trusted {
		if share := env[EnvMPSShare]; share != "" {
			return Request{Mode: NoGPU}, []string{quote.Var(EnvMPSShare, share) + " ignored: " + untrusted + "; no GPU injected"}, nil
		}
		if req, err := build(env, visible, set); err != nil || req.IsGPU() {
			return Request{Mode: NoGPU}, []string{quote.Var(EnvVisibleDevices, visible) + " ignored: " + untrusted + "; no GPU injected"}, nil
		}
		return Request{Mode: NoGPU}, nil, nil
	}
	share := strings.TrimSpace(env[EnvMPSShare])
	if share != "" && !set {
		visible, set = "all", true // the share's GPUs
	}
	req, err := build(env, visible, set)
	if err == nil {
		err = migAccessAllowed(req, spec)
	}
	if err == nil && share != "" {
		if req.Mode == NoGPU {
			return Request{}, nil, fmt.Errorf("%w: %s with %s: a share needs its GPUs; drop one of them",
				ErrInvalid, quote.Var(EnvMPSShare, share), quote.Var(EnvVisibleDevices, visible))
		}
		req.MPSShare = share
	}
	return req, nil, err
}

// MPSMountDir is where a device plugin names an MPS share: a /dev/null mount at
// <MPSMountDir>/<share>.
const MPSMountDir = DeviceListMountDir + "/mps"

// migAccessAllowed refuses MIG config or monitor access to a container without CAP_SYS_ADMIN
// in its bounding set: only MIG managers need it, and they run privileged.
func migAccessAllowed(req Request, spec *specs.Spec) error {
	if Privileged(spec) {
		return nil
	}
	for _, v := range []struct {
		asked bool
		name  string
	}{{req.MIGConfig, EnvMIGConfig}, {req.MIGMonitor, EnvMIGMonitor}} {
		if v.asked {
			return fmt.Errorf("%w: %s=all needs CAP_SYS_ADMIN in the container's bounding set: run the MIG manager privileged (docker run --cap-add SYS_ADMIN), or unset %s", ErrInvalid, v.name, v.name)
		}
	}
	return nil
}

// withoutEnvAccess returns env without the variables that grant access beyond the
// devices (IMEX channels, MIG config and monitor), and a warning when one asked for any.
func withoutEnvAccess(env Env) (Env, []string) {
	out := make(Env, len(env))
	asked := false
	var features []string // the DGX/HGX feature variables set to anything
	for k, v := range env {
		switch k {
		case EnvIMEXChannels, EnvMIGConfig, EnvMIGMonitor:
			switch strings.TrimSpace(v) {
			case "", "none", "void":
			default:
				asked = true
			}
		case EnvGDS, EnvMOFED, EnvGDRCopy, EnvNVSwitch:
			if strings.TrimSpace(v) != "" {
				features = append(features, quote.Var(k, v))
			}
		default:
			out[k] = v
		}
	}
	var warnings []string
	if asked {
		warnings = append(warnings, EnvIMEXChannels+", "+EnvMIGConfig+" and "+EnvMIGMonitor+" ignored: "+untrusted)
	}
	if len(features) > 0 {
		// Host devices beyond the GPUs (InfiniBand verbs, nvidia-fs) are the orchestrator's
		// to grant, as the GPUs are.
		slices.Sort(features)
		warnings = append(warnings, strings.Join(features, ", ")+" ignored: "+untrusted)
	}
	return out, warnings
}

// CDIAnnotationPrefix starts the annotation keys that name CDI devices (their values are
// comma-separated qualified names), as the Kubernetes device plugin writes them.
const CDIAnnotationPrefix = "cdi.k8s.io/"

// gpuMarkers are strings at least one of which any GPU request's spec contains.
var gpuMarkers = [][]byte{
	[]byte(EnvVisibleDevices), []byte(EnvCUDAVersion), []byte(DeviceListMountDir), []byte(DockerHookName),
	[]byte(CDIAnnotationPrefix), []byte(EnvMPSShare),
}

// MayRequestGPU is a fast pre-check on a raw config.json: false means the spec cannot ask
// for GPUs (no request variable, device mount or docker GPU hook appears in it), so it need
// not even be decoded. true means: decode and ask FromSpec.
func MayRequestGPU(rawSpec []byte) bool {
	for _, m := range gpuMarkers {
		if bytes.Contains(rawSpec, m) {
			return true
		}
	}
	return escapesMarkerText(rawSpec)
}

// escapesMarkerText reports whether rawSpec spells a character that markers are made of with a
// JSON escape ("\u0041", "\/"), so that a marker can hide from bytes.Contains. Encoders escape
// only quotes, backslashes, control characters and (Go's) <, > and &: a spec that escapes
// a letter was written to, and is decoded.
func escapesMarkerText(rawSpec []byte) bool {
	for i := bytes.IndexByte(rawSpec, '\\'); i >= 0 && i+1 < len(rawSpec); {
		switch rawSpec[i+1] {
		case '/':
			return true
		case 'u':
			if i+5 < len(rawSpec) {
				r, err := strconv.ParseUint(string(rawSpec[i+2:i+6]), 16, 16)
				if err == nil && markerChar(rune(r)) {
					return true
				}
			}
		}
		// Skip the escaped character: "\\" is one backslash, not the start of another escape.
		next := bytes.IndexByte(rawSpec[i+2:], '\\')
		if next < 0 {
			break
		}
		i += 2 + next
	}
	return false
}

// markerChar: a character of the markers' alphabet.
func markerChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == '/'
}

// Privileged reports whether the container has CAP_SYS_ADMIN in its bounding set.
func Privileged(spec *specs.Spec) bool {
	return spec.Process != nil && spec.Process.Capabilities != nil && slices.Contains(spec.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")
}

// volumeMounts returns what /dev/null mounts under DeviceListMountDir name: the devices,
// sorted (indices, UUIDs, MIG names, and CDI devices as cdi/<vendor>/<class>=<dev>, which come
// back as their qualified name), and the MPS share of a mount at MPSMountDir/<share> ("" for
// none; two are an error). A malformed device mount is reported before a malformed share's.
func volumeMounts(mounts []specs.Mount) (ids []string, share string, err error) {
	var shareErr error
	for _, m := range mounts {
		dest := path.Clean(m.Destination)
		id, ok := strings.CutPrefix(dest, DeviceListMountDir+"/")
		if m.Source != "/dev/null" || !ok {
			continue
		}
		if name, ok := strings.CutPrefix(dest, MPSMountDir+"/"); ok {
			switch {
			case shareErr != nil:
			case strings.Contains(name, "/") || name == "":
				shareErr = fmt.Errorf("%w: volume mount %s does not name one MPS share", ErrInvalid, quote.Value(dest))
			case share != "" && share != name:
				shareErr = fmt.Errorf("%w: volume mounts name two MPS shares, %s and %s: a container joins one", ErrInvalid, quote.Value(share), quote.Value(name))
			default:
				share = name
			}
			continue
		}
		if name, ok := strings.CutPrefix(id, "cdi/"); ok {
			if _, _, _, err := parser.ParseQualifiedName(name); err != nil {
				return nil, "", fmt.Errorf("%w: volume mount %s: %s is not a CDI device name (vendor.com/class=name): %w", ErrInvalid, quote.Value(dest), quote.Value(name), quote.Error(err))
			}
			ids = append(ids, name)
			continue
		}
		if strings.Contains(id, "/") || strings.Contains(id, ",") {
			return nil, "", fmt.Errorf("%w: volume mount %s does not name one device", ErrInvalid, quote.Value(dest))
		}
		ids = append(ids, id)
	}
	if shareErr != nil {
		return nil, "", shareErr
	}
	sort.Strings(ids)
	return ids, share, nil
}

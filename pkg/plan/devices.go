package plan

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// Device is one thing a container can be given: a whole GPU, or a MIG device of a GPU in
// MIG mode, named as NVIDIA_VISIBLE_DEVICES and CDI device entries name it.
type Device struct {
	// Index is "0" for a whole GPU, "0:1" for MIG device 1 of GPU 0; UUID "GPU-…" or "MIG-…".
	Index string
	UUID  string
	// GPU is the whole GPU, or the MIG device's parent: its minor, arch and brand are the
	// device's (NVIDIA_REQUIRE_* too).
	GPU discover.GPU
	MIG *discover.MIGDevice // nil for a whole GPU
}

func (d Device) IsMIG() bool { return d.MIG != nil }

// String describes d for messages: "0 (GPU-…)", "0:1 (MIG-…, 3g.40gb)".
func (d Device) String() string {
	if d.MIG != nil {
		return fmt.Sprintf("%s (%s, %s)", d.Index, d.UUID, d.MIG.Profile)
	}
	return fmt.Sprintf("%s (%s)", d.Index, d.UUID)
}

func wholeGPU(g discover.GPU) Device {
	return Device{Index: strconv.Itoa(g.Index), UUID: g.UUID, GPU: g}
}

func migDevice(g discover.GPU, m *discover.MIGDevice) Device {
	return Device{Index: fmt.Sprintf("%d:%d", g.Index, m.Index), UUID: m.UUID, GPU: g, MIG: m}
}

// Devices returns what NVIDIA_VISIBLE_DEVICES=all means: every GPU not in MIG mode and every
// MIG device, in NVML order. A GPU in MIG mode is not itself a device (CUDA sees no device
// through it alone).
func Devices(gpus []discover.GPU) []Device { return allDevices(gpus, false) }

// allDevices is Devices; for a MIG manager (whole), each GPU in MIG mode is also given whole,
// before its MIG devices.
func allDevices(gpus []discover.GPU, whole bool) []Device {
	var out []Device
	for _, g := range sortedGPUs(gpus) {
		if whole || !g.MIGEnabled() {
			out = append(out, wholeGPU(g))
		}
		for i := range g.MIGDevices {
			if g.MIGEnabled() {
				out = append(out, migDevice(g, &g.MIGDevices[i]))
			}
		}
	}
	return out
}

func sortedGPUs(gpus []discover.GPU) []discover.GPU {
	return slices.SortedStableFunc(slices.Values(gpus), func(a, b discover.GPU) int { return a.Index - b.Index })
}

// Edits returns the edits device d adds to Common's: its GPU's device node and, for a MIG
// device, its GPU and compute instance capabilities.
func (d Device) Edits(host Host) (edits.Edits, error) {
	var e edits.Edits
	var errs []error
	why := "GPU " + d.String()
	if d.MIG != nil {
		why = fmt.Sprintf("MIG device %s: its GPU %d's node", d, d.GPU.Index)
	}
	node, err := host.node("/dev/nvidia"+strconv.Itoa(d.GPU.Minor), why)
	if err != nil {
		errs = append(errs, err)
	} else {
		e.DeviceNodes = append(e.DeviceNodes, node)
	}
	if d.MIG != nil {
		for _, c := range []struct {
			what  string
			path  string
			minor int
		}{
			{"GPU instance", discover.CapPath(d.GPU.Minor, d.MIG.GI, -1), d.MIG.GICap},
			{"compute instance", discover.CapPath(d.GPU.Minor, d.MIG.GI, d.MIG.CI), d.MIG.CICap},
		} {
			ce, err := host.capEdits(c.path, c.minor, fmt.Sprintf("MIG device %s: %s capability %s", d, c.what, c.path))
			if err != nil {
				errs = append(errs, fmt.Errorf("MIG device %s: %s capability: %w", d, c.what, err))
				continue
			}
			e.Add(ce)
		}
	}
	return e, errors.Join(errs...)
}

// DevicesOf returns the devices whose nodes a set of container device-node paths holds (what
// a CDI device injects): a MIG device when its compute instance's capability node is there,
// else a whole GPU when its /dev/nvidia<minor> is. Paths of no device are skipped.
func DevicesOf(paths []string, host Host) []Device {
	has := map[string]bool{}
	for _, p := range paths {
		has[path.Clean(p)] = true
	}
	var out []Device
	for _, g := range sortedGPUs(host.Driver.GPUs) {
		if !has["/dev/nvidia"+strconv.Itoa(g.Minor)] {
			continue
		}
		found := false
		for i := range g.MIGDevices {
			m := &g.MIGDevices[i]
			if m.CICap > 0 && has[capNodeDir+"/nvidia-cap"+strconv.Itoa(m.CICap)] {
				out = append(out, migDevice(g, m))
				found = true
			}
		}
		if !found {
			out = append(out, wholeGPU(g))
		}
	}
	return out
}

// capNodeDir holds the MIG capability device nodes.
const capNodeDir = "/dev/nvidia-caps"

// capEdits grants a MIG capability (path relative to /proc/driver/nvidia/capabilities, as
// mig-minors names it): its node /dev/nvidia-caps/nvidia-cap<minor> where the driver uses
// device nodes; else its /proc access file, which only gpu-hook can show (Edits.ProcCaps).
func (h Host) capEdits(capPath string, minor int, why string) (edits.Edits, error) {
	var e edits.Edits
	if minor <= 0 {
		return e, fmt.Errorf("%w: the driver lists no %s under proc root %q: check driver.proc-root, and that the MIG instances exist (nvidia-smi -L)",
			ErrMissingNode, path.Join("/", discover.ProcCapabilities, capPath), h.ProcRoot)
	}
	if h.MIGCaps.Major == 0 {
		e.ProcCaps = append(e.ProcCaps, capPath)
		return e, nil
	}
	p := capNodeDir + "/nvidia-cap" + strconv.Itoa(minor)
	want := edits.DeviceNode{Path: p, HostPath: path.Join(h.Devices.Root, p), Type: "c", Major: int64(h.MIGCaps.Major), Minor: int64(minor), FileMode: 0o444, Why: why}
	if n, ok := h.Devices.Nodes[p]; ok {
		if n.Type != "c" || n.Major != want.Major || n.Minor != want.Minor {
			return e, fmt.Errorf("%w: %s is %s %d:%d, but the driver says c %d:%d: the node is stale; recreate it (nvidia-modprobe -f %s)",
				ErrMissingNode, n.HostPath, n.Type, n.Major, n.Minor, want.Major, want.Minor, path.Join("/", discover.ProcCapabilities, capPath))
		}
		want = nodeEdit(n, why)
	} else if err := h.Devices.Invalid[p]; err != nil {
		return e, fmt.Errorf("%w: %w", ErrMissingNode, err)
	}
	// A node the host lacks is still created in the container by the runtime, from the
	// driver's numbers: the capability is the (major, minor) pair, not a host file.
	e.DeviceNodes = append(e.DeviceNodes, want)
	return e, nil
}

// ErrMIGEnabled marks a request for a GPU in MIG mode as a whole GPU.
var ErrMIGEnabled = errors.New("GPU in MIG mode requested whole")

// selectDevices resolves the request's devices on the host. A MIG manager (MIG config or
// monitor access) may get a GPU in MIG mode whole. A listed device that is unhealthy is an
// error (screenAll decides for "all").
func selectDevices(req request.Request, drv discover.Driver) ([]Device, error) {
	gpus := drv.GPUs
	manager := req.MIGConfig || req.MIGMonitor
	switch req.Mode {
	case request.AllGPUs:
		return allDevices(gpus, manager), nil
	case request.DeviceList:
	default:
		return nil, nil
	}
	var out []Device
	var unknown, unknownMIG []string
	var migWhole []discover.GPU // docker run --gpus N's GPUs in MIG mode (dockerCountError)
	var errs []error
	count, isCount := dockerCount(req)
	seen := map[string]string{} // device UUID → the token that named it
	for _, tok := range req.Devices {
		d, err := resolveToken(tok, gpus)
		switch {
		case errors.Is(err, errUnknownMIG):
			unknownMIG = append(unknownMIG, tok)
			continue
		case errors.Is(err, ErrUnknownDevice):
			if xerr := excludedToken(tok, drv); xerr != nil {
				errs = append(errs, xerr)
				continue
			}
			unknown = append(unknown, tok)
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		if d.GPU.MIGEnabled() && !d.IsMIG() && !manager && isCount {
			migWhole = append(migWhole, d.GPU)
			continue
		}
		if d.GPU.MIGEnabled() && !d.IsMIG() && !manager {
			errs = append(errs, fmt.Errorf("%w: %s in %s names GPU %s, which is in MIG mode: it cannot be given whole; ask for its MIG devices: %s (a MIG manager also sets %s or %s)",
				ErrMIGEnabled, quote.Value(tok), request.EnvVisibleDevices, d, cmp.Or(describeMIG(d.GPU), "it has none yet (create them with nvidia-smi mig)"), request.EnvMIGConfig, request.EnvMIGMonitor))
			continue
		}
		if prev, dup := seen[d.UUID]; dup {
			what := "GPU"
			if d.IsMIG() {
				what = "MIG device"
			}
			errs = append(errs, fmt.Errorf("%w: %s and %s in %s both name %s %s", request.ErrInvalid, quote.Value(prev), quote.Value(tok), request.EnvVisibleDevices, what, d.Index))
			continue
		}
		seen[d.UUID] = tok
		if d.Health() != nil {
			errs = append(errs, unhealthyToken(req, tok, d))
			continue
		}
		out = append(out, d)
	}
	if len(unknownMIG) > 0 {
		have := "this host has no MIG devices"
		if all := describeMIG(gpus...); all != "" {
			have = "this host has MIG devices " + all
		}
		errs = append([]error{fmt.Errorf("%w: MIG device %s in %s: %s", ErrUnknownDevice, quote.List(unknownMIG), request.EnvVisibleDevices, have)}, errs...)
	}
	switch {
	case isCount && (len(unknown) > 0 || len(migWhole) > 0): // one error, in --gpus N's words
		errs = append([]error{dockerCountError(count, gpus, len(unknown) > 0, migWhole)}, errs...)
	case len(unknown) > 0:
		errs = append([]error{fmt.Errorf("%w %s in %s: %s", ErrUnknownDevice, quote.List(unknown), requestedIn(req), describe(gpus))}, errs...)
	}
	return out, errors.Join(errs...)
}

// errUnknownMIG: a token of a MIG form that names no MIG device.
var errUnknownMIG = fmt.Errorf("%w: MIG", ErrUnknownDevice)

// resolveToken finds the device a token names: a GPU index or UUID, "G:I", "MIG-<uuid>" or
// the legacy "MIG-GPU-<gpu uuid>/<gi>/<ci>".
func resolveToken(tok string, gpus []discover.GPU) (Device, error) {
	switch {
	case hasPrefixFold(tok, "MIG-GPU-") && strings.Contains(tok, "/"):
		parts := strings.Split(tok[len("MIG-"):], "/")
		if len(parts) != 3 {
			return Device{}, errUnknownMIG
		}
		gi, giErr := decimal(parts[1])
		ci, ciErr := decimal(parts[2])
		if giErr != nil || ciErr != nil {
			return Device{}, errUnknownMIG
		}
		return findMIG(gpus, func(g discover.GPU, m *discover.MIGDevice) bool {
			return strings.EqualFold(g.UUID, parts[0]) && m.GI == gi && m.CI == ci
		})
	case hasPrefixFold(tok, "MIG-"):
		return findMIG(gpus, func(_ discover.GPU, m *discover.MIGDevice) bool { return strings.EqualFold(m.UUID, tok) })
	case strings.Contains(tok, ":"):
		gpuText, migText, _ := strings.Cut(tok, ":")
		gi, err1 := decimal(gpuText)
		mi, err2 := decimal(migText)
		if err1 != nil || err2 != nil {
			return Device{}, errUnknownMIG
		}
		return findMIG(gpus, func(g discover.GPU, m *discover.MIGDevice) bool { return g.Index == gi && m.Index == mi })
	}
	idx, err := decimal(tok)
	i := slices.IndexFunc(gpus, func(g discover.GPU) bool {
		if err == nil {
			return g.Index == idx
		}
		return strings.EqualFold(g.UUID, tok)
	})
	if i < 0 {
		return Device{}, ErrUnknownDevice
	}
	return wholeGPU(gpus[i]), nil
}

// findMIG returns the first MIG device of a GPU in MIG mode that match accepts.
func findMIG(gpus []discover.GPU, match func(discover.GPU, *discover.MIGDevice) bool) (Device, error) {
	for _, g := range gpus {
		for i := range g.MIGDevices {
			if m := &g.MIGDevices[i]; g.MIGEnabled() && match(g, m) {
				return migDevice(g, m), nil
			}
		}
	}
	return Device{}, errUnknownMIG
}

// hasPrefixFold is strings.HasPrefix ignoring case, as UUIDs are matched.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// decimal parses a non-negative decimal number written without sign or padding.
func decimal(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, strconv.ErrSyntax
	}
	return n, nil
}

// describe lists the GPUs that exist, for error messages.
func describe(gpus []discover.GPU) string {
	if len(gpus) == 0 {
		return "this host has no GPUs"
	}
	parts := make([]string, 0, len(gpus))
	for _, g := range sortedGPUs(gpus) {
		s := fmt.Sprintf("%d (%s)", g.Index, g.UUID)
		if g.MIGEnabled() {
			s = fmt.Sprintf("%d (%s, in MIG mode)", g.Index, g.UUID)
		}
		parts = append(parts, s)
	}
	return "this host has GPUs " + strings.Join(parts, ", ")
}

// describeMIG lists the MIG devices of the GPUs in MIG mode among gpus: "0:0 (MIG-…,
// 3g.40gb), 0:1 (…)"; "" for none.
func describeMIG(gpus ...discover.GPU) string {
	var parts []string
	for _, d := range Devices(gpus) {
		if d.IsMIG() {
			parts = append(parts, d.String())
		}
	}
	return strings.Join(parts, ", ")
}

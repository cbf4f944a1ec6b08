package plan

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// ErrUnhealthy marks a request for a device that must not be given to containers: gone,
// excluded by the administrator, or recorded as failing (discover.Health).
var ErrUnhealthy = errors.New("unhealthy device")

// Health returns why d must not be given to containers, nil when nothing says so: its GPU's
// health (a MIG device of a failing GPU fails with it), else a MIG device's own.
func (d Device) Health() *discover.Health {
	if d.GPU.Health != nil {
		return d.GPU.Health
	}
	if d.MIG != nil {
		return d.MIG.Health
	}
	return nil
}

// healthText says why d is unhealthy ("GPU 1 (GPU-…): Xid 79 … since …", "MIG device 0:1
// (MIG-…, 3g.40gb): its GPU 0 (GPU-…): gone: …") and how to fix it or clear the record.
func healthText(d Device) (text, fix string) {
	h := *d.Health()
	what := "GPU " + d.String()
	if d.IsMIG() {
		what = "MIG device " + d.String()
		if d.GPU.Health != nil { // the record is held against the GPU
			return fmt.Sprintf("%s: its GPU %d (%s): %s", what, d.GPU.Index, d.GPU.UUID, h), h.Fix(d.GPU.UUID)
		}
	}
	return what + ": " + h.String(), h.Fix(d.UUID)
}

// unhealthyToken is the error for a device a request names that is unhealthy.
func unhealthyToken(req request.Request, tok string, d Device) error {
	text, fix := healthText(d)
	return fmt.Errorf("%w: %s in %s names %s; ask for another device, or %s", ErrUnhealthy, quote.Value(tok), requestedIn(req), text, fix)
}

// requestedIn names where the device list came from, in the user's words.
func requestedIn(req request.Request) string {
	if n, ok := dockerCount(req); ok {
		return fmt.Sprintf("docker run --gpus %d", n)
	}
	if req.DockerGPUs && req.Mode == request.DeviceList {
		return "docker run --gpus device=" + quote.Cut(strings.Join(req.Devices, ",")) // the user's words, unquoted
	}
	return request.EnvVisibleDevices
}

// excludedToken is the error for tok naming a GPU the driver excludes (by UUID: it has no
// index); nil when it does not.
func excludedToken(tok string, drv discover.Driver) error {
	for _, x := range drv.Excluded {
		if strings.EqualFold(x.UUID, tok) {
			return fmt.Errorf("%w: %s in %s names GPU %s%s, which the driver excludes (NVreg_ExcludedGpus): NVML and CUDA do not see it; ask for another device, or remove it from NVreg_ExcludedGpus and reload the driver",
				ErrUnhealthy, quote.Value(tok), request.EnvVisibleDevices, x.UUID, x.Where())
		}
	}
	return nil
}

// EnvLeftOut is the variable a container gets when "all" left unhealthy devices out of it
// (health.all = "skip"): what the container's own users see (docker exec, kubectl exec, the
// application's log), where runc's log is gone with the container.
const EnvLeftOut = "GPU_RUNTIME_DEVICES_LEFT_OUT"

// LeftOut is a device that "all" selected and the health policy left out.
type LeftOut struct {
	Index, UUID string
	Reason      string // the device's health reason ("Xid 79: GPU has fallen off the bus")
}

// leftOutEnv is EnvLeftOut's value: "<index> <UUID> <reason>" per device, joined by "; ", each
// reason cut to quote.MaxValue bytes (an operator's reason is one line, but of any length)
// with ';' and control characters replaced.
func leftOutEnv(out []LeftOut) string {
	parts := make([]string, len(out))
	for i, l := range out {
		reason := strings.Map(func(r rune) rune {
			if r == ';' || r < 0x20 || r == 0x7f {
				return ','
			}
			return r
		}, l.Reason)
		parts[i] = l.Index + " " + l.UUID + " " + quote.Cut(reason)
	}
	return strings.Join(parts, "; ")
}

// screenAll applies the health policy to what NVIDIA_VISIBLE_DEVICES=all selected: unhealthy
// devices are left out with a warning each (config.HealthAllSkip) or fail the create
// (config.HealthAllFail). When every device is unhealthy the create fails either way.
func screenAll(req request.Request, devices []Device, policy string) ([]Device, []LeftOut, []string, error) {
	if req.Mode != request.AllGPUs {
		return devices, nil, nil, nil
	}
	what := request.EnvVisibleDevices + "=all"
	if req.DockerGPUs {
		what = "docker run --gpus all"
	}
	var healthy []Device
	var leftOut []LeftOut
	var warnings, problems []string
	for _, d := range devices {
		if d.Health() == nil {
			healthy = append(healthy, d)
			continue
		}
		leftOut = append(leftOut, LeftOut{Index: d.Index, UUID: d.UUID, Reason: d.Health().Reason})
		text, fix := healthText(d)
		problems = append(problems, text)
		warnings = append(warnings, fmt.Sprintf("%s: unhealthy %s left out (%s)", what, text, fix))
	}
	switch {
	case len(problems) == 0:
		return devices, nil, nil, nil
	case policy == config.HealthAllFail:
		return nil, nil, nil, fmt.Errorf("%w: %s includes %s; with health.all = %q such a container does not start: fix or clear the device (gpu-ctk health), or set health.all = %q",
			ErrUnhealthy, what, strings.Join(problems, "; "), config.HealthAllFail, config.HealthAllSkip)
	case len(healthy) == 0:
		return nil, nil, nil, fmt.Errorf("%w: %s: every device of this host is unhealthy: %s", ErrUnhealthy, what, strings.Join(problems, "; "))
	}
	return healthy, leftOut, warnings, nil
}

// checkCDIHealth fails when the devices that CDI devices inject include an unhealthy one. A
// CDI device comes whole: nvidia.com/gpu=all fails too, whatever health.all says.
func checkCDIHealth(names []string, devices []Device) error {
	var problems []string
	for _, d := range devices {
		if d.Health() != nil {
			text, fix := healthText(d)
			problems = append(problems, text+" ("+fix+")")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: CDI devices %s give %s; ask for other devices", ErrUnhealthy, quote.List(names), strings.Join(problems, "; "))
}

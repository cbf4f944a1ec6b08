package dra

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// memoryLimitsProbeTimeout bounds the plugin's question whether the driver offers per-cgroup
// GPU memory limits.
const memoryLimitsProbeTimeout = 10 * time.Second

// exitNotOffered is gpu-ctk memory-limit's exit status where the driver offers no
// per-cgroup GPU memory limits (ctk.ExitNotOffered; the plugin is static, without NVML).
const exitNotOffered = 3

// logMemoryLimits says once in the plugin's log whether the driver under root offers
// per-cgroup GPU memory limits, asking gpu-ctk memory-limit probe (ctk; "" when not found).
func logMemoryLimits(log logrus.FieldLogger, ctk, root string, timeout time.Duration) {
	offered, why := probeMemoryLimits(ctk, root, timeout)
	if offered {
		log.Info(mps.MemoryLimitsApplied)
		return
	}
	log.Warn(mps.MemoryLimitsNote(why))
}

// probeMemoryLimits runs gpu-ctk memory-limit probe, bounded by timeout; when the limits are
// not offered, or that cannot be told, it says why.
func probeMemoryLimits(ctk, root string, timeout time.Duration) (bool, string) {
	if ctk == "" {
		return false, "per-cgroup GPU memory limits: cannot ask NVML: gpu-ctk not found (install it next to gpu-kubelet-plugin)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctk, "memory-limit", "probe", "--driver-root", root)
	cmd.Env = plan.HookEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "gpu-ctk: "))
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, ""
	case ctx.Err() != nil:
		return false, fmt.Sprintf("per-cgroup GPU memory limits: cannot ask NVML: %s memory-limit probe did not answer within %v", ctk, timeout)
	case errors.As(err, &exit) && exit.ExitCode() == exitNotOffered:
		return false, msg
	case msg == "":
		msg = err.Error()
	}
	return false, "per-cgroup GPU memory limits: cannot ask NVML: " + msg
}

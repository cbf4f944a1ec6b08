package create

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// CTKName is the admin tool gpu-runtime asks about NVML when its cache misses.
const CTKName = "gpu-ctk"

// NVMLQuery returns a discover query that runs `gpu-ctk info --json --driver-root R`, killed
// at the context's deadline (discovery.timeout). NVML (cgo, dlopen) in gpu-ctk lets
// gpu-runtime be a static binary whose pass-through path starts as fast as Go can.
func NVMLQuery(ctkPath string) func(ctx context.Context, root string) (discover.Driver, error) {
	return func(ctx context.Context, root string) (discover.Driver, error) {
		cmd := exec.CommandContext(ctx, ctkPath, "info", "--json", "--driver-root", root)
		cmd.Env = plan.HookEnv
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := runDyingWithUs(cmd); err != nil {
			msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "gpu-ctk: "))
			if msg == "" {
				msg = err.Error()
			}
			return discover.Driver{}, fmt.Errorf("query NVML (%s info): %s", ctkPath, msg)
		}
		var d discover.Driver
		if err := json.Unmarshal(stdout.Bytes(), &d); err != nil {
			return discover.Driver{}, fmt.Errorf("query NVML (%s info): decode its output: %w", ctkPath, err)
		}
		if d.Version == "" {
			return discover.Driver{}, fmt.Errorf("query NVML (%s info): no driver version in its output", ctkPath)
		}
		return d, nil
	}
}

// ErrReported: a hand-off failed and reported why itself, in runc's log and on stderr.
var ErrReported = errors.New("the CDI hand-off failed and reported why")

// ErrHandOffTimeout: gpu-ctk did not finish a hand-off within cdi.timeout.
var ErrHandOffTimeout = errors.New("CDI hand-off timed out")

// HandOffToCTK returns the hand-off of a create that names CDI devices: `gpu-ctk cdi inject
// -- <gpu-runtime's arguments>` runs PrepareBundle with the CDI library, logging where
// gpu-runtime would. A failure it reported is ErrReported. After timeout (cdi.timeout) it is
// killed with every process it started, and the error is ErrHandOffTimeout.
func HandOffToCTK(executable string, args []string, timeout time.Duration) func() error {
	return func() error {
		ctkPath, err := toolPath(CTKName, "", executable, "install gpu-ctk next to gpu-runtime or in PATH (it resolves CDI devices)")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, ctkPath, append([]string{"cdi", "inject", "--"}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		// Its NVML query, in a group of its own, dies with it (runDyingWithUs).
		err = runDyingWithUs(cmd)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%w: %s cdi inject, which resolves the container's CDI devices, did not finish within %s (setting cdi.timeout) and was killed: "+
				"find what it waits on (a CDI spec directory on a file system that does not answer; NVML, bounded by discovery.timeout), or raise cdi.timeout if the host is only slow",
				ErrHandOffTimeout, ctkPath, timeout)
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 1 {
			return ErrReported
		}
		if err != nil {
			return fmt.Errorf("run %s cdi inject: %w", ctkPath, err)
		}
		return nil
	}
}

// runDyingWithUs runs cmd in a process group of its own, killed whole at the context's
// deadline (no longer waiting for its pipes) and when this process dies: a gpu-ctk killed at
// cdi.timeout, or a gpu-runtime killed by its engine, must not leave its child hanging on
// NVML. The death signal follows the thread that started the child (PR_SET_PDEATHSIG), so
// that thread stays ours until it is done, as in gpu-hook's ldconfig sandbox.
func runDyingWithUs(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 500 * time.Millisecond
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	return cmd.Run()
}

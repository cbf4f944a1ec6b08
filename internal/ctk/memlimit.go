package ctk

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
)

const memoryLimitUsage = `usage:
  gpu-ctk memory-limit set   --device UUID --cgroup PATH --bytes N [--driver-root DIR]
  gpu-ctk memory-limit clear --device UUID --cgroup PATH [--driver-root DIR]
  gpu-ctk memory-limit get   --device UUID --cgroup PATH [--json] [--driver-root DIR]
  gpu-ctk memory-limit probe [--device UUID] [--driver-root DIR]

Per-cgroup GPU memory limits (nvmlDeviceSetMemoryLimits_v1, NVIDIA driver R615 / CUDA 13.4 or
later; root only). set limits what the processes of the cgroup PATH (its full path under
/sys/fs/cgroup, cgroup v2) may allocate on the GPU UUID to N bytes (soft = hard = N); clear
removes the limit (soft 0, hard unlimited) and succeeds when there is none or the cgroup is
gone (removing a cgroup clears its limits); get prints the limit; probe says whether the driver
offers the call. gpu-hook runs set and clear for a Kubernetes claim of a shared GPU. Where the
driver does not offer the call, set, clear and probe exit with status 3 and say so.
`

// ExitNotOffered is gpu-ctk's exit status when the driver offers no per-cgroup GPU memory
// limits: gpu-hook then does nothing.
const ExitNotOffered = 3

func runMemoryLimit(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, memoryLimitUsage)
		return fmt.Errorf("%w: gpu-ctk memory-limit needs set, clear, get or probe", ErrUsage)
	}
	verb := args[0]
	switch verb {
	case "set", "clear", "get", "probe":
	case "--help", "-help", "-h", "help":
		_, err := io.WriteString(stdout, memoryLimitUsage)
		return err
	default:
		return fmt.Errorf("%w: unknown memory-limit command %q (gpu-ctk memory-limit --help)", ErrUsage, verb)
	}
	fs := flag.NewFlagSet("gpu-ctk memory-limit "+verb, flag.ContinueOnError)
	device := fs.String("device", "", "the GPU's UUID (GPU-…): a whole GPU, not a MIG device")
	cgroup := fs.String("cgroup", "", "the cgroup's full path, /sys/fs/cgroup/…")
	bytes := fs.String("bytes", "", "set: the limit in bytes")
	asJSON := fs.Bool("json", false, "get: print JSON")
	root := fs.String("driver-root", "", "driver root (default: driver.root from the gpu-runtime config)")
	if help, err := parseNoArgs(fs, args[1:], memoryLimitUsage, stdout); help || err != nil {
		return err
	}
	if *root == "" {
		cfg, err := loadConfig(stderr)
		if err != nil {
			return err
		}
		*root = cfg.Driver.Root
	}
	if verb == "probe" {
		if err := nvmlinfo.MemoryLimitsOffered(*root, *device); err != nil {
			return err
		}
		_, err := fmt.Fprintln(stdout, "per-cgroup GPU memory limits: offered")
		return err
	}
	var errs []error
	if *device == "" {
		errs = append(errs, errors.New("--device UUID is required"))
	}
	if !filepath.IsAbs(*cgroup) || filepath.Clean(*cgroup) != *cgroup {
		errs = append(errs, fmt.Errorf("--cgroup %q: want the cgroup's full clean path, /sys/fs/cgroup/…", *cgroup))
	}
	var n uint64
	if verb == "set" {
		var err error
		if n, err = strconv.ParseUint(*bytes, 10, 64); err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("--bytes %q: want a number of bytes above 0", *bytes))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: gpu-ctk memory-limit %s: %w", ErrUsage, verb, err)
	}
	switch verb {
	case "set":
		return nvmlinfo.SetMemoryLimit(*root, *device, *cgroup, nvmlinfo.MemoryLimit{Soft: n, Hard: n})
	case "clear":
		return nvmlinfo.ClearMemoryLimit(*root, *device, *cgroup)
	}
	l, found, err := nvmlinfo.GetMemoryLimit(*root, *device, *cgroup)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, struct {
			Found bool   `json:"found"`
			Soft  uint64 `json:"soft"`
			Hard  uint64 `json:"hard"`
		}{found, l.Soft, l.Hard})
	}
	if !found {
		_, err = fmt.Fprintf(stdout, "no limit on %s for cgroup %s\n", *device, *cgroup)
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s on cgroup %s: soft %d bytes, hard %d bytes\n", *device, *cgroup, l.Soft, l.Hard)
	return err
}

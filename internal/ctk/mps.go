package ctk

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

const mpsUsage = `usage:
  gpu-ctk mps start  [SHARE...]
  gpu-ctk mps stop   [SHARE...]
  gpu-ctk mps status [--json] [SHARE...]

An MPS share ([mps.shares.<name>] in the gpu-runtime config) is a set of GPUs served by its
own nvidia-cuda-mps-control daemon, whose defaults — active thread percentage, pinned memory
limit per GPU — its clients cannot raise. Containers join one with NVIDIA_MPS_SHARE=<name> (or
the device plugin's /var/run/nvidia-container-devices/mps/<name> mount).

start starts the daemon of each share (every configured share without arguments) from the
driver root, seeing only the share's GPUs, with <mps.root>/<share>/pipe and log directories
(root's) and a private tmpfs <mps.root>/<share>/shm as its /dev/shm, sets the share's
defaults, then links the daemon's control socket into <mps.root>/<share>/client, what the
share's containers see: not the daemon's privileged socket. A running share only gets its
defaults set again. stop quits the daemon and unmounts the tmpfs. status shows each share:
running or why not, its pid and directories, its defaults. stop and status also find the
shares that have a pid file under <mps.root> though the configuration no longer lists them
(taken out of it, or purged with the package), so that their daemons can still be stopped;
stop with no share to stop says so and succeeds. All need root, and all are idempotent.
`

func runMPS(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, mpsUsage)
		return fmt.Errorf("%w: gpu-ctk mps needs start, stop or status", ErrUsage)
	}
	switch args[0] {
	case mps.DaemonCommand:
		return mps.Daemon(args[1:])
	case "start", "stop", "status":
	case "--help", "-help", "-h", "help":
		_, err := io.WriteString(stdout, mpsUsage)
		return err
	default:
		return fmt.Errorf("%w: unknown mps command %q (gpu-ctk mps --help)", ErrUsage, args[0])
	}
	verb := args[0]
	fs := flag.NewFlagSet("gpu-ctk mps "+verb, flag.ContinueOnError)
	asJSON := false
	if verb == "status" {
		fs.BoolVar(&asJSON, "json", false, "print the shares' states as JSON")
	}
	if help, err := parseFlags(fs, args[1:], mpsUsage, stdout); help || err != nil {
		return err
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	// stop and status also find the shares started earlier from their pid files under the MPS
	// root: a share taken out of the configuration, or whose configuration went with the
	// package, can still be stopped.
	var found []string
	if verb != "start" {
		if found, err = mps.Found(cfg.MPS); err != nil {
			return err
		}
	}
	known := slices.Concat(cfg.MPS.ShareNames(), found)
	slices.Sort(known)
	known = slices.Compact(known)
	names := fs.Args()
	if len(names) == 0 {
		names = known
		if len(names) == 0 && verb == "stop" {
			_, err := fmt.Fprintf(stdout, "no MPS share to stop: none configured, and no pid file under %s\n", cfg.MPS.Root)
			return err
		}
		if len(names) == 0 {
			return errors.New("no MPS shares are configured: add [mps.shares.<name>] tables to the gpu-runtime config (gpu-ctk mps --help)")
		}
	}
	for _, n := range names {
		if !slices.Contains(known, n) {
			if verb == "start" {
				return fmt.Errorf("unknown MPS share %q: the configured shares are %s", n, strings.Join(cfg.MPS.ShareNames(), ", "))
			}
			configured := "none is configured"
			if len(cfg.MPS.Shares) > 0 {
				configured = "the configured shares are " + strings.Join(cfg.MPS.ShareNames(), ", ")
			}
			return fmt.Errorf("unknown MPS share %q: %s, and no other has a pid file under %s", n, configured, cfg.MPS.Root)
		}
	}
	if verb == "status" {
		return mpsStatus(cfg.MPS, names, asJSON, stdout)
	}
	opts, err := mpsOptions(cfg, names, verb == "start")
	if err != nil {
		return err
	}
	act := mps.Stop
	if verb == "start" {
		act = mps.Start
	}
	var errs []error
	for _, n := range names {
		did, err := act(cfg.MPS, n, opts[n])
		if err != nil {
			errs = append(errs, fmt.Errorf("MPS share %q: %w", n, err))
			continue
		}
		fmt.Fprintf(stdout, "%s: %s\n", n, did)
	}
	return errors.Join(errs...)
}

// mpsOptions finds the driver's nvidia-cuda-mps-control and, to start shares, their GPUs
// (through NVML, as a share's daemon must see the right ones).
func mpsOptions(cfg config.Config, names []string, start bool) (map[string]mps.Options, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	base := mps.Options{Self: self}
	driver, _, err := gpuhost.Driver(cfg, nvmlinfo.QueryContext, false)
	if err != nil && start {
		return nil, err
	}
	// Stopping needs no driver: without one, the daemons are ended by signal.
	if err == nil {
		files, err := discover.FindDriverFiles(cfg.Driver.Root, driver.Version)
		if err != nil {
			return nil, err
		}
		base = mps.DriverOptions(files, cfg.Driver.Root, self)
		// Stopping does without it too: mps.Stop ends the daemons by signal.
		if base.Control == "" && start {
			return nil, fmt.Errorf("%s not found under driver root %q: install the driver's MPS programs, or set driver.root", mps.ControlName, cfg.Driver.Root)
		}
	}
	out := map[string]mps.Options{}
	for _, n := range names {
		o := base
		if start {
			devices, err := plan.ShareDevices(n, cfg.MPS.Shares[n], driver.GPUs)
			if err != nil {
				return nil, err
			}
			for _, d := range devices {
				o.UUIDs = append(o.UUIDs, d.UUID)
			}
		}
		out[n] = o
	}
	return out, nil
}

func mpsStatus(cfg config.MPSConfig, names []string, asJSON bool, stdout io.Writer) error {
	var states []mps.State
	for _, n := range names {
		states = append(states, mps.Check(cfg, n))
	}
	if asJSON {
		return writeJSON(stdout, states)
	}
	var b strings.Builder
	for _, s := range states {
		state := "running, pid " + fmt.Sprint(s.PID)
		_, configured := cfg.Shares[s.Name]
		switch {
		case !configured && s.PID != 0:
			state = fmt.Sprintf("not in the configuration, but its pid file names pid %d (%s): gpu-ctk mps stop %s", s.PID, cmp.Or(s.Why, "running"), s.Name)
		case !s.Running:
			state = "stopped (" + s.Why + "): gpu-ctk mps start " + s.Name
		}
		fmt.Fprintf(&b, "%s: %s\n  devices %s, uid %d", s.Name, state, strings.Join(s.Devices, ","), s.UID)
		if s.ActiveThreadPercentage > 0 {
			fmt.Fprintf(&b, ", active threads %d%%", s.ActiveThreadPercentage)
		}
		if s.PinnedMemoryLimit != "" {
			fmt.Fprintf(&b, ", pinned memory %s per GPU", s.PinnedMemoryLimit)
		}
		fmt.Fprintf(&b, "\n  pipe %s (containers see %s), log %s, shm %s\n", s.PipeDir, s.ClientDir, s.LogDir, s.ShmDir)
	}
	_, err := io.WriteString(stdout, b.String())
	return err
}

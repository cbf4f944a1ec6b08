// Command gpu-runtime is an OCI runtime that gives containers NVIDIA GPUs. It wraps runc
// (or crun): for create and run it edits the bundle's config.json to inject the GPUs the
// container asked for, then it replaces itself with the low-level runtime, arguments
// unchanged. Every other subcommand goes straight to the low-level runtime.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/runlog"
	"github.com/gpu-runtime/gpu-runtime/internal/runtime"
	"github.com/gpu-runtime/gpu-runtime/internal/version"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// memoryLimit is the heap size at which gpu-runtime collects garbage: a create needs a few
// MiB; the memory is charged to the engine's cgroup, which other containers share.
const memoryLimit = 256 << 20

func main() {
	// A short-lived process with a small heap: collecting garbage only costs time, unless
	// something went far off — then the memory limit has the collector run (the loader-cache
	// update's reads of the image are bounded besides: internal/confined).
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(memoryLimit)
	args := os.Args[1:]
	inv, argErr := oci.ParseArgs(args)
	if inv.Version && inv.Command == "" {
		printVersion()
		return
	}
	var cfg config.Config
	var warnings []string
	var cfgErr error
	if inv.ModifiesSpec() {
		cfg, warnings, cfgErr = config.LoadFromEnv(os.Getenv)
	} else { // start, delete, state…: only the runtime and log settings matter
		cfg, cfgErr = config.LoadRuntimeFromEnv(os.Getenv)
	}
	level := logrus.InfoLevel
	switch {
	case cfgErr == nil:
		level = cfg.Level()
	case inv.ModifiesSpec():
		// Which runtime, and where to log, if the [runtime] section can still be read.
		cfg, _ = config.LoadRuntimeFromEnv(os.Getenv)
	default:
		cfg = config.Default()
	}
	log := runlog.New(runlog.Options{RuncLog: inv.Log, Format: inv.LogFormat, ExtraFile: cfg.Runtime.LogFile, Level: level, Stderr: os.Stderr})
	lines := withContainer(log, inv.ContainerID)
	for _, w := range warnings {
		lines.Warn(w)
	}
	self, _ := os.Executable()

	if cfgErr != nil && !inv.ModifiesSpec() {
		lines.WithError(cfgErr).Warn("config unusable; using default runtimes for " + inv.Command)
	}
	// Resolve runc before touching the spec: a create must not leave an edited spec behind.
	runc, err := runtime.LowLevelRuntime(cfg.Runtime.Runtimes, self)
	cwd, _ := os.Getwd() // a relative --bundle is relative to it
	if inv.ModifiesSpec() && cfgErr != nil && argErr == nil && err == nil && !runtime.AsksForGPU(inv, cwd) {
		// A broken config must not take down every container of the host: one that asks for
		// no GPU needs nothing from it. A GPU container fails below: it cannot be injected safely.
		lines.WithError(cfgErr).Warn("config unusable; the container asks for no GPU, so it runs unchanged through " + runc)
		log.Close()
		execRuntime(runc, args, inv, level)
	}
	if inv.ModifiesSpec() {
		err = errors.Join(cfgErr, unsupported(argErr), err)
		if err == nil && argErr == nil {
			err = runtime.PrepareBundle(inv, runtime.Options{Config: cfg, Executable: self, Cwd: cwd, Logger: log,
				HandOff: runtime.HandOffToCTK(self, args, cfg.CDI.TimeoutDuration())})
		}
	}
	if errors.Is(err, runtime.ErrReported) {
		log.Close()
		os.Exit(1)
	}
	if err != nil {
		fail(log, inv.ContainerID, err)
	}
	log.Close()
	execRuntime(runc, args, inv, level)
}

// execRuntime replaces gpu-runtime with the low-level runtime, arguments unchanged; it
// returns only to report why it could not.
func execRuntime(runc string, args []string, inv oci.Invocation, level logrus.Level) {
	err := unix.Exec(runc, append([]string{runc}, args...), os.Environ())
	fail(runlog.New(runlog.Options{RuncLog: inv.Log, Format: inv.LogFormat, Level: level, Stderr: os.Stderr}), inv.ContainerID, fmt.Errorf("exec %s: %w", runc, err))
}

// withContainer returns the logger that writes lines about container id: every line carries
// container_id, as PrepareBundle's do (none when the command names no container).
func withContainer(log *runlog.Logger, id string) logrus.FieldLogger {
	if id == "" {
		return log
	}
	return log.WithField("container_id", id)
}

// printVersion prints gpu-runtime's version, then the low-level runtime's --version lines, as
// NVIDIA's runtime does: docker info reads the runtime's name, version and commit from the
// last "version" and "commit:" lines, so it shows runc's instead of an empty field.
func printVersion() {
	fmt.Println(version.String("gpu-runtime"))
	cfg, err := config.LoadRuntimeFromEnv(os.Getenv)
	if err != nil {
		cfg = config.Default()
	}
	self, _ := os.Executable()
	runc, err := runtime.LowLevelRuntime(cfg.Runtime.Runtimes, self)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-runtime: "+err.Error()) // our own version was asked for and printed
		return
	}
	out, err := exec.Command(runc, "--version").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpu-runtime: %s --version: %v\n", runc, err)
		return
	}
	fmt.Printf("\n%s", out)
}

// unsupported keeps only argument errors that must stop a create (ErrArgs passes through
// to runc, which reports its own error).
func unsupported(err error) error {
	if errors.Is(err, oci.ErrUnsupported) {
		return err
	}
	return nil
}

// fail reports err the way runc does (runlog.Logger.Report) and exits 1.
func fail(log *runlog.Logger, id string, err error) {
	log.Report(id, err)
	log.Close()
	os.Exit(1)
}

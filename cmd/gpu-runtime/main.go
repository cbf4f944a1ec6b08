// Command gpu-runtime is an OCI runtime that gives containers NVIDIA GPUs. It wraps runc
// (or crun): for create and run it edits the bundle's config.json to inject the GPUs the
// container asked for, then it replaces itself with the low-level runtime, arguments
// unchanged. Every other subcommand goes straight to the low-level runtime.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/runlog"
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
	self, _ := os.Executable()
	cwd, _ := os.Getwd() // a relative --bundle is relative to it
	out := create.Invoke(create.Process{Args: args, Inv: inv, ArgErr: argErr, Getenv: os.Getenv, Self: self, Cwd: cwd, Stderr: os.Stderr})
	switch {
	case out.Reported:
		out.Log.Close()
		os.Exit(1)
	case out.Err != nil:
		fail(out.Log, inv.ContainerID, out.Err)
	}
	out.Log.Close()
	execRuntime(out.Runtime, args, inv, out.Level)
}

// execRuntime replaces gpu-runtime with the low-level runtime, arguments unchanged; it
// returns only to report why it could not.
func execRuntime(runc string, args []string, inv oci.Invocation, level logrus.Level) {
	err := unix.Exec(runc, append([]string{runc}, args...), os.Environ())
	fail(runlog.New(runlog.Options{RuncLog: inv.Log, Format: inv.LogFormat, Level: level, Stderr: os.Stderr}), inv.ContainerID, fmt.Errorf("exec %s: %w", runc, err))
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
	runc, err := create.LowLevelRuntime(cfg.Runtime.Runtimes, self)
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

// fail reports err the way runc does (runlog.Logger.Report) and exits 1.
func fail(log *runlog.Logger, id string, err error) {
	log.Report(id, err)
	log.Close()
	os.Exit(1)
}

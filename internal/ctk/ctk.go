// Package ctk is gpu-ctk's command tree. Run dispatches on the first argument to a command of
// the table below (each lives in its own file); a command receives the remaining arguments
// and the output streams, and returns an error: one wrapping ErrUsage for a bad command line
// (exit status 2), any other for a failure (exit status 1). Commands write results to stdout
// and diagnostics to stderr, and never call os.Exit.
package ctk

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/internal/version"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

// ErrUsage marks a bad command line; ExitCode maps it to 2.
var ErrUsage = errors.New("usage")

// command is one top-level gpu-ctk command: its line in gpu-ctk --help, and what runs it with
// the arguments that follow its name.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"cdi":          {"generate, check and list Container Device Interface specs (generate, list)", runCDI},
	"config":       {"print the configuration gpu-runtime uses, or change a key of its file (--set)", runConfig},
	"doctor":       {"check this host for GPU containers, one line per check, each with its fix", runDoctor},
	"explain":      {"show every edit a container would get, and why, or the error its create would fail with", runExplain},
	"health":       {"show, watch and change which GPUs gpu-runtime keeps from containers", runHealth},
	"info":         {"show the NVIDIA driver and GPUs gpu-runtime sees (queries NVML)", runInfo},
	"loaded":       {"say which running engines have the runtime \"gpu\" loaded, and how to restart them", runLoaded},
	"memory-limit": {"set, clear or show a GPU's per-cgroup memory limit (driver R615 or later; set by gpu-hook for shared claims)", runMemoryLimit},
	"mps":          {"run MPS shares: one MPS daemon per share of [mps.shares] (start, stop, status)", runMPS},
	"runtime":      {"register gpu-runtime with docker, containerd or cri-o (configure, unconfigure)", runRuntime},
	"system":       {"set the host up: /dev/char links for the systemd cgroup driver (create-dev-char-symlinks)", runSystem},
}

// Run runs gpu-ctk with args, the program name excluded.
func Run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		writeUsage(stderr)
		return fmt.Errorf("%w: no command given", ErrUsage)
	}
	switch args[0] {
	case "--version", "-version", "-v", "version":
		_, err := fmt.Fprintln(stdout, version.String("gpu-ctk"))
		return err
	case "--help", "-help", "-h", "help":
		writeUsage(stdout)
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q (gpu-ctk --help lists them)", ErrUsage, args[0])
	}
	return cmd.run(args[1:], stdout, stderr)
}

// ExitCode is the exit status for Run's error: 0, 2 for ErrUsage, ExitNotOffered (3) where the
// driver offers no per-cgroup GPU memory limits, 1 otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	case errors.Is(err, nvmlinfo.ErrMemoryLimitsNotOffered):
		return ExitNotOffered
	}
	return 1
}

func writeUsage(w io.Writer) {
	fmt.Fprint(w, "usage: gpu-ctk COMMAND [ARGS]\n\ngpu-ctk sets hosts up for gpu-runtime.\n\ncommands:\n")
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].summary)
	}
	fmt.Fprint(w, "\n  --version    print the version\n  --help       print this help; gpu-ctk COMMAND --help for a command's\n")
}

// parseFlags parses a command's flags. --help (or -h) prints usage and the flags to stdout
// and returns help = true: a command's --help succeeds. Other flag errors wrap ErrUsage and
// name where to look.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) (help bool, err error) {
	fs.SetOutput(io.Discard)
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = io.WriteString(stdout, usage)
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			_, _ = io.WriteString(stdout, "\nflags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w (%s --help)", ErrUsage, err, fs.Name())
	}
	return false, nil
}

// parseNoArgs is parseFlags for a command that takes flags only: an argument is an error
// naming the command and its --help.
func parseNoArgs(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) (help bool, err error) {
	if help, err = parseFlags(fs, args, usage, stdout); help || err != nil || fs.NArg() == 0 {
		return help, err
	}
	return false, fmt.Errorf("%w: %s takes no arguments, got %q (%s --help)", ErrUsage, strings.TrimPrefix(fs.Name(), "gpu-ctk "), fs.Args(), fs.Name())
}

// loadConfig reads gpu-runtime's configuration as the runtime does, warnings to stderr.
func loadConfig(stderr io.Writer) (config.Config, error) {
	cfg, warnings, err := config.LoadFromEnv(os.Getenv)
	warn(stderr, warnings...)
	return cfg, err
}

// warn prints warnings to stderr as gpu-ctk's own; an empty one is none.
func warn(stderr io.Writer, warnings ...string) {
	for _, w := range warnings {
		if w != "" {
			fmt.Fprintln(stderr, "gpu-ctk: warning: "+w)
		}
	}
}

// writeJSON prints v as every --json does: indented, one value and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

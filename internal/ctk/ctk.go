// Package ctk is gpu-ctk's command tree. Each top-level command lives in its own file and
// adds itself to the table from an init function:
//
//	func init() {
//		Register("info", "show what gpu-runtime finds on this host", runInfo)
//	}
//
// Run dispatches on the first argument; a command receives the remaining arguments and the
// output streams, and returns an error: one wrapping ErrUsage for a bad command line (exit
// status 2), any other for a failure (exit status 1). Commands write results to stdout and
// diagnostics to stderr, and never call os.Exit.
package ctk

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/version"
)

// ErrUsage marks a bad command line; ExitCode maps it to 2.
var ErrUsage = errors.New("usage")

// RunFunc runs a command with the arguments that follow its name.
type RunFunc func(args []string, stdout, stderr io.Writer) error

// Command is one top-level gpu-ctk command.
type Command struct {
	Name    string
	Summary string // one line for gpu-ctk --help
	Run     RunFunc
}

var commands = map[string]Command{}

// Register adds a top-level command. It panics on an empty or duplicate name, a programming
// error that every test run catches.
func Register(name, summary string, run RunFunc) {
	if name == "" || strings.HasPrefix(name, "-") || run == nil {
		panic(fmt.Sprintf("ctk: invalid command %q", name))
	}
	if _, dup := commands[name]; dup {
		panic(fmt.Sprintf("ctk: command %q registered twice", name))
	}
	commands[name] = Command{Name: name, Summary: summary, Run: run}
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
	return cmd.Run(args[1:], stdout, stderr)
}

// ExitCode is the exit status for Run's error: 0, 2 for ErrUsage, 1 otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	return 1
}

func writeUsage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: gpu-ctk COMMAND [ARGS]\n\ngpu-ctk sets hosts up for gpu-runtime.\n\ncommands:\n")
	for _, name := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", name, commands[name].Summary)
	}
	b.WriteString("\n  --version    print the version\n  --help       print this help; gpu-ctk COMMAND --help for a command's\n")
	_, _ = io.WriteString(w, b.String())
}

// parseFlags parses a command's flags. --help (or -h) prints usage and the flags to stdout
// and returns help = true: a command's --help succeeds. Other flag errors wrap ErrUsage and
// name where to look.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) (help bool, err error) {
	fs.SetOutput(io.Discard)
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = io.WriteString(stdout, usage)
		if hasFlags(fs) {
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

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// Package oci reads the low-level runtime's command line, loads and atomically rewrites a
// bundle's config.json — decoding only the members GPU injection reads or edits and carrying
// everything else over as read, so nothing this runtime-spec version does not know is lost —
// and provides small composable, idempotent edits of an OCI spec.
package oci

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrArgs marks a command line this package could not read; callers pass such a
// command line through to runc unchanged and let it report the problem.
var ErrArgs = errors.New("unreadable runtime arguments")

// ErrUnsupported marks a create/run command line gpu-runtime understands but cannot
// honour; callers must fail rather than start a container without its GPUs.
var ErrUnsupported = errors.New("unsupported runtime arguments")

// Invocation is what gpu-runtime needs to know about a runc command line.
type Invocation struct {
	// Command is the subcommand ("create", "run", "state", …); "" when none was given.
	Command string
	// Bundle is the --bundle/-b value for create, run and restore; "" (absent or empty, as
	// runc reads both) means the current directory.
	Bundle string
	// ContainerID is the first positional argument after the subcommand, if any.
	ContainerID string
	// Log and LogFormat are runc's global --log and --log-format ("text" when absent).
	Log       string
	LogFormat string
	// Version is set when --version/-v comes before any subcommand.
	Version bool
}

// Global flags of runc and crun that take a value. Every other global flag is boolean.
var globalValueFlags = map[string]bool{
	"log": true, "log-format": true, "log-level": true, "root": true, "criu": true,
	"rootless": true, "cgroup-manager": true,
}

// Flags of create, run and restore (runc and crun) that take a value.
var createValueFlags = map[string]bool{
	"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true,
	"config": true, "f": true,
	// restore's (CRIU): runc 1.1 and crun.
	"image-path": true, "work-path": true, "parent-path": true, "manage-cgroups-mode": true,
	"empty-ns": true, "lsm-profile": true, "lsm-mount-context": true,
}

// ModifiesSpec reports whether the subcommand creates a container from the bundle's spec:
// create, run, and restore (the engine's spec, without the GPU edits: CRIU needs the device
// nodes and mounts the checkpointed container had, so gpu-runtime injects them as on create).
func (inv Invocation) ModifiesSpec() bool {
	return inv.Command == "create" || inv.Command == "run" || inv.Command == "restore"
}

// BundleDir returns the bundle directory, resolving the default (cwd) and relative paths.
func (inv Invocation) BundleDir(cwd string) string {
	if inv.Bundle == "" {
		return cwd
	}
	if filepath.IsAbs(inv.Bundle) {
		return filepath.Clean(inv.Bundle)
	}
	return filepath.Join(cwd, inv.Bundle)
}

// flag splits "--name=value", "-name=value", "--name" or "-n" into name and inline value.
func flag(arg string) (name, value string, hasValue, ok bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", "", false, false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, value, hasValue = strings.Cut(name, "=")
	return name, value, hasValue, name != ""
}

// ParseArgs reads a runc-style command line (without the program name): global flags,
// the subcommand, then its flags and positional arguments. Flags accept the forms runc's
// CLI library accepts: --name value, --name=value, -name value, -name=value.
func ParseArgs(args []string) (Invocation, error) {
	inv := Invocation{LogFormat: "text"}
	i := 0
	for ; i < len(args); i++ {
		name, value, hasValue, ok := flag(args[i])
		if !ok {
			if args[i] == "--" {
				i++
			}
			break
		}
		if globalValueFlags[name] && !hasValue {
			if i+1 >= len(args) {
				return inv, fmt.Errorf("%w: global flag %q has no value", ErrArgs, args[i])
			}
			i++
			value = args[i]
		}
		switch name {
		case "version", "v":
			inv.Version = true
		case "log":
			inv.Log = value
		case "log-format":
			inv.LogFormat = value
		}
	}
	if i >= len(args) {
		return inv, nil
	}
	inv.Command = args[i]
	rest := args[i+1:]
	if !inv.ModifiesSpec() {
		return inv, nil
	}
	for j := 0; j < len(rest); j++ {
		arg := rest[j]
		name, value, hasValue, ok := flag(arg)
		if !ok {
			if rest[j] == "--" {
				if j+1 < len(rest) && inv.ContainerID == "" {
					inv.ContainerID = rest[j+1]
				}
				break
			}
			if inv.ContainerID == "" {
				inv.ContainerID = rest[j]
			}
			continue
		}
		if createValueFlags[name] && !hasValue {
			if j+1 >= len(rest) {
				return inv, fmt.Errorf("%w: flag %q of %s has no value", ErrArgs, rest[j], inv.Command)
			}
			j++
			value = rest[j]
		}
		switch name {
		case "bundle", "b":
			inv.Bundle = value // runc reads an empty --bundle as the current directory, as its absence

		case "config", "f":
			// crun's --config overrides the spec file name; gpu-runtime only edits
			// <bundle>/config.json, so refuse rather than silently inject nothing.
			return inv, fmt.Errorf("%w: %s %s %q: gpu-runtime only reads <bundle>/config.json", ErrUnsupported, inv.Command, strings.SplitN(arg, "=", 2)[0], value)
		}
	}
	return inv, nil
}

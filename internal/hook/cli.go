package hook

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/version"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// ErrBypassed: docker's GPU hook ran, so the container was not created through gpu-runtime.
var ErrBypassed = errors.New("container was created without gpu-runtime")

// Usage is gpu-hook's help.
const Usage = `usage: gpu-hook update-ldcache|proc-caps|memory-limit [flags] (run by gpu-runtime as an OCI hook)

gpu-hook is run by the low-level runtime, with the container's state on stdin, from the hook
entries gpu-runtime writes into a GPU container's spec:
  update-ldcache  make the injected libraries' links and the container's ld.so.cache
  proc-caps       show a MIG container only its capabilities of the driver's /proc interface
  memory-limit    set (createRuntime) or clear (poststop, --clear) a shared claim's GPU memory
                  limit on the container's cgroup v2 group, through gpu-ctk memory-limit
gpu-hook --version prints the version.
`

// Run executes one gpu-hook command line. argv0 is the name it was invoked as.
func Run(argv0 string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	// Packaging installs request.DockerHookName as a link to gpu-hook; gpu-runtime removes
	// that hook from every spec it handles, so it only runs when a --gpus container
	// bypassed gpu-runtime.
	if filepath.Base(argv0) == request.DockerHookName {
		return fmt.Errorf("%w: docker ran %s for a --gpus container; run it with --runtime=gpu, or set gpu as docker's default-runtime in /etc/docker/daemon.json", ErrBypassed, request.DockerHookName)
	}
	if len(args) == 0 {
		return errors.New(strings.TrimSpace(Usage))
	}
	fs := flag.NewFlagSet("gpu-hook "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch args[0] {
	case "--version", "-v", "version":
		fmt.Fprintln(stdout, version.String("gpu-hook"))
		return nil
	case "--help", "-h", "help":
		_, err := io.WriteString(stdout, Usage)
		return err
	case "update-ldcache":
		opts, log, err := parseUpdateLDCache(fs, args[1:])
		if err != nil {
			return err
		}
		root, user, err := ContainerRoot(stdin)
		if err != nil {
			return err
		}
		opts.User = user
		// The hook lives for milliseconds and holds a bounded amount: collecting garbage
		// would only cost time, unless something went far off.
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(512 << 20)
		res, err := UpdateLDCache(root, opts)
		var logErrs []error
		for _, w := range res.Warnings {
			fmt.Fprintln(stderr, "gpu-hook: warning: "+w)
			logErrs = append(logErrs, log.write("warning", "gpu-hook: "+w))
		}
		if note := res.Note(opts.LDConfig); note != "" {
			fmt.Fprintln(stderr, "gpu-hook: "+note)
			logErrs = append(logErrs, log.write("info", "gpu-hook: "+note))
		}
		if res.LDConfigOutput != "" {
			logErrs = append(logErrs, log.write("info", "gpu-hook: "+opts.LDConfig+" printed: "+res.LDConfigOutput))
		}
		if lerr := errors.Join(logErrs...); lerr != nil {
			fmt.Fprintln(stderr, "gpu-hook: warning: "+lerr.Error())
		}
		return err
	case "proc-caps":
		var caps []string
		procRoot := fs.String("proc-root", "/", "where the host's /proc is (driver.proc-root)")
		fs.Func("cap", "a MIG capability the container may open, e.g. gpu0/mig/gi1/access (repeatable)", func(c string) error {
			caps = append(caps, c)
			return nil
		})
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		root, _, err := ContainerRoot(stdin)
		if err != nil {
			return err
		}
		return ProcCaps(root, *procRoot, caps)
	case "memory-limit":
		return runMemoryLimit(fs, args[1:], stdin, stderr)
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
}

// parseUpdateLDCache parses the flags of update-ldcache (args after the subcommand) on fs.
func parseUpdateLDCache(fs *flag.FlagSet, args []string) (LDCacheOptions, runcLog, error) {
	var opts LDCacheOptions
	var timeout int
	fs.StringVar(&opts.LDConfig, "ldconfig", "/sbin/ldconfig", "the host's ldconfig (a static executable), run where the cache cannot be updated in-process")
	fs.StringVar(&opts.DriverVersion, "driver-version", "", "host driver version, for CUDA forward compatibility")
	fs.Func("library", "container path of an injected library (repeatable)", func(l string) error {
		opts.Libraries = append(opts.Libraries, ldupdate.Library{Path: l})
		return nil
	})
	fs.IntVar(&timeout, "timeout", 0, "the hook's timeout in seconds: ldconfig is stopped before it")
	log := runcLog{now: time.Now}
	fs.StringVar(&log.path, "log", "", "also append warnings and notes to this log file (the low-level runtime's --log)")
	fs.StringVar(&log.format, "log-format", "text", "the log file's format: text or json (the low-level runtime's --log-format)")
	if err := fs.Parse(args); err != nil {
		return opts, log, err
	}
	opts.Deadline = Deadline(timeout)
	return opts, log, nil
}

// Deadline is how long ldconfig may run inside a hook whose timeout is seconds: a margin
// less, so that the hook reports the timeout itself before the runtime kills it.
func Deadline(seconds int) time.Duration {
	if seconds <= 0 {
		return DefaultDeadline
	}
	d := time.Duration(seconds)*time.Second - time.Second
	if seconds > 10 {
		d = time.Duration(seconds)*time.Second - 2*time.Second
	}
	return max(d, 500*time.Millisecond)
}

// runMemoryLimit parses memory-limit's flags and runs it; a note (nothing done) goes to stderr
// and the runtime's log, and a failure to clear is logged, not returned: the container is gone.
func runMemoryLimit(fs *flag.FlagSet, args []string, stdin io.Reader, stderr io.Writer) error {
	var o MemoryLimitOptions
	var timeout int
	fs.StringVar(&o.CTK, "ctk", "", "gpu-ctk, which sets the limit through NVML (absolute path)")
	fs.StringVar(&o.DriverRoot, "driver-root", "/", "the driver root (driver.root)")
	fs.StringVar(&o.UUID, "device", "", "the shared GPU's UUID")
	fs.Uint64Var(&o.Bytes, "bytes", 0, "the limit in bytes: the memory the claim consumed")
	fs.BoolVar(&o.Clear, "clear", false, "clear the limit set at createRuntime (a poststop hook)")
	fs.StringVar(&o.StateDir, "state-dir", DefaultMemoryLimitStateDir, "where the cgroup of each limit is kept until it is cleared")
	fs.StringVar(&o.ProcRoot, "proc-root", "/", "where the host's /proc is, with the container's process (tests)")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", "", "where cgroup v2 is mounted (default: found in /proc/self/mountinfo)")
	fs.IntVar(&timeout, "timeout", 0, "the hook's timeout in seconds: gpu-ctk is stopped before it")
	log := runcLog{now: time.Now}
	fs.StringVar(&log.path, "log", "", "also append notes to this log file (the low-level runtime's --log)")
	fs.StringVar(&log.format, "log-format", "text", "the log file's format: text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	if !filepath.IsAbs(o.CTK) {
		errs = append(errs, fmt.Errorf("--ctk %q: want gpu-ctk's absolute path", o.CTK))
	}
	if o.UUID == "" {
		errs = append(errs, errors.New("--device is required"))
	}
	if !o.Clear && o.Bytes == 0 {
		errs = append(errs, errors.New("--bytes is required, above 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gpu-hook memory-limit: %w", err)
	}
	o.Deadline = Deadline(timeout)
	note, err := MemoryLimit(stdin, o)
	if err != nil && o.Clear {
		note, err = "warning: clear GPU memory limit: "+err.Error(), nil
	}
	if note != "" {
		fmt.Fprintln(stderr, "gpu-hook: "+note)
		if lerr := log.write("info", "gpu-hook: "+note); lerr != nil {
			fmt.Fprintln(stderr, "gpu-hook: warning: "+lerr.Error())
		}
	}
	return err
}

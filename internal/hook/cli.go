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
const Usage = `usage: gpu-hook update-ldcache|proc-caps [flags] (run by gpu-runtime as an OCI hook)

gpu-hook is run by the low-level runtime, with the container's state on stdin, from the hook
entries gpu-runtime writes into a GPU container's spec:
  update-ldcache  make the injected libraries' links and the container's ld.so.cache
  proc-caps       show a MIG container only its capabilities of the driver's /proc interface
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

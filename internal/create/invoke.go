package create

import (
	"errors"
	"io"

	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/runlog"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// Process is what one gpu-runtime invocation is given: its arguments (as oci.ParseArgs read
// them), its environment, its own path and working directory, and where errors go.
type Process struct {
	Args   []string
	Inv    oci.Invocation
	ArgErr error
	Getenv func(string) string
	Self   string
	Cwd    string
	Stderr io.Writer
}

// Outcome is what main does next: exec Runtime with the arguments unchanged, or, when Err is
// set, report it (unless Reported: it was) and exit 1. Log is the logger, open until main
// closes it; Level the level the exec's own log lines use.
type Outcome struct {
	Runtime  string
	Log      *runlog.Logger
	Level    logrus.Level
	Err      error
	Reported bool
}

// Invoke runs one invocation up to the exec. The configuration is read whole for create and
// run, only its [runtime] section for other commands. A broken configuration must not take
// down every container of the host: for a command that edits no spec, and a create that asks
// for no GPU, it is a warning and the container runs unchanged through the runtime the
// [runtime] section (or the default) names; a create that asks for GPUs fails with it. The
// low-level runtime is found before the spec is touched: a create must not leave an edited
// spec behind.
func Invoke(p Process) Outcome {
	inv := p.Inv
	var cfg config.Config
	var warnings []string
	var cfgErr error
	if inv.ModifiesSpec() {
		cfg, warnings, cfgErr = config.LoadFromEnv(p.Getenv)
	} else {
		cfg, cfgErr = config.LoadRuntimeFromEnv(p.Getenv)
	}
	out := Outcome{Level: logrus.InfoLevel}
	switch {
	case cfgErr == nil:
		out.Level = cfg.Level()
	case inv.ModifiesSpec():
		// Which runtime, and where to log, if the [runtime] section can still be read.
		cfg, _ = config.LoadRuntimeFromEnv(p.Getenv)
	default:
		cfg = config.Default()
	}
	out.Log = runlog.New(runlog.Options{RuncLog: inv.Log, Format: inv.LogFormat, ExtraFile: cfg.Runtime.LogFile, Level: out.Level, Stderr: p.Stderr})
	var lines logrus.FieldLogger = out.Log
	if inv.ContainerID != "" {
		lines = out.Log.WithField("container_id", inv.ContainerID)
	}
	for _, w := range warnings {
		lines.Warn(w)
	}
	runc, err := LowLevelRuntime(cfg.Runtime.Runtimes, p.Self)
	out.Runtime = runc
	if !inv.ModifiesSpec() {
		if cfgErr != nil {
			lines.WithError(cfgErr).Warn("config unusable; using default runtimes for " + inv.Command)
		}
		out.Err = err
		return out
	}
	if cfgErr != nil && p.ArgErr == nil && err == nil && !AsksForGPU(inv, p.Cwd) {
		lines.WithError(cfgErr).Warn("config unusable; the container asks for no GPU, so it runs unchanged through " + runc)
		return out
	}
	// An argument error that is not oci.ErrUnsupported passes through to runc, which
	// reports its own.
	var unsupported error
	if errors.Is(p.ArgErr, oci.ErrUnsupported) {
		unsupported = p.ArgErr
	}
	if out.Err = errors.Join(cfgErr, unsupported, err); out.Err == nil && p.ArgErr == nil {
		out.Err = PrepareBundle(inv, Options{Config: cfg, Executable: p.Self, Cwd: p.Cwd, Logger: out.Log,
			HandOff: HandOffToCTK(p.Self, p.Args, cfg.CDI.TimeoutDuration())})
	}
	out.Reported = errors.Is(out.Err, ErrReported)
	return out
}

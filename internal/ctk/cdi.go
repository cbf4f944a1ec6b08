package ctk

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	specsgo "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/cdi"
	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/internal/runlog"
	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

const cdiUsage = `usage:
  gpu-ctk cdi generate [--output FILE] [--format yaml|json] [--kind nvidia.com/gpu]
                       [--device-name-strategy index|uuid|both] [--capabilities LIST]
                       [--check FILE] [--mode gpu|gds|mofed|gdrcopy|nvswitch]
  gpu-ctk cdi list

generate writes a CDI spec for this host, read with gpu-runtime's configuration (driver.root,
dev-root, proc-root, hook.path; GPU_RUNTIME_CONFIG): a device per GPU not in MIG mode and per
MIG device, named by index (0, 0:1) and/or UUID, and "all". The spec carries the driver files
of every capability unless --capabilities names fewer (CDI cannot see the container's
NVIDIA_DRIVER_CAPABILITIES). Without --output it goes to stdout; --output replaces FILE
atomically by a new file of mode 0644 that belongs to the user gpu-ctk runs as (root): a
symbolic link at FILE is replaced, never followed. With --check FILE nothing is written: the exit status is 1, with what differs,
when FILE no longer matches this host (a driver upgrade, a MIG reconfiguration).
--mode gds, mofed, gdrcopy or nvswitch writes instead the spec of that DGX/HGX feature, as
NVIDIA's nvidia-ctk does: kind nvidia.com/<mode> (--kind changes it), one device "all" with
the host's nodes of the feature (an error where the host has none).

list prints the fully qualified names of the devices the specs in cdi.spec-dirs offer.
`

func runCDI(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, cdiUsage)
		return fmt.Errorf("%w: gpu-ctk cdi needs generate or list", ErrUsage)
	}
	switch args[0] {
	case "generate":
		return cdiGenerate(args[1:], stdout, stderr)
	case "list":
		return cdiList(args[1:], stdout, stderr)
	case "inject":
		return cdiInject(args[1:], stderr)
	case "--help", "-help", "-h", "help":
		_, err := io.WriteString(stdout, cdiUsage)
		return err
	}
	return fmt.Errorf("%w: unknown cdi command %q (gpu-ctk cdi --help)", ErrUsage, args[0])
}

func cdiGenerate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk cdi generate", flag.ContinueOnError)
	output := fs.String("output", "", "write the spec to FILE (atomically) instead of stdout")
	format := fs.String("format", "", "yaml or json (default: from --output's extension, else yaml)")
	kind := fs.String("kind", cdi.DefaultKind, "the spec's kind, vendor.com/class")
	strategy := fs.String("device-name-strategy", cdi.NameBoth, "name devices by index, uuid or both")
	capsFlag := fs.String("capabilities", "all", "driver capabilities whose files the spec carries, as NVIDIA_DRIVER_CAPABILITIES")
	check := fs.String("check", "", "compare FILE with the spec this host would get; write nothing")
	mode := fs.String("mode", "gpu", "gpu (the GPUs), or a DGX/HGX feature's spec: gds, mofed, gdrcopy, nvswitch")
	if help, err := parseNoArgs(fs, args, cdiUsage, stdout); help || err != nil {
		return err
	}
	feature, err := featureMode(*mode)
	if err != nil {
		return err
	}
	kindSet := false
	fs.Visit(func(f *flag.Flag) { kindSet = kindSet || f.Name == "kind" })
	if feature != "" && !kindSet {
		*kind = cdi.FeatureKind(feature)
	}
	caps, err := capabilities.Parse(*capsFlag)
	if err != nil {
		return fmt.Errorf("%w: --capabilities: %w", ErrUsage, err)
	}
	if *format == "" && (strings.HasSuffix(*output, ".json") || strings.HasSuffix(*check, ".json")) {
		*format = "json" // else cdi.Marshal's default, yaml
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	h, r, err := hostFromConfig(cfg)
	if err != nil {
		return err
	}
	var spec *specsgo.Spec
	var warnings []string
	if feature != "" {
		spec, err = cdi.GenerateFeature(h, feature, *kind)
	} else {
		spec, warnings, err = cdi.Generate(h, r, cdi.GenerateOptions{Kind: *kind, NameStrategy: *strategy, Capabilities: caps})
	}
	warn(stderr, warnings...)
	if err != nil {
		return err
	}
	if *check != "" {
		return checkSpec(*check, spec, stdout)
	}
	data, err := cdi.Marshal(spec, *format)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if *output == "" {
		_, err = stdout.Write(data)
		return err
	}
	// /var/run/cdi is on a tmpfs: at boot it does not exist yet.
	if err := os.MkdirAll(filepath.Dir(*output), 0o755); err != nil {
		return err
	}
	// A symbolic link at the output path is replaced by the spec, never followed: one planted
	// in a spec directory others can write to would aim root's write at any file, and no
	// link is read as a spec (internal/cdi's specRule). The new file is root's, mode 0644, whoever
	// owned what it replaces: the rule spec files are read by.
	var replaced string
	if fi, err := os.Lstat(*output); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(*output)
		replaced = fmt.Sprintf("%s was a symbolic link (to %s): replaced by the spec; links are not read as CDI specs", *output, target)
	}
	if err := atomicfile.Write(*output, data, 0o644, atomicfile.Options{}); err != nil {
		return err
	}
	warn(stderr, replaced)
	fmt.Fprintf(stdout, "wrote %s: %d devices of kind %s, CDI version %s\n", *output, len(spec.Devices), spec.Kind, spec.Version)
	return nil
}

// featureMode reads --mode: "" for the GPUs' spec, else the DGX/HGX feature.
func featureMode(mode string) (request.Feature, error) {
	names := []string{"gpu"}
	for _, f := range request.Features {
		if string(f.Feature) == mode {
			return f.Feature, nil
		}
		names = append(names, string(f.Feature))
	}
	if mode == "gpu" {
		return "", nil
	}
	return "", fmt.Errorf("%w: --mode %q: want %s", ErrUsage, mode, strings.Join(names, ", "))
}

// checkSpec compares the spec in file with want and says what differs.
func checkSpec(file string, want *specsgo.Spec, stdout io.Writer) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	got, err := cdilib.ParseSpec(data)
	if err != nil {
		return fmt.Errorf("%s: not a CDI spec: %w", file, err)
	}
	diffs := cdi.Diff(got, want)
	if len(diffs) == 0 {
		fmt.Fprintf(stdout, "%s matches this host\n", file)
		return nil
	}
	return fmt.Errorf("%s no longer matches this host (regenerate it: gpu-ctk cdi generate --output %s):\n  %s", file, file, strings.Join(diffs, "\n  "))
}

// hostFromConfig builds the host for a CDI spec in this process (internal/gpuhost): NVML
// directly, bounded by discovery.timeout (the CDI unit runs before the engines start), no
// cache, no health (a spec lists devices; CDI-native engines check none at create). It
// returns how hooks are written too.
func hostFromConfig(cfg config.Config) (plan.Host, plan.Render, error) {
	res, err := gpuhost.Build(cfg, gpuhost.Options{Query: nvmlinfo.QueryContext})
	if err != nil {
		return plan.Host{}, plan.Render{}, err
	}
	self, _ := os.Executable()
	r, err := create.Render(create.Options{Config: cfg, Executable: self})
	return res.Host, r, err
}

func cdiList(args []string, stdout, stderr io.Writer) error {
	if help, err := parseNoArgs(flag.NewFlagSet("gpu-ctk cdi list", flag.ContinueOnError), args, cdiUsage, stdout); help || err != nil {
		return err
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	r := cdi.NewResolver(cfg.CDI.SpecDirs, cfg.CDI.AllowedKinds)
	for _, p := range r.Problems() {
		warn(stderr, "spec not loaded: "+p)
	}
	var b strings.Builder
	for _, d := range r.Devices() {
		b.WriteString(d + "\n")
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

// ErrReported: gpu-ctk cdi inject reported its error itself, as gpu-runtime would.
var ErrReported = create.ErrReported

// cdiInject is the other half of gpu-runtime's hand-off of a create that names CDI devices
// (create.HandOffToCTK): `gpu-ctk cdi inject -- <gpu-runtime's arguments>` runs the
// runtime's create path with the CDI library, logging where gpu-runtime logs.
func cdiInject(args []string, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "--" {
		return fmt.Errorf("%w: cdi inject is run by gpu-runtime: gpu-ctk cdi inject -- <runtime arguments>", ErrUsage)
	}
	inv, err := oci.ParseArgs(args[1:])
	if err != nil || !inv.ModifiesSpec() {
		return fmt.Errorf("%w: cdi inject: not a create, run or restore command line: %q", ErrUsage, args[1:])
	}
	cfg, warnings, cfgErr := config.LoadFromEnv(os.Getenv)
	level := logrus.InfoLevel
	if cfgErr == nil {
		level = cfg.Level()
	}
	log := runlog.New(runlog.Options{RuncLog: inv.Log, Format: inv.LogFormat, ExtraFile: cfg.Runtime.LogFile, Level: level, Stderr: stderr})
	defer log.Close()
	for _, w := range warnings {
		log.Warn(w)
	}
	err = cfgErr
	if err == nil {
		r := cdi.NewResolver(cfg.CDI.SpecDirs, cfg.CDI.AllowedKinds)
		for _, p := range r.Problems() {
			log.WithField("container_id", inv.ContainerID).Warn("CDI spec not loaded: " + p)
		}
		self, _ := os.Executable()
		cwd, _ := os.Getwd()
		// NVML in this process: no gpu-ctk child of gpu-ctk.
		err = create.PrepareBundle(inv, create.Options{Config: cfg, Executable: self, Cwd: cwd, Logger: log, CDI: r, QueryNVML: nvmlinfo.QueryContext})
	}
	if err != nil {
		log.Report(inv.ContainerID, err) // as gpu-runtime reports its own
		return ErrReported
	}
	return nil
}

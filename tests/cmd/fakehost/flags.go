package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// config is what the command line asks for.
type config struct {
	dir            string
	opts           fakehost.Options
	mig            migFlag
	excluded       indexFlag
	persistenceOff indexFlag
}

const usage = "usage: fakehost --dir DIR [--gpus N] [--driver-version V] [--cuda-version 12040] [--arch arm64]\n" +
	"                [--mig GPU=PROFILE,...]... [--proc-interface] [--excluded GPU,...] [--persistence-off GPU,...]"

// parseFlags parses the command line; usage problems are errors.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	defaults := fakehost.Default(0)
	fs := flag.NewFlagSet("fakehost", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run reports errors; -h prints the defaults below
	fs.Usage = func() {}
	cfg := &config{mig: migFlag{}}
	fs.StringVar(&cfg.dir, "dir", "", "directory to build the host in; must be empty or not exist (required)")
	gpus := fs.Int("gpus", 2, "number of GPUs")
	driverVersion := fs.String("driver-version", defaults.DriverVersion, "NVIDIA driver version")
	cudaVersion := fs.Int("cuda-version", defaults.CUDAVersion, "CUDA version in NVML form (12040 is 12.4)")
	initError := fs.Bool("nvml-init-error", false, "make nvmlInit fail with NVML_ERROR_DRIVER_NOT_LOADED")
	noSocket := fs.Bool("no-persistenced-socket", false, "do not create the nvidia-persistenced socket")
	fs.Var(&cfg.mig, "mig", "`GPU=PROFILE,...`: put the GPU in MIG mode with MIG devices of these profiles, e.g. 0=3g.40gb,2g.20gb,1g.10gb (repeatable, or ;-separated)")
	arch := fs.String("arch", "", "build the driver libraries for this Go architecture, e.g. arm64 (needs its cross compiler: gcc-aarch64-linux-gnu libc6-dev-arm64-cross); default this machine's")
	procInterface := fs.Bool("proc-interface", false, "the driver uses the /proc interface for MIG capabilities: no nvidia-caps major, no /dev/nvidia-caps")
	fs.Var(&cfg.excluded, "excluded", "`GPU,...`: mark these GPUs excluded from the driver (GPU Excluded: Yes; NVML does not list them)")
	gds := fs.Int("gds", 0, "number of GPUDirect Storage nodes /dev/nvidia-fs<N> (NVIDIA_GDS)")
	mofed := fs.Int("mofed", 0, "number of InfiniBand verbs nodes /dev/infiniband/uverbs<N>, with rdma_cm (NVIDIA_MOFED)")
	gdrcopy := fs.Bool("gdrcopy", false, "make GDRCopy's /dev/gdrdrv (NVIDIA_GDRCOPY)")
	nvswitches := fs.Int("nvswitches", 0, "number of NVSwitch nodes /dev/nvidia-nvswitch<N>, with nvidia-nvswitchctl (NVIDIA_NVSWITCH)")
	fs.Var(&cfg.persistenceOff, "persistence-off", "`GPU,...`: turn persistence mode off on these GPUs")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stderr)
		_, _ = fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, usage)
	}
	switch {
	case cfg.dir == "":
		return nil, errors.New("--dir is required\n" + usage)
	case *gpus < 0:
		return nil, fmt.Errorf("--gpus %d: the number of GPUs cannot be negative", *gpus)
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), usage)
	}
	cfg.opts = fakehost.Default(*gpus)
	cfg.opts.DriverVersion = *driverVersion
	cfg.opts.CUDAVersion = *cudaVersion
	cfg.opts.NVMLInitError = *initError
	cfg.opts.WithPersistencedSocket = !*noSocket
	cfg.opts.MIGCapsProcInterface = *procInterface
	cfg.opts.Features = fakehost.Features{GDS: *gds, MOFED: *mofed, GDRCopy: *gdrcopy, NVSwitches: *nvswitches}
	cfg.opts.Arch = *arch
	if err := cfg.apply(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// apply puts the per-GPU flags into the options, reporting every GPU that does not exist and
// every MIG layout that does not fit.
func (cfg *config) apply() error {
	var errs []error
	gpu := func(flag string, i int) *fakehost.GPU {
		if i >= len(cfg.opts.GPUs) {
			errs = append(errs, fmt.Errorf("%s: GPU %d does not exist: the host has %d GPUs (--gpus)", flag, i, len(cfg.opts.GPUs)))
			return nil
		}
		return &cfg.opts.GPUs[i]
	}
	for _, i := range cfg.excluded {
		if g := gpu("--excluded", i); g != nil {
			g.Excluded = true
		}
	}
	for _, i := range cfg.persistenceOff {
		if g := gpu("--persistence-off", i); g != nil {
			g.PersistenceDisabled = true
		}
	}
	for _, i := range cfg.mig.indexes() {
		g := gpu("--mig", i)
		if g == nil {
			continue
		}
		if err := g.AddMIGDevices(cfg.mig[i]...); err != nil {
			errs = append(errs, fmt.Errorf("--mig %d=%s: %w", i, strings.Join(cfg.mig[i], ","), err))
		}
	}
	return errors.Join(errs...)
}

func (cfg *config) build() (*fakehost.Host, error) {
	return fakehost.Build(cfg.dir, cfg.opts)
}

// migFlag collects --mig values: GPU index => MIG profiles.
type migFlag map[int][]string

func (m migFlag) String() string {
	var parts []string
	for _, i := range m.indexes() {
		parts = append(parts, strconv.Itoa(i)+"="+strings.Join(m[i], ","))
	}
	return strings.Join(parts, ";")
}

// Set parses "GPU=PROFILE,PROFILE..." parts, separated by ";".
func (m migFlag) Set(value string) error {
	for _, part := range strings.Split(value, ";") {
		index, profiles, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%q is not GPU=PROFILE,..., e.g. 0=3g.40gb,1g.10gb", part)
		}
		i, err := strconv.Atoi(index)
		if err != nil || i < 0 {
			return fmt.Errorf("%q: GPU %q is not a GPU index", part, index)
		}
		if _, dup := m[i]; dup {
			return fmt.Errorf("%q: GPU %d is given twice", part, i)
		}
		list := strings.Split(profiles, ",")
		if slices.Contains(list, "") {
			return fmt.Errorf("%q: empty MIG profile", part)
		}
		m[i] = list
	}
	return nil
}

func (m migFlag) indexes() []int {
	var idx []int
	for i := range m {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx
}

// indexFlag collects GPU indexes, comma-separated or repeated.
type indexFlag []int

func (f *indexFlag) String() string {
	var s []string
	for _, i := range *f {
		s = append(s, strconv.Itoa(i))
	}
	return strings.Join(s, ",")
}

func (f *indexFlag) Set(value string) error {
	for _, part := range strings.Split(value, ",") {
		i, err := strconv.Atoi(part)
		if err != nil || i < 0 {
			return fmt.Errorf("%q is not a GPU index", part)
		}
		*f = append(*f, i)
	}
	return nil
}

// report returns the KEY=value lines describing a built host.
func report(h *fakehost.Host) [][2]string {
	var uuids, migUUIDs []string
	for _, g := range h.Options.GPUs {
		uuids = append(uuids, g.UUID)
	}
	for _, m := range h.MIGDevices() {
		migUUIDs = append(migUUIDs, m.UUID)
	}
	capsMajor := ""
	if h.CapsMajor != 0 {
		capsMajor = strconv.Itoa(h.CapsMajor)
	}
	return [][2]string{
		{"FAKEHOST_DIR", h.Dir},
		{"DRIVER_ROOT", h.DriverRoot},
		{"DEV_ROOT", h.DevRoot},
		{"PROC_ROOT", h.ProcRoot},
		{"SYS_ROOT", h.SysRoot},
		{"LIB_DIR", h.LibDir},
		{"NVML_LIBRARY", h.NVMLPath()},
		{"NVML_EVENTS", h.NVMLEvents},
		{"DRIVER_VERSION", h.Options.DriverVersion},
		{"CUDA_VERSION", strconv.Itoa(h.Options.CUDAVersion)},
		{"GPU_COUNT", strconv.Itoa(len(h.Options.GPUs))},
		{"GPU_UUIDS", strings.Join(uuids, ",")},
		{"MIG_UUIDS", strings.Join(migUUIDs, ",")},
		{"UVM_MAJOR", strconv.Itoa(h.UVMMajor)},
		{"CAPS_MAJOR", capsMajor},
	}
}

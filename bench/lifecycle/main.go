// Command lifecycle measures what gpu-runtime adds to a container's lifecycle. It drives the
// runtime the way containerd's shim does — create (with --log <bundle>/log.json --log-format
// json and --pid-file), start, wait for the init process to exit, delete — on fresh busybox
// bundles running /bin/true, on fake GPU hosts (internal/fakehost), and compares variants in
// alternating pairs:
//
//   - a GPU container (8 GPUs, NVIDIA_VISIBLE_DEVICES=all) through gpu-runtime vs plain runc,
//     on a busybox rootfs and on a realistic CUDA image (internal/testimage: 1,500 libraries
//     and an ld.so.cache), and the realistic image vs busybox through gpu-runtime;
//   - the same vs runc given the very spec gpu-runtime wrote (the floor for spec injection);
//   - a non-GPU container through gpu-runtime vs plain runc, against a Go program that only
//     execs runc (the floor of any Go wrapper);
//   - 16 GPUs vs 1 GPU through gpu-runtime;
//   - CDI injection through plain runc, for reference.
//
// It also measures gpu-runtime alone (its low-level runtime set to true(1)) for peak RSS and
// wrapper time, and traces exec/exit events (Linux proc connector) to count the processes a
// container spawns and to time the wrapper, the hook and ldconfig in situ. It prints medians,
// p90s and ratios next to the targets (information, not assertions) and writes them
// as markdown. See bench/README.md. Needs root; run from the repository root after make build:
//
//	go run ./bench/lifecycle -pairs 30
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type options struct {
	pairs, warmup, isolation, traces       int
	out, runtime, hook, ctk, runc, workdir string
	baseline                               string
	bundleDir                              string
	seed                                   uint64
	verbose                                bool
}

func main() {
	var o options
	flag.IntVar(&o.pairs, "pairs", 100, "alternating pairs per comparison (the issue asks for medians of at least 30; on a noisy 2-core VM 30 leave 95% CIs of ±0.08)")
	flag.StringVar(&o.out, "out", "bench/results.md", "markdown results file; \"-\" for stdout only")
	flag.StringVar(&o.runtime, "runtime", "bin/gpu-runtime", "the gpu-runtime binary under test")
	flag.StringVar(&o.hook, "hook", "bin/gpu-hook", "the gpu-hook binary gpu-runtime writes into specs (config hook.path)")
	flag.StringVar(&o.ctk, "ctk", "bin/gpu-ctk", "the gpu-ctk binary that writes the CDI spec of the CDI variant")
	flag.StringVar(&o.runc, "runc", "runc", "runc: a name looked up in PATH, or a path")
	flag.StringVar(&o.baseline, "baseline", "", "a directory with another build's gpu-runtime and gpu-hook (e.g. an earlier commit's bin/): its GPU containers are measured in the same run, against plain runc and against the build under test")
	flag.StringVar(&o.workdir, "workdir", "", "parent directory for the fake GPU hosts (the driver files) and configs (default $TMPDIR or /tmp)")
	flag.StringVar(&o.bundleDir, "bundle-dir", "auto", "parent directory for bundles and runc state; \"auto\": a tmpfs (/run, else /dev/shm) as containerd uses, \"\": inside -workdir. Its filesystem matters, see bench/README.md")
	flag.Uint64Var(&o.seed, "seed", 0, "seed for the random order of comparisons within a round (0: from the clock; the seed used is printed)")
	flag.IntVar(&o.warmup, "warmup", 2, "untimed lifecycles per variant before measuring")
	flag.IntVar(&o.isolation, "isolation", 15, "samples per case of gpu-runtime in isolation (low-level runtime = true(1)): peak RSS and wrapper time")
	flag.IntVar(&o.traces, "trace", 5, "traced lifecycles per variant (process count, in-situ breakdown); 0 skips tracing")
	flag.BoolVar(&o.verbose, "v", false, "print every sample")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench/lifecycle [flags]   (as root, from the repository root, after make build)\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || o.pairs < 1 || o.warmup < 0 || o.isolation < 1 || o.traces < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	os.Exit(run(o))
}

var errInterrupted = errors.New("interrupted")

// run sets up, measures, reports and always cleans up; it returns the exit code.
func run(o options) int {
	runc, runtime, hook, ctk, noop, err := preflight(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lifecycle: "+err.Error())
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "\nlifecycle: %v: stopping after the step in flight, then removing every container, bundle and fake host (further signals are ignored)\n", s)
		cancel()
	}()
	// Like containerd's shim, be the subreaper of the containers' init processes, so that
	// waiting for one is a wait4, not polling.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "lifecycle: cannot become a child subreaper (%v); waiting for exits falls back to polling\n", err)
	}

	code := 0
	l, err := newLab(o.workdir, o.bundleDir, runc, runtime, hook, ctk, noop)
	if err == nil && o.baseline != "" {
		l.baseRuntime, l.baseHook, err = baseline(o.baseline)
	}
	if err == nil {
		err = measure(ctx, o, l)
	}
	switch {
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(os.Stderr, "lifecycle: interrupted; no results written")
		code = 130
	case err != nil:
		fmt.Fprintln(os.Stderr, "lifecycle: "+err.Error())
		code = 1
	}
	if l != nil {
		progress("cleaning up %s and %s", l.work, l.run)
		if err := l.cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, "lifecycle: cleanup: "+err.Error())
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lifecycle: "+format+"\n", args...)
}

// comparison is one A-vs-B question, answered from alternating pairs.
type comparison struct {
	key    string // what the report looks it up by
	title  string
	a, b   *variant
	target float64 // the bound on median(A)/median(B); 0: none, or see floorOf
	// floorOf, when set, makes the target the median ratio of that comparison, measured in
	// the same run, plus floorPlus.
	floorOf   string
	floorPlus float64
	as, bs    []sample
}

// isoCase is gpu-runtime (or a reference program) run alone with true(1) as its runtime.
type isoCase struct {
	key, label     string
	gpu            bool // a GPU create: counts for the RSS target
	reference      bool // not gpu-runtime: no "minus true(1)"
	binary, config string
	spec           []byte   // bundle config.json; nil: no bundle
	args           []string // nil: the create command line
	created        bool     // a real container was created: delete it and reap its init
	wall           []float64
	rss            []int64
}

func measure(ctx context.Context, o options, l *lab) error {
	interrupted := func() bool { return ctx.Err() != nil }

	progress("building fake GPU hosts with 1, 8 and 16 GPUs in %s", l.work)
	cfg, noopCfg := map[int]string{}, map[int]string{}
	var noCache8, baseCfg8 string // the 8-GPU host's: without its discovery cache; the -baseline build's
	for _, n := range []int{1, 8, 16} {
		c, err := l.buildHost(n)
		if err != nil {
			return fmt.Errorf("build fake host with %d GPUs: %w", n, err)
		}
		cfg[n], noopCfg[n] = c.runc, c.noop
		if n == 8 {
			noCache8, baseCfg8 = c.noopCold, c.base
		}
		if interrupted() {
			return errInterrupted
		}
	}
	tmpl, err := l.specTemplate()
	if err != nil {
		return err
	}
	specGPU, err := specJSON(tmpl, "NVIDIA_VISIBLE_DEVICES=all")
	if err != nil {
		return err
	}
	specPlain, err := specJSON(tmpl)
	if err != nil {
		return err
	}
	// What an nvidia/cuda image carries (trimmed): its NVIDIA_REQUIRE_CUDA, which gpu-runtime
	// checks at create (earlier builds: with a prestart hook process).
	specCUDA, err := specJSON(tmpl, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility", "CUDA_VERSION=12.4.1",
		"NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=tesla,driver>=535,driver<536")
	if err != nil {
		return err
	}
	specSame, err := l.captureSpec(specGPU, noopCfg[8])
	if err != nil {
		return err
	}
	progress("building the realistic image (internal/testimage: 1,500 libraries, CUDA libraries, an ld.so.cache by ldconfig) in %s", l.run)
	if err := l.buildRealistic(); err != nil {
		return err
	}
	progress("writing a CDI spec for the 8-GPU host with gpu-ctk and injecting %s=all with the CDI library", cdiKind)
	cdiInj, err := l.cdiSpec(specPlain, cfg[8])
	if err != nil {
		return err
	}

	gpu8 := &variant{key: "gpu8", label: "gpu-runtime, 8 GPUs", binary: l.runtime, config: cfg[8], spec: specGPU}
	gpu1 := &variant{key: "gpu1", label: "gpu-runtime, 1 GPU", binary: l.runtime, config: cfg[1], spec: specGPU}
	gpu16 := &variant{key: "gpu16", label: "gpu-runtime, 16 GPUs", binary: l.runtime, config: cfg[16], spec: specGPU}
	nonGPU := &variant{key: "nongpu", label: "gpu-runtime, non-GPU container", binary: l.runtime, config: cfg[8], spec: specPlain}
	runcPlain := &variant{key: "runc", label: "runc, no GPUs", binary: l.runc, config: cfg[8], spec: specPlain}
	runcSame := &variant{key: "runc-same-spec", label: "runc, gpu-runtime's 8-GPU spec", binary: l.runc, config: cfg[8], spec: specSame}
	goExec := &variant{key: "goexec", label: "a static Go program that only execs runc, no GPUs", binary: l.goExec, config: cfg[8], spec: specPlain}
	runcCDI := &variant{key: "runc-cdi", label: "runc, 8 GPUs injected by CDI (as containerd 2.x, cri-o, podman)", binary: l.runc, config: cfg[8], spec: cdiInj.spec}
	cuda8 := &variant{key: "gpu8-cuda", label: "gpu-runtime, 8 GPUs, CUDA image env (NVIDIA_REQUIRE_CUDA)", binary: l.runtime, config: cfg[8], spec: specCUDA}
	gpu8Real := &variant{key: "gpu8-real", label: "gpu-runtime, 8 GPUs, realistic image", binary: l.runtime, config: cfg[8], spec: specGPU, image: imageRealistic}
	runcReal := &variant{key: "runc-real", label: "runc, no GPUs, realistic image", binary: l.runc, config: cfg[8], spec: specPlain, image: imageRealistic}
	variants := []*variant{gpu8, runcPlain, gpu8Real, runcReal, cuda8, runcSame, nonGPU, gpu1, gpu16, goExec, runcCDI}
	comps := []*comparison{
		{key: "gpu-vs-runc", title: "GPU container (8 GPUs) through gpu-runtime vs plain runc without GPUs, busybox", a: gpu8, b: runcPlain, target: 1.25},
		{key: "gpu-vs-runc-real", title: "GPU container (8 GPUs) through gpu-runtime vs plain runc without GPUs, realistic image", a: gpu8Real, b: runcReal, target: 1.25},
		{key: "cuda-vs-runc", title: "GPU container (8 GPUs) with a CUDA image's env (NVIDIA_REQUIRE_CUDA) through gpu-runtime vs plain runc without GPUs, busybox", a: cuda8, b: runcPlain, target: 1.25},
		{key: "real-vs-busybox", title: "GPU container (8 GPUs) through gpu-runtime, realistic image vs busybox", a: gpu8Real, b: gpu8, target: 1.05},
		{key: "gpu-vs-same-spec", title: "gpu-runtime (8 GPUs) vs runc given the spec gpu-runtime wrote", a: gpu8, b: runcSame, target: 1.15},
		{key: "nongpu-vs-runc", title: "non-GPU container through gpu-runtime vs plain runc", a: nonGPU, b: runcPlain, floorOf: "goexec-vs-runc", floorPlus: 0.03},
		{key: "16-vs-1", title: "16 GPUs vs 1 GPU through gpu-runtime", a: gpu16, b: gpu1, target: 1.10},
		// No targets: what a CDI-native engine's GPU container costs, with no wrapper in the path.
		{key: "cdi-vs-runc", title: "GPU container (8 GPUs) injected by CDI, plain runc, vs plain runc without GPUs", a: runcCDI, b: runcPlain},
		{key: "gpu-vs-cdi", title: "gpu-runtime (8 GPUs) vs plain runc given the CDI-injected spec", a: gpu8, b: runcCDI},
		// No target: what the realistic image costs runc itself, without GPUs — the part of
		// the realistic-vs-busybox ratio that no change to gpu-runtime can remove.
		{key: "runc-real-vs-busybox", title: "reference: plain runc without GPUs, realistic image vs busybox", a: runcReal, b: runcPlain},
		// No target: what any Go wrapper costs here (the issue quotes 1.07 on its machine).
		{key: "goexec-vs-runc", title: "reference: a static Go program that only execs runc vs plain runc", a: goExec, b: runcPlain},
	}
	if l.baseRuntime != "" {
		// The same containers through another build, in the same run: what the change did.
		base := &variant{key: "base-gpu8", label: "baseline gpu-runtime, 8 GPUs", binary: l.baseRuntime, config: baseCfg8, spec: specGPU}
		baseReal := &variant{key: "base-gpu8-real", label: "baseline gpu-runtime, 8 GPUs, realistic image", binary: l.baseRuntime, config: baseCfg8, spec: specGPU, image: imageRealistic}
		baseCUDA := &variant{key: "base-gpu8-cuda", label: "baseline gpu-runtime, 8 GPUs, CUDA image env", binary: l.baseRuntime, config: baseCfg8, spec: specCUDA}
		variants = append(variants, base, baseReal, baseCUDA)
		comps = append(comps,
			&comparison{key: "base-gpu-vs-runc", title: "baseline: GPU container (8 GPUs) vs plain runc, busybox", a: base, b: runcPlain},
			&comparison{key: "base-gpu-vs-runc-real", title: "baseline: GPU container (8 GPUs) vs plain runc, realistic image", a: baseReal, b: runcReal},
			&comparison{key: "base-cuda-vs-runc", title: "baseline: CUDA image env (8 GPUs) vs plain runc, busybox", a: baseCUDA, b: runcPlain},
			&comparison{key: "gpu-vs-base", title: "this build vs the baseline, GPU container (8 GPUs), busybox", a: gpu8, b: base},
			&comparison{key: "real-vs-base", title: "this build vs the baseline, GPU container (8 GPUs), realistic image", a: gpu8Real, b: baseReal},
			&comparison{key: "cuda-vs-base", title: "this build vs the baseline, CUDA image env (8 GPUs), busybox", a: cuda8, b: baseCUDA})
	}
	traced := variants
	m := describeMachine(l, goruntime.Version())

	progress("warm-up: %d untimed lifecycle(s) per variant", o.warmup)
	for i := 0; i < o.warmup; i++ {
		for _, v := range variants {
			if interrupted() {
				return errInterrupted
			}
			if _, err := l.lifecycle(*v); err != nil {
				return err
			}
		}
	}

	rng := rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))
	progress("measuring %d alternating pairs of each of %d comparisons (seed %d)", o.pairs, len(comps), o.seed)
	start := time.Now()
	for i := 0; i < o.pairs; i++ {
		for _, ci := range rng.Perm(len(comps)) {
			c := comps[ci]
			first, second := c.a, c.b
			if i%2 == 1 { // rotate the order within the pair: ABAB… becomes AB BA AB BA…
				first, second = second, first
			}
			var got [2]sample
			for j, v := range []*variant{first, second} {
				if interrupted() {
					return errInterrupted
				}
				s, err := l.lifecycle(*v)
				if err != nil {
					return err
				}
				got[j] = s
				if o.verbose {
					progress("pair %d %-32s total %7.2f ms (create %.2f, start %.2f, wait %.2f, delete %.2f)", i+1, v.label, s.total, s.create, s.start, s.wait, s.delete)
				}
			}
			if first == c.a {
				c.as, c.bs = append(c.as, got[0]), append(c.bs, got[1])
			} else {
				c.as, c.bs = append(c.as, got[1]), append(c.bs, got[0])
			}
		}
		if (i+1)%5 == 0 || i+1 == o.pairs {
			progress("pair %d/%d done (%s)", i+1, o.pairs, time.Since(start).Round(time.Second))
		}
	}

	// gpu-runtime --version also prints its low-level runtime's --version: with none that
	// exists, it is the process's start-up alone.
	startupCfg := filepath.Join(l.work, "config-startup.toml")
	if err := os.WriteFile(startupCfg, []byte("[runtime]\nruntimes = [\"/nonexistent/runc\"]\n"), 0o644); err != nil {
		return err
	}
	progress("gpu-runtime in isolation (low-level runtime = %s): %d samples per case", l.noop, o.isolation)
	passThrough := []string{"--root", l.state, "--log", filepath.Join(l.work, "passthrough-log.json"), "--log-format", "json", "start", "gpubench-none"}
	cases := []*isoCase{
		{key: "true", label: "true(1) alone, the no-op runtime (floor)", binary: l.noop, spec: specPlain, reference: true},
		{key: "version", label: "gpu-runtime --version (process start-up only: its low-level runtime does not exist, so runc --version is not run)", binary: l.runtime, config: startupCfg, args: []string{"--version"}},
		{key: "passthrough", label: "gpu-runtime start (pass-through: what start, delete, state, kill… pay)", binary: l.runtime, config: noopCfg[8], args: passThrough},
		{key: "nongpu", label: "gpu-runtime create, non-GPU container (spec untouched)", binary: l.runtime, config: noopCfg[8], spec: specPlain},
		{key: "gpu1", label: "gpu-runtime create, 1 GPU", binary: l.runtime, config: noopCfg[1], spec: specGPU, gpu: true},
		{key: "gpu8", label: "gpu-runtime create, 8 GPUs", binary: l.runtime, config: noopCfg[8], spec: specGPU, gpu: true},
		{key: "gpu16", label: "gpu-runtime create, 16 GPUs", binary: l.runtime, config: noopCfg[16], spec: specGPU, gpu: true},
		{key: "gpu8-nocache", label: "gpu-runtime create, 8 GPUs, discovery cache off (NVML asked every time; RSS includes the helper it waits for)", binary: l.runtime, config: noCache8, spec: specGPU, gpu: true},
		{key: "runc", label: "reference: runc create, no GPUs (a real create)", binary: l.runc, spec: specPlain, created: true, reference: true},
		{key: "runc-same-spec", label: "reference: runc create, gpu-runtime's 8-GPU spec (a real create)", binary: l.runc, spec: specSame, created: true, reference: true},
	}
	for i := 0; i < o.isolation; i++ {
		for j := range cases {
			c := cases[(i+j)%len(cases)]
			if interrupted() {
				return errInterrupted
			}
			inv, err := l.runAlone(c)
			if err != nil {
				return err
			}
			c.wall, c.rss = append(c.wall, ms(inv.wall)), append(c.rss, inv.maxRSS)
		}
	}

	traces := map[string][]*traceResult{}
	var traceErr error
	if o.traces > 0 {
		progress("tracing %d lifecycle(s) per variant (proc connector)", o.traces)
		l.tracer, traceErr = startTracer()
		if traceErr == nil {
			for i := 0; i < o.traces; i++ {
				for j := range traced {
					v := traced[(i+j)%len(traced)]
					if interrupted() {
						l.tracer.close()
						return errInterrupted
					}
					s, err := l.lifecycle(*v)
					if err != nil {
						l.tracer.close()
						return err
					}
					traces[v.key] = append(traces[v.key], s.trace)
				}
			}
			l.tracer.close()
			l.tracer = nil
		} else {
			progress("process tracing unavailable: %v", traceErr)
		}
	}
	m.loadAfter = loadAvg()

	report := render(reportData{o: o, realisticLibs: l.realisticLibs, m: m, cdi: cdiInj, comps: comps, variants: variants, traced: traced, cases: cases, traces: traces, traceErr: traceErr, seed: o.seed})
	fmt.Print(report)
	if o.out != "-" && o.out != "" {
		if err := writeFile(o.out, []byte(report)); err != nil {
			return err
		}
		progress("results written to %s", o.out)
	}
	return nil
}

// captureSpec runs gpu-runtime's create with true(1) as the low-level runtime on a bundle
// with spec and returns the config.json gpu-runtime wrote: what runc is given.
func (l *lab) captureSpec(spec []byte, noopConfig string) ([]byte, error) {
	id, dir, err := l.newBundle(spec)
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	stderr, err := os.OpenFile(filepath.Join(dir, "runtime.stderr"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	if _, err := l.invoke(l.runtime, noopConfig, stderr, l.createArgs(dir, id)...); err != nil {
		return nil, fmt.Errorf("capture gpu-runtime's spec: %w%s", err, diagnostics(dir))
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if bytes.Equal(data, spec) {
		return nil, errors.New("capture gpu-runtime's spec: gpu-runtime left the GPU container's spec unchanged")
	}
	return data, nil
}

func (l *lab) createArgs(dir, id string) []string {
	return []string{"--root", l.state, "--log", filepath.Join(dir, "log.json"), "--log-format", "json",
		"create", "--bundle", dir, "--pid-file", filepath.Join(dir, "init.pid"), id}
}

// runAlone runs one isolation case once, on a fresh bundle (prepared untimed), through the
// rusage launcher so that the peak RSS is the program's own (see maxRSSLauncher).
func (l *lab) runAlone(c *isoCase) (invocation, error) {
	dir, id := l.work, "none"
	if c.spec != nil {
		var err error
		if id, dir, err = l.newBundle(c.spec); err != nil {
			return invocation{}, err
		}
		defer func() { _ = os.RemoveAll(dir) }()
	}
	stderr, err := os.CreateTemp(l.work, "stderr-")
	if err != nil {
		return invocation{}, err
	}
	defer func() { _ = os.Remove(stderr.Name()) }()
	defer stderr.Close()
	rssFile := stderr.Name() + ".maxrss"
	defer func() { _ = os.Remove(rssFile) }()
	args := c.args
	if args == nil {
		args = l.createArgs(dir, id)
	}
	inv, err := l.invoke(l.rusage, c.config, stderr, append([]string{rssFile, c.binary}, args...)...)
	if c.created {
		if out, derr := exec.Command(l.runc, "--root", l.state, "delete", "--force", id).CombinedOutput(); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete %s: %w: %s", id, derr, out))
		}
		if raw, perr := os.ReadFile(filepath.Join(dir, "init.pid")); perr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(raw))); perr == nil {
				_, _ = waitExit(pid)
			}
		}
	}
	if err == nil {
		var raw []byte
		if raw, err = os.ReadFile(rssFile); err == nil {
			inv.maxRSS, err = strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		}
	}
	if err != nil {
		out, _ := os.ReadFile(stderr.Name())
		return inv, fmt.Errorf("%s: %w: %s%s", c.label, err, bytes.TrimSpace(out), diagnostics(dir))
	}
	return inv, nil
}

// writeFile replaces path through a temporary file and a rename.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
)

type reportData struct {
	o             options
	realisticLibs int
	m             machine
	cdi           cdiInjection
	comps         []*comparison
	variants      []*variant
	traced        []*variant
	cases         []*isoCase
	traces        map[string][]*traceResult
	traceErr      error
	seed          uint64
}

const (
	rssTargetMiB     = 30
	mib              = 1024.0 // ru_maxrss is in KiB
	verdictPass      = "PASS"
	verdictMiss      = "MISS"
	uncertainVerdict = " (95% CI spans the target)"
)

func totals(ss []sample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = s.total
	}
	return out
}

func field(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

func verdict(ok bool) string {
	if ok {
		return verdictPass
	}
	return verdictMiss
}

// render writes the results as markdown.
func render(d reportData) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	rng := rand.New(rand.NewPCG(d.seed, 1))

	w("# gpu-runtime lifecycle benchmark\n\n")
	w("Produced by `go run ./bench/lifecycle -pairs %d -isolation %d -trace %d -seed %d -bundle-dir %q`. Method, meaning of each number and caveats: [README.md](README.md).\n", d.o.pairs, d.o.isolation, d.o.traces, d.seed, d.o.bundleDir)
	w("Each lifecycle is `create` (with `--log <bundle>/log.json --log-format json --pid-file`), `start`, wait for the init process to exit (wait4 as subreaper), `delete`, on a fresh bundle running `/bin/true`; bundle preparation is not timed. The rootfs is busybox alone unless the variant says \"realistic image\": internal/testimage's realistic CUDA image (%d libraries: 1,500 in /usr/lib/x86_64-linux-gnu, CUDA and i386 ones; its ld.so.cache written by ldconfig), plus busybox. Times in ms.\n\n", d.realisticLibs)

	m := d.m
	w("## Machine\n\n| | |\n|---|---|\n")
	for _, kv := range [][2]string{
		{"date (UTC)", m.date}, {"CPUs (nproc)", m.nproc}, {"CPU model", m.cpuModel}, {"memory", m.memory},
		{"kernel", m.kernel}, {"cgroups", m.cgroups}, {"runc", m.runc}, {"gpu-runtime", m.gpuRuntime},
		{"bench built with", m.goVersion}, {"fake GPU hosts and configs", m.workFS}, {"bundles (rootfs included) and runc state", m.runFS},
		{"load average before / after", m.loadBefore + " / " + m.loadAfter},
	} {
		w("| %s | %s |\n", kv[0], strings.ReplaceAll(kv[1], "|", `\|`))
	}

	// Headline: every target of the issue.
	w("\n## Against the issue's targets (information, not assertions)\n\n")
	w("| comparison | A: median (p90) | B: median (p90) | median(A)/median(B) [95%% CI] | median of pair ratios | target | |\n|---|---|---|---|---|---|---|\n")
	for _, c := range d.comps {
		a, bb := totals(c.as), totals(c.bs)
		ratio := median(a) / median(bb)
		lo, hi := bootstrapRatioCI(a, bb, rng)
		target, v := "—", "reference"
		bound := c.target
		if c.floorOf != "" {
			f := d.comp(c.floorOf)
			bound = median(totals(f.as))/median(totals(f.bs)) + c.floorPlus
		}
		if bound > 0 {
			target, v = fmt.Sprintf("≤ %.2f", bound), verdict(ratio <= bound)
			if c.floorOf != "" {
				target = fmt.Sprintf("≤ %.3f (the exec-only Go wrapper's %.3f, this run, + %.2f)", bound, bound-c.floorPlus, c.floorPlus)
			}
			if lo <= bound && bound <= hi {
				v += uncertainVerdict
			}
		}
		w("| %s<br>A = %s, B = %s, %d pairs | %.2f (%.2f) | %.2f (%.2f) | **%.3f** [%.3f, %.3f] | %.3f | %s | %s |\n",
			c.title, c.a.label, c.b.label, len(a), median(a), p90(a), median(bb), p90(bb), ratio, lo, hi, median(pairedRatios(a, bb)), target, v)
	}
	var gpuRSS []int64
	for _, c := range d.cases {
		if c.gpu {
			gpuRSS = append(gpuRSS, c.rss...)
		}
	}
	maxRSS := float64(maxInt(gpuRSS)) / mib
	w("| peak RSS of gpu-runtime during create (max over the 1/8/16-GPU cases in isolation, %d samples) | | | **%.1f MiB** | | ≤ %d MiB | %s |\n",
		len(gpuRSS), maxRSS, rssTargetMiB, verdict(maxRSS <= rssTargetMiB))
	if len(d.traces["gpu8"]) > 0 {
		gpuTraces := []struct {
			key, what string
			target    int // -1: a reference, no target
		}{
			{"gpu8", "8 GPUs, NVIDIA_VISIBLE_DEVICES=all, busybox", 0},
			{"gpu8-real", "8 GPUs, realistic image", 0},
			{"gpu8-cuda", "8 GPUs, a CUDA image's env with NVIDIA_REQUIRE_CUDA, busybox", 0},
			{"base-gpu8", "baseline, 8 GPUs, busybox", -1},
			{"base-gpu8-real", "baseline, 8 GPUs, realistic image", -1},
			{"base-gpu8-cuda", "baseline, CUDA image env, busybox", -1},
		}
		for _, k := range gpuTraces {
			tr := d.traces[k.key]
			if len(tr) == 0 {
				continue
			}
			n := medianInt(tr, func(t *traceResult) int { return len(t.hookProcs) })
			target, v := "—", "reference"
			if k.target >= 0 {
				target, v = fmt.Sprintf("≤ %d", k.target), verdict(n <= k.target)
			}
			w("| hook processes per GPU container (%s; median of %d traced lifecycles: %s) | | | **%d** | | %s | %s |\n",
				k.what, len(tr), procNames(tr), n, target, v)
		}
		for _, k := range gpuTraces {
			tr := d.traces[k.key]
			if len(tr) == 0 || k.target < 0 {
				continue
			}
			n := sumInt(tr, ldconfigRuns)
			w("| ldconfig processes in %d traced GPU lifecycles (%s) | | | **%d** | | 0 | %s |\n", len(tr), k.what, n, verdict(n == 0))
		}
	} else {
		w("| hook processes per GPU container | | | not traced (%v) | | 0 | |\n", d.traceErr)
	}

	// Phases per variant, pooling a variant's samples from every comparison it is in.
	w("\n## Lifecycle phases by variant (median ms; a variant's samples pooled over the comparisons it is in)\n\n")
	w("| variant | n | create | start | wait | delete | total | total p90 | wait method |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range d.variants {
		var ss []sample
		for _, c := range d.comps {
			if c.a == v {
				ss = append(ss, c.as...)
			}
			if c.b == v {
				ss = append(ss, c.bs...)
			}
		}
		if len(ss) == 0 {
			continue
		}
		methods := map[string]int{}
		for _, s := range ss {
			methods[s.waitMethod]++
		}
		w("| %s | %d | %.2f | %.2f | %.2f | %.2f | **%.2f** | %.2f | %s |\n", v.label, len(ss),
			median(field(ss, func(s sample) float64 { return s.create })), median(field(ss, func(s sample) float64 { return s.start })),
			median(field(ss, func(s sample) float64 { return s.wait })), median(field(ss, func(s sample) float64 { return s.delete })),
			median(totals(ss)), p90(totals(ss)), countsString(methods))
	}

	// Isolation.
	w("\n## gpu-runtime in isolation (its low-level runtime set to true(1); same command line as create)\n\n")
	w("ru_maxrss of an exec'ing process is the larger of its peaks before and after exec; true(1) peaks far lower, so for gpu-runtime it is gpu-runtime's own peak.\n\n")
	w("| case | n | wall median | wall p90 | minus true(1) | peak RSS median (MiB) | peak RSS max (MiB) |\n|---|---|---|---|---|---|---|\n")
	floor := d.iso("true")
	for _, c := range d.cases {
		rel := "—"
		if !c.reference {
			rel = fmt.Sprintf("%.2f", median(c.wall)-floor)
		}
		w("| %s | %d | %.2f | %.2f | %s | %.1f | %.1f |\n", c.label, len(c.wall), median(c.wall), p90(c.wall), rel,
			median(int64s(c.rss))/mib, float64(maxInt(c.rss))/mib)
	}

	// Tracing.
	w("\n## Processes and in-situ timings (Linux proc connector, exec/exit events of the bench's descendants)\n\n")
	if d.traceErr != nil || len(d.traces) == 0 {
		w("Not traced: %v\n", d.traceErr)
	} else {
		w("Hook processes: every process exec'd during the lifecycle that is neither gpu-runtime, runc (runc init included) nor the container's own process. Timings are medians, exec to exit.\n\n")
		w("| variant | traced | hook entries in runc's spec | hook processes per container | gpu-runtime exec → its exec of runc | runc create (exec → exit) | per hook process (exec → exit) | gpu-ctk runs (cache misses) | execs in the lifecycle | events lost |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, v := range d.traced {
			tr := d.traces[v.key]
			if len(tr) == 0 {
				continue
			}
			lost := 0
			for _, t := range tr {
				if t.lost {
					lost++
				}
			}
			w("| %s | %d | %d | %d (%s) | %s | %s | %s | %d | %d | %d |\n", v.label, len(tr),
				medianInt(tr, func(t *traceResult) int { return t.hookEntries }),
				medianInt(tr, func(t *traceResult) int { return len(t.hookProcs) }), procNames(tr),
				fmtMs(medianOf(tr, func(t *traceResult) float64 { return t.wrapperMs })),
				fmtMs(medianOf(tr, func(t *traceResult) float64 { return t.runcCreateMs })),
				hookTimes(tr), sumInt(tr, func(t *traceResult) int { return t.nvmlHelpers }), medianInt(tr, func(t *traceResult) int { return t.execs }), lost)
		}
	}

	w("\n## Where the time goes (8 GPUs)\n\n")
	b.WriteString(costTable(d))
	b.WriteString(breakdown(d))
	return b.String()
}

// costTable splits a GPU container's extra time over plain runc, on each image, into what
// gpu-runtime, the hook and runc each add: medians of the paired samples of the
// GPU-vs-runc comparison of that image, and of the traced lifecycles for the in-situ parts.
func costTable(d reportData) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	type column struct {
		comp, trace string
	}
	cols := []column{{"gpu-vs-runc", "gpu8"}, {"gpu-vs-runc-real", "gpu8-real"}}
	phase := func(ss []sample, f func(s sample) float64) float64 { return median(field(ss, f)) }
	create := func(s sample) float64 { return s.create }
	startDelete := func(s sample) float64 { return s.start + s.delete }
	wait := func(s sample) float64 { return s.wait }
	type row struct {
		label string
		value func(c *comparison, tr []*traceResult) float64
	}
	hookMs := func(tr []*traceResult) float64 {
		return medianOf(tr, func(t *traceResult) float64 {
			var sum float64
			var found bool
			for _, xs := range t.hookMs {
				for _, x := range xs {
					sum, found = sum+x, true
				}
			}
			if !found {
				return 0 // no hook ran: gpu-runtime updated the loader cache at create
			}
			return sum
		})
	}
	wrapper := func(tr []*traceResult) float64 {
		return medianOf(tr, func(t *traceResult) float64 { return t.wrapperMs })
	}
	rows := []row{
		{"lifecycle: GPU container through gpu-runtime", func(c *comparison, _ []*traceResult) float64 { return median(totals(c.as)) }},
		{"lifecycle: plain runc, no GPUs", func(c *comparison, _ []*traceResult) float64 { return median(totals(c.bs)) }},
		{"**extra**", func(c *comparison, _ []*traceResult) float64 { return median(totals(c.as)) - median(totals(c.bs)) }},
		{"create: extra", func(c *comparison, _ []*traceResult) float64 { return phase(c.as, create) - phase(c.bs, create) }},
		{"&nbsp;&nbsp;gpu-runtime before it execs runc (traced)", func(_ *comparison, tr []*traceResult) float64 { return wrapper(tr) }},
		{"&nbsp;&nbsp;hook processes, exec → exit (traced; 0 where none ran: gpu-runtime updated the loader cache at create)", func(_ *comparison, tr []*traceResult) float64 { return hookMs(tr) }},
		{"&nbsp;&nbsp;runc's own extra work: device rules, bind mounts, starting hooks if any (the rest)", func(c *comparison, tr []*traceResult) float64 {
			return phase(c.as, create) - phase(c.bs, create) - wrapper(tr) - hookMs(tr)
		}},
		{"start + delete: extra (two more passes through gpu-runtime; runc's cleanup of the bigger container)", func(c *comparison, _ []*traceResult) float64 {
			return phase(c.as, startDelete) - phase(c.bs, startDelete)
		}},
		{"wait: extra", func(c *comparison, _ []*traceResult) float64 { return phase(c.as, wait) - phase(c.bs, wait) }},
	}
	w("What a GPU container adds to plain runc's lifecycle, and who spends it (median ms; traced parts from the proc connector's timestamps, so the parts need not add up exactly):\n\n")
	w("| | busybox | realistic image |\n|---|---|---|\n")
	for _, r := range rows {
		w("| %s |", r.label)
		for _, col := range cols {
			w(" %s |", fmtMs(r.value(d.comp(col.comp), d.traces[col.trace])))
		}
		w("\n")
	}
	w("\n")
	return b.String()
}

// breakdown explains the GPU container's extra time with the other measurements.
func breakdown(d reportData) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	c0, c1 := d.comp("gpu-vs-runc"), d.comp("gpu-vs-same-spec")
	gpu, plain, same := median(totals(c0.as)), median(totals(c0.bs)), median(totals(c1.bs))
	w("- Lifecycle: GPU container %.2f ms vs plain runc %.2f ms: **+%.2f ms**. Create alone: %.2f vs %.2f ms.\n",
		gpu, plain, gpu-plain, median(field(c0.as, func(s sample) float64 { return s.create })), median(field(c0.bs, func(s sample) float64 { return s.create })))
	wrapper := math.NaN()
	if tr := d.traces["gpu8"]; len(tr) > 0 {
		wrapper = medianOf(tr, func(t *traceResult) float64 { return t.wrapperMs })
	}
	iso := d.iso
	w("- gpu-runtime itself, before it execs runc: **%s ms** in situ (traced), %.2f ms in isolation (8-GPU create with true(1) as runtime, minus true(1)'s %.2f ms). Of that, in isolation:\n",
		fmtMs(wrapper), iso("gpu8")-iso("true"), iso("true"))
	w("  - process start-up (`gpu-runtime --version` minus true(1)): %.2f ms — Go runtime and package init (and the dynamic loader and cgo, if built with cgo);\n", iso("version")-iso("true"))
	w("  - a non-GPU create on top of start-up (config load, argument parse, spec read, request parse, logger on runc's log): %.2f ms;\n", iso("nongpu")-iso("version"))
	w("  - the GPU work on top of that (discovery — from the discovery cache where there is one, else NVML and the driver-file scan —, device nodes, plan, spec edit, the loader-cache update in the rootfs, encode and atomic write with fsync, the log line): %.2f ms — split further by `go test -bench CreatePath ./internal/create/`;\n", iso("gpu8")-iso("nongpu"))
	w("  - with the discovery cache off (every create a miss): %.2f ms instead of %.2f.\n", iso("gpu8-nocache")-iso("true"), iso("gpu8")-iso("true"))
	w("- Every other invocation passes through gpu-runtime: %.2f ms each in isolation (`gpu-runtime start` minus true(1)). In the lifecycle, start and delete through gpu-runtime take %+.2f ms together over runc's (8-GPU variant vs plain runc, medians).\n",
		iso("passthrough")-iso("true"),
		median(field(c0.as, func(s sample) float64 { return s.start + s.delete }))-median(field(c0.bs, func(s sample) float64 { return s.start + s.delete })))
	// The Go floor: the exec-only Go wrapper vs plain runc.
	if ref := d.comp("goexec-vs-runc"); len(ref.as) > 0 {
		phase := func(ss []sample, f func(s sample) float64) float64 { return median(field(ss, f)) }
		sd := func(s sample) float64 { return s.start + s.delete }
		cr := func(s sample) float64 { return s.create }
		nonGPU := d.comp("nongpu-vs-runc")
		w("- The floor any Go wrapper pays: a static Go program that only execs runc adds %+.2f ms to start + delete and %+.2f ms to create over runc alone (%.3f on the lifecycle). gpu-runtime's non-GPU lifecycle adds %+.2f ms to start + delete and %+.2f ms to create over plain runc: %+.2f ms of its own per start + delete beyond that floor.\n",
			phase(ref.as, sd)-phase(ref.bs, sd), phase(ref.as, cr)-phase(ref.bs, cr), median(totals(ref.as))/median(totals(ref.bs)),
			phase(nonGPU.as, sd)-phase(nonGPU.bs, sd), phase(nonGPU.as, cr)-phase(nonGPU.bs, cr),
			(phase(nonGPU.as, sd)-phase(nonGPU.bs, sd))-(phase(ref.as, sd)-phase(ref.bs, sd)))
	}
	w("- runc's extra work for the bigger spec (runc with gpu-runtime's spec minus plain runc): **%.2f ms** — device cgroup rules, bind mounts and their mount points, and its hooks, if any (the spec gpu-runtime wrote has none where it updated the loader cache at create).\n", same-plain)
	if tr := d.traces["gpu8"]; len(tr) > 0 {
		for _, name := range hookNames(tr) {
			w("  - %s: %s ms exec → exit (median)\n", name, fmtMs(medianOf(tr, func(t *traceResult) float64 { return medianOrNaN(t.hookMs[name]) })))
		}
	}
	cdiRunc, gpuCDI, nonGPU := d.comp("cdi-vs-runc"), d.comp("gpu-vs-cdi"), d.comp("nongpu-vs-runc")
	w("\n## CDI-native engines (containerd 2.x, cri-o, podman with a CDI spec)\n\n")
	w("The spec is `gpu-ctk cdi generate` for the 8-GPU host (%d devices); the engine's own work, in its process, with the CDI library: loading the spec directory %s ms, injecting `%s=all` into a decoded spec %s ms (medians of %d).\n\n",
		d.cdi.devices, fmtMs(ms(d.cdi.load)), cdiKind, fmtMs(ms(d.cdi.inject)), d.cdi.injectRuns)
	w("- A GPU container injected by CDI, plain runc: %.2f ms vs %.2f ms without GPUs (%.3f) — runc's work for the devices, mounts and the createContainer hook.\n",
		median(totals(cdiRunc.as)), median(totals(cdiRunc.bs)), median(totals(cdiRunc.as))/median(totals(cdiRunc.bs)))
	w("- gpu-runtime with the same 8 GPUs: %.2f ms vs the CDI spec through plain runc %.2f ms (%.3f).\n",
		median(totals(gpuCDI.as)), median(totals(gpuCDI.bs)), median(totals(gpuCDI.as))/median(totals(gpuCDI.bs)))
	w("- A non-GPU container on a CDI-native engine pays nothing: no wrapper is in its path (ratio 1 by construction). Through gpu-runtime it costs %.3f× plain runc (%+.2f ms).\n",
		median(totals(nonGPU.as))/median(totals(nonGPU.bs)), median(totals(nonGPU.as))-median(totals(nonGPU.bs)))
	scale := d.comp("16-vs-1")
	w("- 16 vs 1 GPU through gpu-runtime: %+.2f ms on the lifecycle (%.2f vs %.2f ms).\n",
		median(totals(scale.as))-median(totals(scale.bs)), median(totals(scale.as)), median(totals(scale.bs)))
	return b.String()
}

// comp returns the comparison with key; a key the bench does not define is a bug in it.
func (d reportData) comp(key string) *comparison {
	for _, c := range d.comps {
		if c.key == key {
			return c
		}
	}
	panic("bench: no comparison " + key)
}

// iso returns the median wall time of the isolation case with key.
func (d reportData) iso(key string) float64 {
	for _, c := range d.cases {
		if c.key == key {
			return median(c.wall)
		}
	}
	return math.NaN()
}

func maxInt(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func int64s(xs []int64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func medianInt(tr []*traceResult, f func(*traceResult) int) int {
	xs := make([]float64, len(tr))
	for i, t := range tr {
		xs[i] = float64(f(t))
	}
	return int(math.Round(median(xs)))
}

// ldconfigRuns counts the ldconfig processes of a lifecycle: hook processes that ran a
// program named ldconfig (gpu-hook's sandbox, "gpu-hook __ldconfig-in-root → ldconfig").
func ldconfigRuns(t *traceResult) int {
	n := 0
	for _, chain := range t.hookProcs {
		for _, prog := range strings.Split(chain, " → ") {
			if strings.HasPrefix(prog, "ldconfig") {
				n++
				break
			}
		}
	}
	return n
}

func sumInt(tr []*traceResult, f func(*traceResult) int) int {
	n := 0
	for _, t := range tr {
		n += f(t)
	}
	return n
}

func medianOf(tr []*traceResult, f func(*traceResult) float64) float64 {
	var xs []float64
	for _, t := range tr {
		if v := f(t); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return median(xs)
}

func medianOrNaN(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return median(xs)
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

// procNames lists the hook processes of the traced lifecycles: "gpu-hook, ldconfig" when
// every lifecycle spawned the same ones, else each distinct list with its count.
func procNames(tr []*traceResult) string {
	lists := map[string]int{}
	for _, t := range tr {
		l := strings.Join(t.hookProcs, ", ")
		if l == "" {
			l = "none"
		}
		lists[l]++
	}
	if len(lists) == 1 {
		for l := range lists {
			return l
		}
	}
	return countsString(lists)
}

func countsString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, "; ")
}

func hookNames(tr []*traceResult) []string {
	seen := map[string]bool{}
	var names []string
	for _, t := range tr {
		for _, n := range t.hookProcs {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}

func hookTimes(tr []*traceResult) string {
	var parts []string
	for _, n := range hookNames(tr) {
		parts = append(parts, fmt.Sprintf("%s %s", n, fmtMs(medianOf(tr, func(t *traceResult) float64 { return medianOrNaN(t.hookMs[n]) }))))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, "; ")
}

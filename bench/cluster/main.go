// Command cluster measures what gpu-runtime adds to a Kubernetes pod's start: on one test
// cluster (internal/clustertest: a single-node v1.37.2 cluster, containerd 2.x, a fake GPU host),
// the time from `kubectl apply` to the pod Ready for
//
//   - a GPU pod: runtimeClassName gpu, NVIDIA_VISIBLE_DEVICES=0 (gpu-runtime injects GPU 0);
//   - the same pod without GPU: no RuntimeClass, no variable (plain runc);
//   - the same pod through the RuntimeClass without the variable (gpu-runtime passes it through),
//   - a DRA GPU pod: no RuntimeClass, a ResourceClaimTemplate for one gpu.gpu-runtime.dev
//     device, prepared by gpu-kubelet-plugin (run as a host process) and injected by
//     containerd's CDI,
//
// in rounds whose order is shuffled, after warm-up rounds. It prints medians, p90s and the
// ratios of the medians (information, not assertions), and the plugin's own prepare time
// (its log's took=, every measured DRA pod's), and writes them as markdown. Needs root;
// run from the repository root after make build:
//
//	go run ./bench/cluster -pairs 20
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/clustertest"
)

type variant struct {
	name, runtimeClass, env string
	claim                   bool // asks for one GPU through the DRA claim template draTemplate
	times                   []time.Duration
}

// draTemplate is the ResourceClaimTemplate of the DRA variant's pods.
const draTemplate = `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: bench-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.gpu-runtime.dev, count: 1}
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench/cluster: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	rounds := flag.Int("pairs", 20, "measured rounds (each runs every variant once)")
	warmup := flag.Int("warmup", 2, "rounds run first and not counted")
	out := flag.String("out", "bench/cluster-results.md", "markdown results")
	flag.Parse()
	repo, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("find the module root: %w", err)
	}
	dir, err := os.MkdirTemp("/tmp", "grc-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	opts, err := clustertest.Prepare(strings.TrimSpace(string(repo)), dir, true, os.Stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := clustertest.Start(opts)
	if err != nil {
		return err
	}
	up := time.Since(start)
	plugin, err := c.StartDRAPlugin(filepath.Join(dir, "dra"), filepath.Join(dir, "dra", "state"))
	if err != nil {
		c.Stop()
		return err
	}
	defer func() {
		plugin.Stop()
		c.Stop()
		if left := c.Leftovers(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "bench/cluster: left behind: %v\n", left)
		}
	}()
	variants := []*variant{
		{name: "GPU pod (RuntimeClass gpu, NVIDIA_VISIBLE_DEVICES=0)", runtimeClass: "gpu", env: "0"},
		{name: "same pod without GPU (runc)"},
		{name: "same pod, RuntimeClass gpu, no GPU asked"},
		{name: "DRA GPU pod (ResourceClaim, no RuntimeClass, containerd CDI)", claim: true},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.Kubectl(ctx, draTemplate, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	logFile := filepath.Join(dir, "dra", "gpu-kubelet-plugin.log")
	seq := 0
	var warmLog int64
	for r := 0; r < *warmup+*rounds; r++ {
		if r == *warmup {
			if fi, err := os.Stat(logFile); err == nil {
				warmLog = fi.Size()
			}
		}
		order := rand.Perm(len(variants))
		for _, i := range order {
			v := variants[i]
			seq++
			d, err := startPod(c, fmt.Sprintf("bench-%d", seq), v)
			if err != nil {
				return err
			}
			if r >= *warmup {
				v.times = append(v.times, d)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# kubectl apply → Ready, one test cluster\n\n%d rounds (+%d warm-up), order shuffled per round; cluster up in %.1f s. Machine: %d-core, load as found; times include kubectl's own start (kubectl apply, then kubectl wait --for=condition=Ready).\n\n", *rounds, *warmup, up.Seconds(), numCPU())
	b.WriteString("| variant | median | p90 | ratio of medians vs without GPU |\n|---|---|---|---|\n")
	base := median(variants[1].times)
	for _, v := range variants {
		m := median(v.times)
		fmt.Fprintf(&b, "| %s | %.0f ms | %.0f ms | %.3f |\n", v.name, ms(m), ms(quantile(v.times, 0.9)), float64(m)/float64(base))
	}
	took, err := prepareTimes(logFile, warmLog)
	if err != nil {
		return err
	}
	fmt.Fprintf(&b, "\ngpu-kubelet-plugin's own prepare time (its log's took=, %d measured claims): median %.2f ms, p90 %.2f ms.\n",
		len(took), ms(median(took)), ms(quantile(took, 0.9)))
	fmt.Print(b.String())
	return os.WriteFile(*out, []byte(b.String()), 0o644)
}

// startPod applies the pod, waits until it is Ready and returns how long that took; it then
// deletes the pod (not timed).
func startPod(c *clustertest.Cluster, name string, v *variant) (time.Duration, error) {
	var y strings.Builder
	fmt.Fprintf(&y, "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  terminationGracePeriodSeconds: 1\n", name)
	if v.runtimeClass != "" {
		fmt.Fprintf(&y, "  runtimeClassName: %s\n", v.runtimeClass)
	}
	if v.claim {
		y.WriteString("  resourceClaims: [{name: gpu, resourceClaimTemplateName: bench-gpu}]\n")
	}
	fmt.Fprintf(&y, "  containers:\n  - name: c\n    image: %s\n    imagePullPolicy: Never\n    command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']\n", clustertest.Busybox)
	if v.env != "" {
		fmt.Fprintf(&y, "    env: [{name: NVIDIA_VISIBLE_DEVICES, value: %q}]\n", v.env)
	}
	if v.claim {
		y.WriteString("    resources: {claims: [{name: gpu}]}\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if out, err := c.Kubectl(ctx, y.String(), "apply", "-f", "-"); err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	if out, err := c.Kubectl(ctx, "", "wait", "--for=condition=Ready", "pod/"+name, "--timeout=90s"); err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	d := time.Since(start)
	if out, err := c.Kubectl(ctx, "", "delete", "pod", name, "--wait=true"); err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	return d, nil
}

// prepareTimes reads the took= of every "claim prepared" line of the plugin's log after offset.
func prepareTimes(logFile string, offset int64) ([]time.Duration, error) {
	data, err := os.ReadFile(logFile)
	if err != nil {
		return nil, err
	}
	if offset > int64(len(data)) {
		offset = 0
	}
	var out []time.Duration
	for _, m := range tookRE.FindAllStringSubmatch(string(data[offset:]), -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			return nil, fmt.Errorf("%s: took=%s: %w", logFile, m[1], err)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no \"claim prepared\" line with took=", logFile)
	}
	return out, nil
}

var tookRE = regexp.MustCompile(`msg="claim prepared" .*took=([0-9.]+(?:µs|ms|s))`)

func median(d []time.Duration) time.Duration { return quantile(d, 0.5) }

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/clustertest"
	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// probe is what the test pods run: enginetest's probe (device nodes, cgroup rules, loader
// cache), then whether nvidia-smi runs.
const probe = enginetest.Probe + `
nvidia-smi -L >/dev/null 2>&1 && echo nvidia-smi-runs
echo probe-end`

// stayAfterProbe keeps a pod running after the probe, ending at once on SIGTERM (a shell as
// PID 1 ignores it, and a delete would wait the whole grace period).
const stayAfterProbe = `; trap "exit 0" TERM; sleep 3600 & wait`

// pod is a test pod: one busybox container running script.
type pod struct {
	name         string
	runtimeClass string
	env          map[string]string
	limits       map[string]string // resources.limits
	annotations  map[string]string // the pod's
	script       string
}

var podSeq atomic.Int32

// newPod returns a pod with a unique name starting with prefix.
func newPod(prefix string) pod {
	return pod{name: fmt.Sprintf("%s-%d", prefix, podSeq.Add(1)), script: probe}
}

func (p pod) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n", p.name)
	if len(p.annotations) > 0 {
		b.WriteString("  annotations:\n")
		for k, v := range p.annotations {
			fmt.Fprintf(&b, "    %s: %q\n", k, v)
		}
	}
	b.WriteString("spec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n")
	if p.runtimeClass != "" {
		fmt.Fprintf(&b, "  runtimeClassName: %s\n", p.runtimeClass)
	}
	fmt.Fprintf(&b, "  containers:\n  - name: c\n    image: %s\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", %q]\n", clustertest.Busybox, p.script)
	if len(p.env) > 0 {
		b.WriteString("    env:\n")
		keys := make([]string, 0, len(p.env))
		for k := range p.env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    - {name: %s, value: %q}\n", k, p.env[k])
		}
	}
	if len(p.limits) > 0 {
		b.WriteString("    resources:\n      limits:\n")
		for k, v := range p.limits {
			fmt.Fprintf(&b, "        %s: %q\n", k, v)
		}
	}
	return b.String()
}

// kubectl runs kubectl against the cluster, failing the test on error.
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := cluster.Kubectl(ctx, stdin, args...)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return out
}

// apply creates the pod and deletes it when the test ends.
func apply(t *testing.T, p pod) {
	t.Helper()
	kubectl(t, p.yaml(), "apply", "-f", "-")
	t.Cleanup(func() { deletePod(t, p.name) })
}

func deletePod(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := cluster.Kubectl(ctx, "", "delete", "pod", name, "--ignore-not-found", "--wait=true"); err != nil {
		t.Errorf("%v: %s", err, out)
	}
}

// waitPod waits until the pod's phase is one of phases and returns it; on timeout it fails
// with kubectl describe's output.
func waitPod(t *testing.T, name string, timeout time.Duration, phases ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		phase := strings.TrimSpace(kubectl(t, "", "get", "pod", name, "-o", "jsonpath={.status.phase}"))
		for _, p := range phases {
			if phase == p {
				return phase
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s is %q after %s, want %v:\n%s", name, phase, timeout, phases, describe(t, name))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func describe(t *testing.T, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := cluster.Kubectl(ctx, "", "describe", "pod", name)
	return out
}

// runPod runs the pod to completion (Succeeded) and returns its container's output.
func runPod(t *testing.T, p pod) string {
	t.Helper()
	apply(t, p)
	if phase := waitPod(t, p.name, 90*time.Second, "Succeeded", "Failed"); phase != "Succeeded" {
		t.Fatalf("pod %s %s:\n%s\n%s", p.name, phase, podLog(t, p.name), describe(t, p.name))
	}
	return podLog(t, p.name)
}

// waitOutput waits until the (running) pod's output holds line and returns the output.
func waitOutput(t *testing.T, name, line string) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		out := podLog(t, name)
		if strings.Contains(out, line+"\n") {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s did not print %q within 90s; output:\n%s\n%s", name, line, out, describe(t, name))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podLog reads the pod's container log from the kubelet's pod log directory
// (<ns>_<pod>_<uid>/<container>/<n>.log, CRI format: "<time> <stream> <P|F> <text>").
func podLog(t *testing.T, name string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(cluster.PodLogs, "default_"+name+"_*", "c", "*.log"))
	var b strings.Builder
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			parts := strings.SplitN(sc.Text(), " ", 4)
			if len(parts) < 4 {
				continue
			}
			b.WriteString(parts[3])
			if parts[2] == "F" {
				b.WriteString("\n")
			}
		}
		fh.Close()
	}
	return b.String()
}

// waitEvent waits until kubectl describe pod shows want (in the events) and returns the
// description.
func waitEvent(t *testing.T, name, want string) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		d := describe(t, name)
		if strings.Contains(d, want) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl describe pod %s does not show %q within 90s:\n%s", name, want, d)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// wantNVIDIASMI checks whether nvidia-smi ran in the pod.
func wantNVIDIASMI(t *testing.T, out string, want bool) {
	t.Helper()
	if got := strings.Contains(out, "nvidia-smi-runs\n"); got != want {
		t.Errorf("nvidia-smi runs in the pod: %v, want %v; output:\n%s", got, want, out)
	}
}

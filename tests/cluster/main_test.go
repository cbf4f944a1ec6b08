// Package cluster runs pods on a real single-node Kubernetes cluster (internal/clustertest:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet at v1.37.2,
// containerd 2.x as the CRI) whose node is a fake GPU host with gpu-runtime as the runtime
// handler "gpu", and checks what the pods get: through the RuntimeClass, through a device
// plugin answering as NVIDIA's does, through containerd's CDI, and through ResourceClaims
// prepared by gpu-kubelet-plugin, the DRA driver (dra_test.go).
//
// The cluster is started once per test binary (TestMain) and stopped at its end; the test
// binary then fails if anything is left behind (the DRA plugin's sockets, claim specs or
// checkpoint entries, its shared claims' MPS daemons, tmpfs mounts or pid files, a process or mount under its directory, a
// cgroup, the bridge, an iptables chain, rule or table, a changed sysctl, a host path). A
// cluster left by a test binary killed by -timeout or a signal is cleaned up by the next run
// (clustertest.ReapStale).
//
// It needs root and GPU_RUNTIME_E2E=1 (`make test` runs it after the other suites, as its own
// step, `make test-cluster`); under GPU_RUNTIME_E2E=1 it builds the Kubernetes binaries into
// .cache/kubernetes when they are missing (scripts/build-kubernetes.sh: about 9 minutes on 2
// cores, once). Anywhere it cannot run, every test skips, loudly, with the reason.
package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/clustertest"
)

var (
	skipReason string
	cluster    *clustertest.Cluster
	repoRoot   string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, reason, err := setup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: FAIL: %v\n", err)
		_ = os.RemoveAll(dir)
		return 1
	}
	if reason != "" {
		skipReason = reason
		fmt.Fprintf(os.Stderr, "\n*** cluster tests SKIPPED: %s ***\n\n", reason)
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return m.Run()
	}
	code := m.Run()
	stopPlugin()
	if left := stopDRA(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "cluster: FAIL: gpu-kubelet-plugin left behind:\n  %s\n", strings.Join(left, "\n  "))
		code = 1
	}
	cluster.Stop()
	if left := cluster.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "cluster: FAIL: the cluster left behind:\n  %s\n", strings.Join(left, "\n  "))
		code = 1
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: remove %s: %v\n", dir, err)
		code = 1
	}
	return code
}

// setup starts the cluster in a new directory; it returns the directory and a reason to skip
// (the machine cannot run the cluster), or an error (it could and did not).
func setup() (string, string, error) {
	if os.Getenv("GPU_RUNTIME_E2E") != "1" {
		return "", "GPU_RUNTIME_E2E is not 1: the cluster tests start a Kubernetes cluster (run them as root with `make test-cluster`, or GPU_RUNTIME_E2E=1 go test ./tests/cluster/)", nil
	}
	if os.Geteuid() != 0 {
		return "", "the cluster tests need root (they start containerd and the kubelet)", nil
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return "", "no cgroup filesystem at /sys/fs/cgroup: the kubelet cannot run here", nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", "", fmt.Errorf("find the module root: %w", err)
	}
	repoRoot = strings.TrimSpace(string(out))
	dir, err := os.MkdirTemp("/tmp", "grc-")
	if err != nil {
		return "", "", err
	}
	start := time.Now()
	opts, err := clustertest.Prepare(repoRoot, dir, true, os.Stderr)
	if err != nil {
		return dir, err.Error(), nil
	}
	fmt.Fprintf(os.Stderr, "cluster: prepared in %.1f s\n", time.Since(start).Seconds())
	cluster, err = clustertest.Start(opts)
	if err != nil {
		return dir, "", fmt.Errorf("start the cluster: %w", err)
	}
	return dir, "", nil
}

// requireCluster skips the test, loudly, where the cluster could not be started.
func requireCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED: " + skipReason)
	}
	return cluster
}

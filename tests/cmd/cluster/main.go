// Command cluster starts the single-node Kubernetes cluster the cluster tests run on (see
// internal/clustertest) for a developer to use by hand: `make cluster`. It prints the
// kubeconfig and how to reach the node, then runs until interrupted (Ctrl-C or SIGTERM), when
// it stops the cluster and checks that nothing is left behind.
//
// It needs root; it builds the Kubernetes binaries into .cache/kubernetes when they are missing
// (about 9 minutes on 2 cores, once).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpu-runtime/gpu-runtime/internal/clustertest"
)

func main() {
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", "", "the cluster's directory (default: a new /tmp/grc-*)")
	flag.Parse()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: find the module root (run it from the checkout): %v\n", err)
		return 1
	}
	repo := strings.TrimSpace(string(out))
	made := *dir == ""
	if made {
		if *dir, err = os.MkdirTemp("/tmp", "grc-"); err != nil {
			fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
			return 1
		}
	}
	opts, err := clustertest.Prepare(repo, *dir, true, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		return 1
	}
	c, err := clustertest.Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		if made {
			_ = os.RemoveAll(*dir)
		}
		return 1
	}
	fmt.Printf(`
The cluster is up (node %[1]s, RuntimeClass %[2]q for gpu-runtime on a fake %[3]d-GPU host).

  export KUBECONFIG=%[4]s
  %[5]s/kubectl get nodes

Pods use image %[6]s with imagePullPolicy: Never (nothing can be pulled).
gpu-runtime's config: %[7]s, its log: %[8]s
Component logs: %[9]s/<component>/<component>.log
The tests' device plugin (resources nvidia.com/gpu and nvidia.com/mig-<profile>; strategies
envvar, volume-mounts, cdi-annotations, cdi-cri):
  GPU_RUNTIME_CONFIG=%[7]s go run ./tests/cmd/gpu-device-plugin --gpu-ctk %[10]s --device-list-strategy envvar

Press Ctrl-C (or kill -TERM %[11]d) to stop it (the directory %[9]s is removed if this command made it).
`, c.NodeName, clustertest.RuntimeHandler, len(opts.Host.Options.GPUs), c.Kubeconfig, c.KubeBin, clustertest.Busybox,
		c.RuntimeConfig, c.RuntimeLog, c.Dir, filepath.Join(c.GPUBin, "gpu-ctk"), os.Getpid())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	c.Stop()
	status := 0
	if left := c.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "cluster: left behind:\n  %s\n", strings.Join(left, "\n  "))
		status = 1
	}
	if made {
		if err := os.RemoveAll(*dir); err != nil {
			fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
			status = 1
		}
	}
	return status
}

package clustertest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/testbin"
)

// ErrNotBuilt is returned by Prepare when the Kubernetes binaries are not built and it was
// not asked to build them.
var ErrNotBuilt = errors.New("the Kubernetes binaries are not built")

// FakeHost returns the node's fake GPU host: GPUs 0 and 1 whole, GPU 2 (an A100) in MIG mode
// with a 3g.40gb and a 1g.10gb device — what the device plugin's strategies and MIG "mixed"
// need.
func FakeHost() (fakehost.Options, error) {
	opts := fakehost.Default(3)
	if err := opts.GPUs[2].AddMIGDevices("3g.40gb", "1g.10gb"); err != nil {
		return opts, err
	}
	return opts, nil
}

// Prepare finds or builds what a cluster in dir needs, for the module at repo: the Kubernetes
// binaries (scripts/build-kubernetes.sh; only when build is true, else ErrNotBuilt when they
// are missing), containerd 2.x (scripts/build-containerd2.sh), gpu-runtime's binaries (built
// into dir/bin as make build builds them, gpu-kubelet-plugin included) and the fake GPU host (dir/host).
func Prepare(repo, dir string, build bool, progress io.Writer) (Options, error) {
	opts := Options{Dir: dir, Progress: progress, RuntimeClass: filepath.Join(repo, "packaging", "kubernetes", "runtimeclass.yaml")}
	if os.Geteuid() != 0 {
		return opts, errors.New("the cluster needs root (it starts containerd and the kubelet)")
	}
	for _, tool := range []string{"runc", "gcc", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return opts, fmt.Errorf("%s is not installed (make deps)", tool)
		}
	}
	if _, err := os.Stat(filepath.Join("/usr/lib/cni", "bridge")); err != nil {
		return opts, errors.New("the CNI plugins are not installed in /usr/lib/cni (make deps installs containernetworking-plugins)")
	}
	script := filepath.Join(repo, "scripts", "build-kubernetes.sh")
	if !build {
		out, err := exec.Command(script, "--check").Output()
		if err != nil {
			return opts, fmt.Errorf("%w (scripts/build-kubernetes.sh builds them into .cache/kubernetes: about 9 minutes on 2 cores, once)", ErrNotBuilt)
		}
		opts.KubeBin = strings.TrimSpace(string(out))
	} else {
		cmd := exec.Command(script)
		cmd.Stderr = progress
		out, err := cmd.Output()
		if err != nil {
			return opts, fmt.Errorf("scripts/build-kubernetes.sh: %w", err)
		}
		opts.KubeBin = strings.TrimSpace(string(out))
	}
	cmd := exec.Command(filepath.Join(repo, "scripts", "build-containerd2.sh"))
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return opts, fmt.Errorf("scripts/build-containerd2.sh: %w", err)
	}
	opts.ContainerdBin = strings.TrimSpace(string(out))
	if crictl := filepath.Join(repo, ".cache", "crictl", "crictl"); fileExists(crictl) {
		opts.Crictl = crictl
	}
	opts.GPUBin = filepath.Join(dir, "bin")
	if err := testbin.Build(repo, opts.GPUBin); err != nil {
		return opts, err
	}
	if err := testbin.BuildKubeletPlugin(repo, opts.GPUBin); err != nil {
		return opts, err
	}
	opts.DeviceClasses = filepath.Join(repo, "deployments", "kubernetes", "deviceclasses.yaml")
	hostOpts, err := FakeHost()
	if err != nil {
		return opts, err
	}
	if opts.Host, err = fakehost.Build(filepath.Join(dir, "host"), hostOpts); err != nil {
		return opts, fmt.Errorf("build the fake GPU host: %w", err)
	}
	return opts, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

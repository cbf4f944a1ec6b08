package dra

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/version"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// The defaults of the command line.
const (
	DefaultKubeletDir = "/var/lib/kubelet"
	DefaultCDIDir     = "/var/run/cdi"
	DefaultStateDir   = "/var/lib/gpu-runtime/dra"
)

// ErrUsage marks a bad command line.
var ErrUsage = errors.New("usage")

const usage = `usage: gpu-kubelet-plugin --node-name NAME [--kubeconfig FILE] [--kubelet-dir DIR]
                          [--cdi-dir DIR] [--state-dir DIR]

gpu-kubelet-plugin is gpu-runtime's Kubernetes DRA driver, gpu.gpu-runtime.dev: it publishes
this node's GPUs and MIG devices in ResourceSlices (unhealthy ones tainted) and prepares the
ResourceClaims allocated on it, one CDI spec per claim in --cdi-dir. It reads gpu-runtime's
configuration (GPU_RUNTIME_CONFIG, else /etc/gpu-runtime/config.toml), asks NVML through
gpu-ctk (next to it, else in PATH), logs to stderr, and stops on SIGTERM after removing its
sockets. Without --kubeconfig it uses the pod's in-cluster credentials.
`

// Command runs gpu-kubelet-plugin with args until ctx is done.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-kubelet-plugin", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig FILE; none: in-cluster credentials")
	node := fs.String("node-name", "", "the name of this node (required)")
	kubeletDir := fs.String("kubelet-dir", DefaultKubeletDir, "the kubelet's root directory")
	cdiDir := fs.String("cdi-dir", DefaultCDIDir, "where the claims' CDI specs are written")
	stateDir := fs.String("state-dir", DefaultStateDir, "where the checkpoint of prepared claims is kept")
	showVersion := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, usage)
			return err
		}
		return fmt.Errorf("%w: %w (gpu-kubelet-plugin --help)", ErrUsage, err)
	}
	if *showVersion {
		_, err := fmt.Fprintf(stdout, "gpu-kubelet-plugin %s\n", version.Version)
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q (gpu-kubelet-plugin --help)", ErrUsage, fs.Arg(0))
	case *node == "":
		return fmt.Errorf("%w: --node-name is required: the name of this node, as kubectl get nodes shows it (in a DaemonSet: from spec.nodeName)", ErrUsage)
	}
	for _, p := range []struct{ flag, value string }{{"--kubelet-dir", *kubeletDir}, {"--cdi-dir", *cdiDir}, {"--state-dir", *stateDir}} {
		if !filepath.IsAbs(p.value) {
			return fmt.Errorf("%w: %s %q: want an absolute path", ErrUsage, p.flag, p.value)
		}
	}

	log := logrus.New()
	log.SetOutput(stderr)
	cfg, warnings, err := config.LoadFromEnv(os.Getenv)
	for _, w := range warnings {
		log.Warn(w)
	}
	if err != nil {
		return err
	}
	log.SetLevel(cfg.Level())

	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		if *kubeconfig == "" {
			return fmt.Errorf("no --kubeconfig, and not in a pod: %w", err)
		}
		return fmt.Errorf("--kubeconfig %s: %w", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("client of the Kubernetes API: %w", err)
	}

	self, _ := os.Executable()
	render, err := create.Render(create.Options{Config: cfg, Executable: self})
	if err != nil {
		return err
	}
	// The discovery cache is the plugin's own, in its state directory: it writes nowhere else.
	hostCfg := cfg
	hostCfg.Discovery.CacheFile = filepath.Join(*stateDir, "discovery-cache.csv")
	query := func(ctx context.Context, root string) (discover.Driver, error) {
		ctk, err := ctkPath(self)
		if err != nil {
			return discover.Driver{}, err
		}
		return create.NVMLQuery(ctk)(ctx, root)
	}
	launcher, _ := ctkPath(self) // gpu-ctk becomes the shared claims' MPS daemons
	// and, through gpu-hook, sets their per-cgroup GPU memory limits.
	render.CTKPath, render.DriverRoot = launcher, cfg.Driver.Root
	if len(cfg.DRA.SharedGPUs) > 0 {
		logMemoryLimits(log, launcher, cfg.Driver.Root, memoryLimitsProbeTimeout)
	}
	d, err := New(Options{Config: cfg, NodeName: *node, CDIDir: *cdiDir, StateDir: *stateDir, Render: render, Log: log, MPSLauncher: launcher,
		Host: func() (gpuhost.Result, error) {
			return gpuhost.Build(hostCfg, gpuhost.Options{Query: query, Cache: true, Health: true, Topology: true})
		}})
	if err != nil {
		return err
	}
	return d.Run(ctx, RunOptions{KubeClient: client, KubeletDir: *kubeletDir, Poll: 2 * time.Second})
}

// ctkPath finds gpu-ctk, which answers NVML queries: next to the plugin, else in PATH.
func ctkPath(self string) (string, error) {
	if self != "" {
		p := filepath.Join(filepath.Dir(self), create.CTKName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath(create.CTKName)
	if err != nil {
		return "", fmt.Errorf("gpu-ctk not found next to gpu-kubelet-plugin nor in PATH: install it (it answers NVML queries)")
	}
	return p, nil
}

package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// DRADriver is the name gpu-kubelet-plugin publishes its ResourceSlices under.
const DRADriver = "gpu.gpu-runtime.dev"

// DRAPlugin is gpu-kubelet-plugin running as a host process for the cluster's node, as the
// systemd unit runs it: the node's credentials, the kubelet's root directory, the CDI
// directory containerd reads, its own state directory, and gpu-runtime's configuration of
// the fake host (GPU_RUNTIME_CONFIG).
type DRAPlugin struct {
	*enginetest.Daemon
	StateDir string
}

// StartDRAPlugin applies the DeviceClasses and starts gpu-kubelet-plugin with its files under
// dir (log: dir/gpu-kubelet-plugin.log) and its state in stateDir, and waits until its devices
// are published. Starting it again on the same stateDir is a plugin restart.
func (c *Cluster) StartDRAPlugin(dir, stateDir string) (*DRAPlugin, error) {
	return c.StartDRAPluginWith(dir, stateDir, "")
}

// StartDRAPluginWith is StartDRAPlugin with extra, TOML tables appended to gpu-runtime's
// configuration for this plugin only (dir/gpu-kubelet-plugin.toml: its [dra] table, say); ""
// is gpu-runtime's configuration as it is.
func (c *Cluster) StartDRAPluginWith(dir, stateDir, extra string) (*DRAPlugin, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	config := c.RuntimeConfig
	if extra != "" {
		base, err := os.ReadFile(c.RuntimeConfig)
		if err != nil {
			return nil, err
		}
		config = filepath.Join(dir, "gpu-kubelet-plugin.toml")
		if err := os.WriteFile(config, append(base, "\n"+extra+"\n"...), 0o644); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if c.DeviceClasses != "" {
		if out, err := c.Kubectl(ctx, "", "apply", "-f", c.DeviceClasses); err != nil {
			return nil, fmt.Errorf("apply %s: %w: %s", c.DeviceClasses, err, out)
		}
	}
	// Ready: this run logged that it registered and published (a killed run leaves its
	// socket behind), and the node's slices list devices.
	logFile := filepath.Join(dir, "gpu-kubelet-plugin.log")
	var offset int64
	if fi, err := os.Stat(logFile); err == nil {
		offset = fi.Size()
	}
	ready := func() error {
		data, err := os.ReadFile(logFile)
		if err != nil || int64(len(data)) < offset || !strings.Contains(string(data[offset:]), "devices published") {
			return fmt.Errorf("gpu-kubelet-plugin has not logged \"devices published\" yet")
		}
		out, err := c.Kubectl(ctx, "", "get", "resourceslices", "--field-selector", "spec.driver="+DRADriver+",spec.nodeName="+c.NodeName,
			"-o", "jsonpath={.items[*].spec.devices[*].name}")
		if err != nil {
			return fmt.Errorf("list the ResourceSlices: %w: %s", err, out)
		}
		if strings.TrimSpace(out) == "" {
			return fmt.Errorf("no ResourceSlice of %s lists a device yet", DRADriver)
		}
		return nil
	}
	d, err := enginetest.StartDaemon("gpu-kubelet-plugin", dir, []string{"GPU_RUNTIME_CONFIG=" + config},
		ready, filepath.Join(c.GPUBin, "gpu-kubelet-plugin"),
		"--kubeconfig", c.NodeKubeconfig, "--node-name", c.NodeName, "--kubelet-dir", c.KubeletDir,
		"--cdi-dir", c.CDIDir, "--state-dir", stateDir)
	if err != nil {
		return nil, err
	}
	return &DRAPlugin{Daemon: d, StateDir: stateDir}, nil
}

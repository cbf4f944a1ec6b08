package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// RunOptions say how the plugin meets the kubelet and the API server.
type RunOptions struct {
	KubeClient kubernetes.Interface
	// KubeletDir is the kubelet's root directory: the registration socket goes in
	// plugins_registry, the DRA service socket in plugins/<driver>.
	KubeletDir string
	// Poll is how often the host view is rebuilt (the health file and the discovery
	// fingerprint: MIG reconfigured, a GPU gone) and the slices republished when they changed.
	Poll time.Duration
}

// Run registers the driver with the kubelet, publishes the node's devices and republishes
// them whenever they change, until ctx is done; then it stops the helper, which removes its
// sockets, and returns.
func (d *Driver) Run(ctx context.Context, o RunOptions) error {
	registry := filepath.Join(o.KubeletDir, "plugins_registry")
	data := filepath.Join(o.KubeletDir, "plugins", DriverName)
	for _, dir := range []string{registry, data} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("--kubelet-dir: %w", err)
		}
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(o.KubeClient),
		kubeletplugin.NodeName(d.o.NodeName),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(data),
		kubeletplugin.HealthService(false))
	if err != nil {
		return fmt.Errorf("start the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	d.o.Log.WithField("node", d.o.NodeName).Info("registered with the kubelet")

	var published *resourceslice.DriverResources
	publish := func() {
		res, warnings, err := d.Resources()
		for _, w := range warnings {
			d.o.Log.Warn(w)
		}
		if err != nil {
			d.o.Log.WithError(err).Error("GPU host: devices not republished")
			return
		}
		if published != nil && equality.Semantic.DeepEqual(*published, res) {
			return
		}
		// The first call starts the slice controller, which waits for the API server (until
		// ctx is done: SIGTERM still stops the plugin).
		if err := helper.PublishResources(ctx, res); err != nil {
			if ctx.Err() == nil {
				d.o.Log.WithError(err).Error("publish ResourceSlices")
			}
			return
		}
		published = &res
		n := 0
		for _, s := range res.Pools[d.o.NodeName].Slices {
			n += len(s.Devices)
		}
		d.o.Log.WithField("devices", n).Info("devices published")
	}
	publish()
	poll := o.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.o.Log.Info("stopping: removing the plugin's sockets")
			return nil
		case <-t.C:
			publish()
		}
	}
}

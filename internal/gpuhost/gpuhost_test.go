package gpuhost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// TestDriver: the NVML query is bounded by discovery.timeout; health is read only when asked.
func TestDriver(t *testing.T) {
	cfg := config.Default()
	cfg.Discovery.Timeout = "50ms"
	hung := func(ctx context.Context, _ string) (discover.Driver, error) {
		<-ctx.Done()
		return discover.Driver{}, ctx.Err()
	}
	start := time.Now()
	if _, _, err := Driver(cfg, hung, false); !errors.Is(err, discover.ErrTimeout) || time.Since(start) > 5*time.Second {
		t.Errorf("a hung NVML: %v after %s", err, time.Since(start))
	}
	cfg.Health.File = t.TempDir() + "/health.csv" // none there: nothing unhealthy, no warning
	cfg.Driver.ProcRoot = t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfg.Driver.ProcRoot, discover.ProcGPUs), 0o755); err != nil { // the driver, with no GPU
		t.Fatal(err)
	}
	answer := func(context.Context, string) (discover.Driver, error) {
		return discover.Driver{Version: "550.54.15", GPUs: []discover.GPU{{Index: 0, UUID: "GPU-a", BusID: "0000:01:00.0"}}}, nil
	}
	d, _, err := Driver(cfg, answer, false)
	if err != nil || d.GPUs[0].Health != nil {
		t.Errorf("without health: %+v, %v", d.GPUs[0].Health, err)
	}
	// With health, a GPU the driver's /proc does not list is gone.
	d, _, err = Driver(cfg, answer, true)
	if err != nil || d.GPUs[0].Health == nil || d.GPUs[0].Health.Signal != discover.HealthGone {
		t.Errorf("with health: %+v, %v", d.GPUs[0].Health, err)
	}
}

// TestBuild: the host is the device nodes, the driver, and the configuration's MPS shares and
// health policy; a device-node scan that fails is the error.
func TestBuild(t *testing.T) {
	cfg := config.Default()
	cfg.Driver.Root, cfg.Discovery.Cache = t.TempDir(), false
	cfg.Health.All = config.HealthAllFail
	nodes := discover.DeviceNodes{Root: "/dev", Nodes: map[string]discover.DeviceNode{"/dev/nvidiactl": {Path: "/dev/nvidiactl"}}}
	queried := 0
	o := Options{
		Query: func(context.Context, string) (discover.Driver, error) {
			queried++
			return discover.Driver{Version: "550.54.15"}, nil
		},
		FindDeviceNodes: func(string) (discover.DeviceNodes, error) { return nodes, nil },
	}
	res, err := Build(cfg, o)
	if err != nil || queried != 1 || res.Host.Driver.Version != "550.54.15" || len(res.Host.Devices.Nodes) != 1 || res.Host.UnhealthyAll != config.HealthAllFail {
		t.Errorf("Build = %+v, %v (queried %d)", res.Host, err, queried)
	}
	o.FindDeviceNodes = func(string) (discover.DeviceNodes, error) { return discover.DeviceNodes{}, errors.New("no dev root") }
	if _, err := Build(cfg, o); err == nil || err.Error() != "no dev root" {
		t.Errorf("a failed scan: %v", err)
	}
}

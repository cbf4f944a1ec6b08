// Package gpuhost builds the one view of the GPU host that every command plans against, from
// gpu-runtime's configuration: the device nodes, the driver and its GPUs (from NVML, or the
// discovery cache), the driver files, the MIG capability interface, each GPU's health and the
// MPS shares. The runtime's create and every gpu-ctk command that names GPUs build it here.
package gpuhost

import (
	"fmt"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// Options say how to build the host.
type Options struct {
	// Query asks NVML (required).
	Query discover.QueryFunc
	// Cache: answer from the discovery cache when it still matches the host, as a create
	// does; otherwise NVML is asked and the cache left alone.
	Cache  bool
	Health bool // read each GPU's health (never cached)
	// Topology reads each GPU's PCIe root and NUMA node from sysfs under driver.sys-root
	// (never cached); a GPU whose topology cannot be read is a warning.
	Topology bool
	// FindDeviceNodes scans the device root; nil: discover.FindDeviceNodes (a seam for tests).
	FindDeviceNodes func(devRoot string) (discover.DeviceNodes, error)
}

// Result is the host and what building it noticed.
type Result struct {
	Host     plan.Host
	CacheHit bool
	// Warnings say what could not be trusted (the cache, the health file) and was ignored.
	Warnings []string
}

// Driver asks NVML about cfg's driver root (bounded by discovery.timeout: past it, the error
// is discover.ErrTimeout's) and, with health, reads each GPU's health; warnings say what of
// the health file was not trusted.
func Driver(cfg config.Config, query discover.QueryFunc, health bool) (discover.Driver, []string, error) {
	d, err := discover.Query(options(cfg, query))
	if err != nil || !health {
		return d, nil, err
	}
	return d, readHealth(cfg, d.GPUs), nil
}

// Build builds the host from cfg: the device nodes, then the driver (the cache or NVML,
// bounded by discovery.timeout), then health; the MPS shares' configuration rides along.
func Build(cfg config.Config, o Options) (Result, error) {
	find := o.FindDeviceNodes
	if find == nil {
		find = discover.FindDeviceNodes
	}
	nodes, err := find(cfg.Driver.DevRoot)
	if err != nil {
		return Result{}, err
	}
	dopts := options(cfg, o.Query)
	if o.Cache && cfg.Discovery.Cache {
		dopts.CacheFile = cfg.Discovery.CacheFile
	}
	res, err := discover.Discover(dopts, nodes)
	out := Result{CacheHit: res.CacheHit}
	if res.CacheProblem != "" {
		out.Warnings = append(out.Warnings, res.CacheProblem)
	}
	if err != nil {
		return out, err
	}
	if o.Health {
		out.Warnings = append(out.Warnings, readHealth(cfg, res.Host.Driver.GPUs)...)
	}
	out.Host = plan.Host{Driver: res.Host.Driver, Files: res.Host.Files, Devices: nodes, MIGCaps: res.Host.MIGCaps,
		ProcRoot: cfg.Driver.ProcRoot, MPS: plan.MPS{Config: cfg.MPS}, UnhealthyAll: cfg.Health.All}
	if o.Topology {
		out.Host.Topology = map[string]discover.Topology{}
		for _, g := range res.Host.Driver.GPUs {
			t, err := discover.ReadTopology(cfg.Driver.SysRoot, g.BusID)
			if err != nil {
				out.Warnings = append(out.Warnings, fmt.Sprintf("GPU %d (%s): topology not published: %v", g.Index, g.UUID, err))
				continue
			}
			out.Host.Topology[g.UUID] = t
		}
	}
	return out, nil
}

// options are discover's options for cfg, without the cache.
func options(cfg config.Config, query discover.QueryFunc) discover.Options {
	return discover.Options{DriverRoot: cfg.Driver.Root, DevRoot: cfg.Driver.DevRoot, ProcRoot: cfg.Driver.ProcRoot,
		Timeout: cfg.Discovery.TimeoutDuration(), Query: query}
}

func readHealth(cfg config.Config, gpus []discover.GPU) []string {
	return discover.ReadHealth(gpus, discover.HealthOptions{File: cfg.Health.File, ProcRoot: cfg.Driver.ProcRoot})
}

package ctk

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

const infoUsage = `usage:
  gpu-ctk info [--json] [--driver-root DIR]

info asks NVML (loaded from the driver root) for the driver, the CUDA version it supports and
every GPU — index, minor, UUID, name, brand, PCI bus, compute capability, MIG mode and MIG
devices — as gpu-runtime sees them, and which devices gpu-runtime keeps from containers as
unhealthy (gpu-ctk health; not with --driver-root, which reads no configuration). gpu-runtime
runs gpu-ctk info --json --driver-root when its discovery cache misses.
`

// runInfo prints the driver version, CUDA version and every GPU. --json is the interface
// gpu-runtime uses when its discovery cache misses.
func runInfo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk info", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	root := fs.String("driver-root", "", "driver root (default: driver.root from the gpu-runtime config)")
	if help, err := parseNoArgs(fs, args, infoUsage, stdout); help || err != nil {
		return err
	}
	// With --driver-root (gpu-runtime's NVML query on a cache miss, which reads its own
	// configuration) no configuration is read, and no health: the query's answer is facts.
	cfg, fromConfig := config.Default(), *root == ""
	if fromConfig {
		var err error
		if cfg, err = loadConfig(stderr); err != nil {
			return err
		}
	} else {
		cfg.Driver.Root, cfg.Discovery.Timeout = *root, "0s" // the caller bounds it
	}
	d, warnings, err := gpuhost.Driver(cfg, nvmlinfo.QueryContext, fromConfig)
	if err != nil {
		return err
	}
	warn(stderr, warnings...)
	if *asJSON {
		return writeJSON(stdout, d)
	}
	fmt.Fprintf(stdout, "Driver version: %s\nCUDA version:   %s\nNVML library:   %s\nGPUs:           %d\n\n", d.Version, d.CUDAVersion, d.NVMLPath, len(d.GPUs))
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tMINOR\tMODEL\tBRAND\tUUID\tBUS ID\tCOMPUTE CAP\tMIG")
	for _, g := range d.GPUs {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.Minor, g.Name, g.Brand, g.UUID, g.BusID, g.ComputeCapability, migMode(g))
		// MIG devices under their parent: what NVIDIA_VISIBLE_DEVICES=0:1 or MIG-… names.
		for _, m := range g.MIGDevices {
			fmt.Fprintf(tw, "  %d:%d\t\tMIG %s (GI %d, CI %d, %d MiB)\t\t%s\t\t\t\n", g.Index, m.Index, m.Profile, m.GI, m.CI, m.MemoryMiB, m.UUID)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Every row has every cell, so the columns line up; the padding of empty last cells goes.
	var b strings.Builder
	for line := range strings.Lines(table.String()) {
		b.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	if fromConfig {
		b.WriteString(infoHealth(d))
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

// infoHealth ends gpu-ctk info: which devices gpu-runtime keeps from containers.
func infoHealth(d discover.Driver) string {
	sick := healthSummary(d)
	for _, x := range d.Excluded {
		sick = append(sick, "GPU "+x.UUID+": "+x.Reason())
	}
	if len(sick) == 0 {
		return "\nHealth: every device healthy (gpu-ctk health)\n"
	}
	return "\nUnhealthy (given to no container; gpu-ctk health):\n  " + strings.Join(sick, "\n  ") + "\n"
}

// migMode describes a GPU's MIG mode: "-" when it has none, "enabled", "disabled", or the
// mode it takes at the next reset when that differs.
func migMode(g discover.GPU) string {
	if !g.MIGCapable {
		return "-"
	}
	if g.MIGCurrent != g.MIGPending {
		return onOff(g.MIGCurrent) + " (" + onOff(g.MIGPending) + " after reset)"
	}
	return onOff(g.MIGCurrent)
}

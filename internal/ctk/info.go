package ctk

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

func init() {
	Register("info", "show the NVIDIA driver and GPUs gpu-runtime sees (queries NVML)", runInfo)
}

// runInfo prints the driver version, CUDA version and every GPU. --json is the interface
// gpu-runtime uses when its discovery cache misses.
func runInfo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk info", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	root := fs.String("driver-root", "", "driver root (default: driver.root from the gpu-runtime config)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: info takes no arguments, got %q", ErrUsage, fs.Args())
	}
	if *root == "" {
		cfg, warnings, err := config.LoadFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		for _, w := range warnings {
			fmt.Fprintln(stderr, "gpu-ctk: warning: "+w)
		}
		*root = cfg.Driver.Root
	}
	d, err := nvmlinfo.Query(*root)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	fmt.Fprintf(stdout, "Driver version: %s\nCUDA version:   %s\nNVML library:   %s\nGPUs:           %d\n\n", d.Version, d.CUDAVersion, d.NVMLPath, len(d.GPUs))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tMINOR\tMODEL\tBRAND\tUUID\tBUS ID\tCOMPUTE CAP")
	for _, g := range d.GPUs {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.Minor, g.Name, g.Brand, g.UUID, g.BusID, g.ComputeCapability)
	}
	return tw.Flush()
}

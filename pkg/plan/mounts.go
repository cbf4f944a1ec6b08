package plan

import (
	"fmt"
	"path"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
)

// readOnly are the options of every driver-file mount: read-only, nosuid, nodev. The source
// of every mount is a host path under the driver root found by discovery; nothing from a
// container image is ever a source.
var readOnly = []string{"ro", "nosuid", "nodev", "bind"}

// mountFor returns the mount injecting one driver file, at its path minus the driver root.
// Files that are never run (sockets, config files, firmware) are also noexec.
func mountFor(f discover.File) edits.Mount {
	opts := append([]string(nil), readOnly...)
	if f.Kind == discover.KindSocket || f.Kind == discover.KindConfig || f.Kind == discover.KindFirmware {
		opts = append(opts, "noexec")
	}
	return edits.Mount{HostPath: f.HostPath, ContainerPath: f.ContainerPath, Options: opts, Why: fileWhy(f)}
}

// fileWhy says which capability selected a driver file, and what the file is: "compute:
// library libcuda (64-bit)", "utility: binary nvidia-smi", "firmware: every GPU container".
func fileWhy(f discover.File) string {
	by := "every GPU container"
	if f.Capability != "" {
		by = string(f.Capability)
	}
	switch f.Kind {
	case discover.KindLibrary:
		if f.Bits == 32 {
			return fmt.Sprintf("%s and compat32: library %s (32-bit)", by, f.Prefix)
		}
		return fmt.Sprintf("%s: library %s (64-bit)", by, f.Prefix)
	case discover.KindFirmware:
		return "firmware: every GPU container (the GPU's GSP firmware)"
	case discover.KindBinary:
		return fmt.Sprintf("%s: binary %s", by, path.Base(f.ContainerPath))
	}
	return fmt.Sprintf("%s: %s %s", by, f.Kind, f.ContainerPath)
}

// Package mounts turns driver files found on the host into bind-mount entries: read-only,
// nosuid, nodev, at the file's path minus the driver root. The source of every mount is a
// host path under the driver root; nothing from a container image is ever a source.
package mounts

import (
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
)

// ReadOnly are the options of every driver-file mount.
var ReadOnly = []string{"ro", "nosuid", "nodev", "bind"}

// ForFile returns the mount injecting one driver file.
func ForFile(f discover.File) edits.Mount {
	opts := append([]string(nil), ReadOnly...)
	if f.Kind == discover.KindSocket || f.Kind == discover.KindConfig || f.Kind == discover.KindFirmware {
		opts = append(opts, "noexec")
	}
	return edits.Mount{HostPath: f.HostPath, ContainerPath: f.ContainerPath, Options: opts}
}

// ForFiles maps ForFile over files, keeping their order.
func ForFiles(files []discover.File) []edits.Mount {
	out := make([]edits.Mount, 0, len(files))
	for _, f := range files {
		out = append(out, ForFile(f))
	}
	return out
}

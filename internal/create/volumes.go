package create

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
)

// ErrIntoVolume: the image's links lead a mount gpu-runtime injects into one of the
// container's volumes, where the low-level runtime would create its target as root.
var ErrIntoVolume = errors.New("the image leads a GPU mount into a volume")

// checkVolumeTargets refuses an injection whose mounts the image's links lead into a volume
// (a directory bind mount) of the container. The low-level runtime mounts in the spec's order,
// resolving each target in the root as it is then, volumes mounted, following the image's
// links: with /etc -> /data and a volume at /data runc would create
// /data/OpenCL/vendors/nvidia.icd, a root-owned file in the host directory behind the volume
// that the container's user may not be allowed to write. A mount whose own path is inside the
// volume (the administrator's doing) stays allowed; a file cannot hold a target. root is the
// container root (absolute). Resolution is securejoin's, as runc's: lexical, in the root,
// before any mount.
func checkVolumeTargets(root string, mounts []specs.Mount, injected []edits.Mount) error {
	type volume struct{ dest, resolved, source string }
	var volumes []volume
	for _, m := range foreign(mounts, injected) {
		dest := path.Clean(m.Destination)
		if !(m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")) {
			continue
		}
		if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
			continue
		}
		resolved, err := securejoin.SecureJoin(root, dest)
		if err != nil {
			return fmt.Errorf("resolve the mount destination %s in the container root: %w", quote.Value(m.Destination), err)
		}
		volumes = append(volumes, volume{dest, resolved, m.Source})
	}
	if len(volumes) == 0 {
		return nil
	}
	for _, m := range injected {
		dest := path.Clean(m.ContainerPath)
		resolved, err := securejoin.SecureJoin(root, dest)
		if err != nil {
			return fmt.Errorf("resolve %s in the container root: %w", dest, err)
		}
		for _, v := range volumes {
			if (resolved == v.resolved || within(resolved, v.resolved)) && dest != v.dest && !within(dest, v.dest) {
				rel, _ := filepath.Rel(root, resolved)
				return fmt.Errorf("%w: the image's links lead %s to /%s, inside %s, which the container mounts from the host directory %s: the low-level runtime would create the mount's target there as root; remove the image's link, or mount the volume elsewhere",
					ErrIntoVolume, dest, filepath.ToSlash(rel), v.dest, quote.Value(v.source))
			}
		}
	}
	return nil
}

// foreign returns the spec's mounts but those at the paths of the injected ones.
func foreign(mounts []specs.Mount, injected []edits.Mount) []specs.Mount {
	ours := map[string]bool{}
	for _, m := range injected {
		ours[path.Clean(m.ContainerPath)] = true
	}
	return slices.DeleteFunc(slices.Clone(mounts), func(m specs.Mount) bool { return ours[path.Clean(m.Destination)] })
}

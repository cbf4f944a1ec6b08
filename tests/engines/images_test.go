package engines

import (
	"os"
	"path/filepath"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// Images. Every engine gets the same busybox root filesystem:
//   - docker: `docker import --change 'CMD ["/bin/sh"]' - img:1` of rootfsTar
//   - podman: `podman import` of rootfsTar
//   - containerd: `ctr images import` of imageArchive, a `docker save`-format archive written
//     here, so containerd's tests do not need dockerd. It holds img:1 and pause:1, the CRI's
//     sandbox image, whose CMD sleeps.
const (
	imageName        = "img:1"
	containerdImage  = "docker.io/library/img:1"
	containerdPause  = "docker.io/library/pause:1"
	sandboxSleepSecs = "2147483647"
)

// writeImages writes rootfsTar and imageArchive under workDir.
func writeImages() error {
	layer, err := enginetest.BusyboxLayer()
	if err != nil {
		return err
	}
	rootfsTar = filepath.Join(workDir, "rootfs.tar")
	if err := os.WriteFile(rootfsTar, layer, 0o644); err != nil {
		return err
	}
	archive, err := enginetest.DockerArchive(layer, map[string][]string{
		"img:1":   {"/bin/sh"},
		"pause:1": {"/bin/sleep", sandboxSleepSecs},
	})
	if err != nil {
		return err
	}
	imageArchive = filepath.Join(workDir, "images.tar")
	return os.WriteFile(imageArchive, archive, 0o644)
}

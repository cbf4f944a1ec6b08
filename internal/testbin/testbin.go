// Package testbin builds gpu-runtime's binaries for the end-to-end suites the way `make
// build` does — gpu-runtime and gpu-hook static, gpu-ctk with cgo, all -trimpath and
// stripped — so that the suites test what ships and reuse make build's compiled packages
// (a build without -trimpath compiles everything again).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// binaries are the programs Build makes, with whether each is built with cgo.
var binaries = []struct {
	Name string
	Cgo  bool
}{{"gpu-runtime", false}, {"gpu-hook", false}, {"gpu-ctk", true}}

// Build builds every binary of the module at moduleRoot into dir.
func Build(moduleRoot, dir string) error {
	for _, b := range binaries {
		if err := build(moduleRoot, dir, b.Name, b.Cgo); err != nil {
			return err
		}
	}
	return nil
}

// BuildKubeletPlugin builds gpu-kubelet-plugin (static, as make build does) into dir: only the
// Kubernetes suites need it.
func BuildKubeletPlugin(moduleRoot, dir string) error {
	return build(moduleRoot, dir, "gpu-kubelet-plugin", false)
}

func build(moduleRoot, dir, name string, withCgo bool) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, name), "./cmd/"+name)
	cmd.Dir = moduleRoot
	cgo := "0"
	if withCgo {
		cgo = "1"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w: %s", name, err, out)
	}
	return nil
}

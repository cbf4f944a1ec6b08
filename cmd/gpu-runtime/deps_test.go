package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoHeavyPackage: gpu-runtime runs for every call of every container (start, delete,
// state…), so what it links is part of its cost. The loader-cache hook's CLI and sandbox, the
// ELF and DWARF readers, the CDI library (gpu-ctk resolves CDI names), NVML (cgo; gpu-ctk asks
// it), Kubernetes's client libraries (gpu-kubelet-plugin) and crypto stay out of it.
func TestLinksNoHeavyPackage(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIPPED: no go command in PATH to list gpu-runtime's packages")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/gpu-runtime/gpu-runtime/internal/hook",
		"github.com/gpu-runtime/gpu-runtime/internal/cdi",
		"debug/elf", "debug/dwarf",
		"tags.cncf.io/container-device-interface/pkg/cdi",
		"github.com/NVIDIA/go-nvml/pkg/nvml",
		"crypto",
		"k8s.io", // gpu-kubelet-plugin's (internal/dra)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("gpu-runtime links %s", pkg)
			}
		}
	}
}

// Package version holds the build's version, stamped by the Makefile with
// -ldflags "-X github.com/gpu-runtime/gpu-runtime/internal/version.Version=…".
package version

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Version is the release, from git describe.
var Version = "dev"

// String is what --version prints for program.
func String(program string) string {
	return fmt.Sprintf("%s version %s\nspec: %s", program, Version, specs.Version)
}

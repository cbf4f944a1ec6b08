// Command gpu-ctk sets hosts up for gpu-runtime: `gpu-ctk runtime configure --runtime=docker`
// registers it with a container engine. The commands live in internal/ctk.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpu-runtime/gpu-runtime/internal/ctk"
)

func main() {
	err := ctk.Run(os.Args[1:], os.Stdout, os.Stderr)
	if err != nil && !errors.Is(err, ctk.ErrReported) {
		fmt.Fprintln(os.Stderr, "gpu-ctk: "+err.Error())
	}
	os.Exit(ctk.ExitCode(err))
}

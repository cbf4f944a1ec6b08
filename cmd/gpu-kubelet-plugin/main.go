// Command gpu-kubelet-plugin is gpu-runtime's Kubernetes DRA driver (internal/dra), run on
// each GPU node by a DaemonSet or a systemd unit.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpu-runtime/gpu-runtime/internal/dra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := dra.Command(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-kubelet-plugin: "+err.Error())
		if errors.Is(err, dra.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

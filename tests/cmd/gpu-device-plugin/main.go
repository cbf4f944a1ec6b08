// Command gpu-device-plugin runs the cluster tests' double of NVIDIA's device plugin
// (tests/deviceplugin): it asks `gpu-ctk info --json` (gpu-runtime's configuration, from
// GPU_RUNTIME_CONFIG) for the host's GPUs and MIG devices, serves one socket per resource in
// the kubelet's device-plugin directory, registers each with the kubelet, writes --ready once
// the kubelet has listed every resource's devices, and serves until SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/tests/deviceplugin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "gpu-device-plugin: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	strategy := flag.String("device-list-strategy", "envvar", "envvar, volume-mounts, cdi-annotations or cdi-cri")
	migStrategy := flag.String("mig-strategy", "mixed", "none or mixed")
	gpuCtk := flag.String("gpu-ctk", "gpu-ctk", "gpu-ctk, for the host's devices")
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	name := flag.String("name", "gpu-device-plugin", "socket name prefix")
	ready := flag.String("ready", "", "file written once the kubelet has listed every resource")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, *gpuCtk, "info", "--json").Output()
	if err != nil {
		return fmt.Errorf("gpu-ctk info --json: %w", err)
	}
	var d discover.Driver
	if err := json.Unmarshal(out, &d); err != nil {
		return fmt.Errorf("read gpu-ctk info --json: %w", err)
	}
	resources, err := deviceplugin.Resources(d, *migStrategy)
	if err != nil {
		return err
	}
	var servers []*deviceplugin.Server
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	for _, r := range resources {
		sock := filepath.Join(*dir, *name+"-"+strings.ReplaceAll(strings.TrimPrefix(r.Name, "nvidia.com/"), "/", "-")+".sock")
		s := &deviceplugin.Server{Resource: r, Strategy: *strategy, Socket: sock}
		if _, err := deviceplugin.Allocate(*strategy, nil); err != nil {
			return err
		}
		if err := s.Serve(); err != nil {
			return err
		}
		servers = append(servers, s)
		if err := s.Register(context.Background(), filepath.Join(*dir, "kubelet.sock")); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "gpu-device-plugin: %s: %d devices (%s), strategy %s\n", r.Name, len(r.Devices), strings.Join(r.Devices, ","), *strategy)
	}
	for _, s := range servers {
		select {
		case <-s.Listed:
		case <-time.After(60 * time.Second):
			return fmt.Errorf("the kubelet did not list %s within 60s", s.Resource.Name)
		}
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}

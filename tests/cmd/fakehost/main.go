// Command fakehost builds a fake NVIDIA GPU host (see internal/fakehost) for demos and shell
// tests, and prints where its parts are as KEY=value lines that a shell can eval:
//
//	eval "$(fakehost --dir /tmp/gpuhost --gpus 2)"
//	ls "$DEV_ROOT/dev" "$DRIVER_ROOT/usr/bin"
//
// It needs root, gcc and ldconfig.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

func main() {
	defaults := fakehost.Default(0)
	dir := flag.String("dir", "", "directory to build the host in; must be empty or not exist (required)")
	gpus := flag.Int("gpus", 2, "number of GPUs")
	driverVersion := flag.String("driver-version", defaults.DriverVersion, "NVIDIA driver version")
	cudaVersion := flag.Int("cuda-version", defaults.CUDAVersion, "CUDA version in NVML form (12040 is 12.4)")
	initError := flag.Bool("nvml-init-error", false, "make nvmlInit fail with NVML_ERROR_DRIVER_NOT_LOADED")
	noSocket := flag.Bool("no-persistenced-socket", false, "do not create the nvidia-persistenced socket")
	flag.Parse()
	if *dir == "" || *gpus < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: fakehost --dir DIR [--gpus N] [--driver-version V] [--cuda-version 12040]")
		flag.PrintDefaults()
		os.Exit(2)
	}

	opts := fakehost.Default(*gpus)
	opts.DriverVersion = *driverVersion
	opts.CUDAVersion = *cudaVersion
	opts.NVMLInitError = *initError
	opts.WithPersistencedSocket = !*noSocket
	h, err := fakehost.Build(*dir, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakehost: %v\n", err)
		os.Exit(1)
	}

	var uuids []string
	for _, g := range h.Options.GPUs {
		uuids = append(uuids, g.UUID)
	}
	for _, kv := range [][2]string{
		{"FAKEHOST_DIR", h.Dir},
		{"DRIVER_ROOT", h.DriverRoot},
		{"DEV_ROOT", h.DevRoot},
		{"LIB_DIR", h.LibDir},
		{"NVML_LIBRARY", h.NVMLPath()},
		{"DRIVER_VERSION", h.Options.DriverVersion},
		{"CUDA_VERSION", strconv.Itoa(h.Options.CUDAVersion)},
		{"GPU_COUNT", strconv.Itoa(len(h.Options.GPUs))},
		{"GPU_UUIDS", strings.Join(uuids, ",")},
		{"UVM_MAJOR", strconv.Itoa(h.UVMMajor)},
	} {
		fmt.Printf("%s=%s\n", kv[0], shellQuote(kv[1]))
	}
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:,+=@%-]*$`)

// shellQuote leaves plain values alone and single-quotes the rest.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Command fakehost builds a fake NVIDIA GPU host (see internal/fakehost) for demos and shell
// tests, and prints where its parts are as KEY=value lines that a shell can eval:
//
//	eval "$(fakehost --dir /tmp/gpuhost --gpus 2 --mig '0=3g.40gb,2g.20gb,1g.10gb')"
//	ls "$DEV_ROOT/dev" "$DRIVER_ROOT/usr/bin" "$PROC_ROOT/proc/driver/nvidia"
//	echo "${GPU_UUIDS%%,*} xid 79" >>"$NVML_EVENTS"
//
// It needs root, gcc and ldconfig.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run builds the host the arguments describe and prints its KEY=value lines; it returns the
// exit status: 2 for bad usage, 1 when the host cannot be built.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "fakehost: %v\n", err)
		return 2
	}
	h, err := cfg.build()
	if err != nil {
		fmt.Fprintf(stderr, "fakehost: %v\n", err)
		return 1
	}
	for _, kv := range report(h) {
		fmt.Fprintf(stdout, "%s=%s\n", kv[0], shellQuote(kv[1]))
	}
	return 0
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:,+=@%-]*$`)

// shellQuote leaves plain values alone and single-quotes the rest.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

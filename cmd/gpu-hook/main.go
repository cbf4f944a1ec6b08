// Command gpu-hook is gpu-runtime's OCI hook. The runtime writes its entries into the spec
// with an absolute path and an explicit environment; the low-level runtime runs it with the
// container state on stdin. It is built without cgo (a static binary), so no environment or
// image content can inject code into it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpu-runtime/gpu-runtime/internal/hook"
	"github.com/gpu-runtime/gpu-runtime/internal/version"
)

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "gpu-hook: "+err.Error())
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader) error {
	if len(args) == 0 {
		return errors.New("usage: gpu-hook update-ldcache --ldconfig PATH --library PATH...")
	}
	switch args[0] {
	case "--version", "-v", "version":
		fmt.Println(version.String("gpu-hook"))
		return nil
	case "update-ldcache":
		fs := flag.NewFlagSet("update-ldcache", flag.ContinueOnError)
		var opts hook.LDCacheOptions
		var libs multi
		fs.StringVar(&opts.LDConfig, "ldconfig", "/sbin/ldconfig", "the host's ldconfig")
		fs.Var(&libs, "library", "container path of an injected library (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		opts.Libraries = libs
		root, err := hook.ContainerRoot(stdin)
		if err != nil {
			return err
		}
		return hook.UpdateLDCache(root, opts)
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
}

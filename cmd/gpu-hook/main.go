// Command gpu-hook is gpu-runtime's OCI hook. The runtime writes its entries into the spec
// with an absolute path and an explicit environment; the low-level runtime runs it with the
// container state on stdin. It is built without cgo (a static binary), so no environment or
// image content can inject code into it.
//
//	gpu-hook update-ldcache --ldconfig PATH --driver-version V [--log FILE --log-format F] --library PATH...  (createContainer)
//	gpu-hook proc-caps --proc-root DIR --cap gpu0/mig/gi1/access...                 (createContainer)
package main

import (
	"fmt"
	"os"

	"github.com/moby/sys/reexec"

	"github.com/gpu-runtime/gpu-runtime/internal/hook"
)

func main() {
	if reexec.Init() { // the ldconfig sandbox (internal/hook)
		return
	}
	if err := hook.Run(os.Args[0], os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpu-hook: "+err.Error())
		os.Exit(1)
	}
}

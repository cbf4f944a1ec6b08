package ctk

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/engine"
)

const loadedUsage = `usage:
  gpu-ctk loaded [--record]

loaded asks the running engines — dockerd on DOCKER_HOST (unix://) or /var/run/docker.sock,
containerd's CRI plugin on CONTAINERD_ADDRESS or /run/containerd/containerd.sock, through
crictl (GPU_RUNTIME_CRICTL, else on PATH or in /usr/local/bin, /usr/bin…) — whether they have
gpu-runtime loaded as a runtime, under whatever name (gpu, nvidia: a runtime whose program's
path ends in /gpu-runtime), and says which to restart to unload it.
An engine reads its configuration only when it starts: after gpu-ctk runtime unconfigure, or
the package's removal, it keeps running containers through gpu-runtime until restarted.
An engine that answers, but not what it loaded (containerd without crictl), is listed as
unknown. --record prints one line per such engine for the package's scripts:
"ENGINE PID STARTTIME default|loaded|unknown NAMES" (STARTTIME: field 22 of /proc/PID/stat,
which tells the same process from a restarted one; PID 0: not known; NAMES: the runtimes of
gpu-runtime's, comma-separated, "-" when unknown).
`

// engineRestarts are the commands that restart the engines loaded names.
var engineRestarts = map[engine.Engine]string{engine.Docker: "systemctl restart docker", engine.Containerd: "systemctl restart containerd"}

func runLoaded(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk loaded", flag.ContinueOnError)
	record := fs.Bool("record", false, "print ENGINE PID STARTTIME default|loaded|unknown NAMES lines")
	if help, err := parseNoArgs(fs, args, loadedUsage, stdout); help || err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range []engine.Engine{engine.Docker, engine.Containerd} {
		live, err := queryLive(e, "/")
		if errors.Is(err, engine.ErrNotRunning) {
			continue
		}
		ours := live.Ours("")
		state := "loaded"
		switch {
		case err != nil:
			state = "unknown"
		case len(ours) == 0:
			continue
		case slices.Contains(ours, live.Default):
			state = "default"
		}
		if *record {
			if err != nil {
				fmt.Fprintf(stderr, "gpu-ctk: %v\n", err)
			}
			fmt.Fprintf(&b, "%s %d %d %s %s\n", e, live.PID, live.StartTime, state, cmp.Or(strings.Join(ours, ","), "-"))
			continue
		}
		who := "the running " + daemonName(e)
		if live.PID != 0 {
			who += fmt.Sprintf(" (pid %d)", live.PID)
		}
		switch state {
		case "unknown":
			fmt.Fprintf(&b, "%s may have gpu-runtime loaded as a runtime (%v): to be sure it has not, %s\n", who, err, engineRestarts[e])
		case "default":
			fmt.Fprintf(&b, "%s has the %s loaded, %q as its default runtime: %s\n", who, runtimeNames(ours), live.Default, engineRestarts[e])
		default:
			fmt.Fprintf(&b, "%s has the %s loaded: %s\n", who, runtimeNames(ours), engineRestarts[e])
		}
	}
	_, err := io.WriteString(stdout, b.String())
	return err
}

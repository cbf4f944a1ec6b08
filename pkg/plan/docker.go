package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// dockerCount recognises docker run --gpus N: docker writes NVIDIA_VISIBLE_DEVICES=0,1,…,N-1
// beside its hook (moby daemon/nvidia_linux.go, countToDevices).
func dockerCount(req request.Request) (int, bool) {
	if !req.DockerGPUs || len(req.Devices) == 0 {
		return 0, false
	}
	for i, tok := range req.Devices {
		if tok != strconv.Itoa(i) {
			return 0, false
		}
	}
	return len(req.Devices), true
}

// countError is docker run --gpus N's one error: the count the host cannot meet and the GPUs
// in MIG mode among the first N, in one message that errors.Is finds both sentinels in.
type countError struct {
	msg  string
	errs []error
}

func (e *countError) Error() string   { return e.msg }
func (e *countError) Unwrap() []error { return e.errs }

// dockerCountError is the error for docker run --gpus n (n > 0) when the host has fewer than n
// GPUs (tooMany) or some of the first n are in MIG mode (migWhole): in the user's words, what
// --gpus n selected, and what to ask for instead — the whole GPUs that can be given, the MIG
// devices by name, or --gpus all. The user never set NVIDIA_VISIBLE_DEVICES.
func dockerCountError(n int, gpus []discover.GPU, tooMany bool, migWhole []discover.GPU) error {
	if len(migWhole) == 0 { // the count alone
		return fmt.Errorf("%w: docker run --gpus %d asked for %d GPUs, and %s; use --gpus %d or fewer, --gpus all, or --gpus device=<index or UUID>",
			ErrUnknownDevice, n, n, describe(gpus), len(gpus))
	}
	var b strings.Builder
	var errs []error
	if tooMany {
		errs = append(errs, ErrUnknownDevice)
		fmt.Fprintf(&b, "%s: docker run --gpus %d asked for %d GPUs, and %s", ErrUnknownDevice, n, n, describe(gpus))
	} else {
		fmt.Fprintf(&b, "%s: docker run --gpus %d selects %s", ErrMIGEnabled, n, firstGPUs(n))
	}
	errs = append(errs, ErrMIGEnabled)
	var mig []string
	for _, g := range migWhole {
		mig = append(mig, fmt.Sprintf("%d (%s)", g.Index, g.UUID))
	}
	verb := "is"
	if len(mig) > 1 {
		verb = "are"
	}
	fmt.Fprintf(&b, "; GPU %s %s in MIG mode and cannot be given whole", strings.Join(mig, ", "), verb)
	var ways, whole, migIDs []string
	for _, d := range Devices(gpus) {
		if d.IsMIG() {
			migIDs = append(migIDs, d.Index)
		} else {
			whole = append(whole, d.Index)
		}
	}
	if len(whole) > 0 {
		ways = append(ways, "whole GPUs not in MIG mode: "+gpusFlag(whole))
	}
	if len(migIDs) > 0 {
		ways = append(ways, "MIG devices: "+gpusFlag(migIDs)+" (this host has MIG devices "+describeMIG(gpus...)+")")
	} else {
		ways = append(ways, "MIG devices, once created with nvidia-smi mig (this host has none yet)")
	}
	ways = append(ways, "--gpus all (every GPU not in MIG mode and every MIG device)")
	fmt.Fprintf(&b, "; ask for %s", strings.Join(ways, ", or "))
	return &countError{msg: b.String(), errs: errs}
}

// firstGPUs says which GPUs --gpus n selects: "GPU 0", "the first 2 GPUs, 0 and 1".
func firstGPUs(n int) string {
	if n == 1 {
		return "GPU 0"
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return fmt.Sprintf("the first %d GPUs, %s and %s", n, strings.Join(ids[:n-1], ", "), ids[n-1])
}

// gpusFlag is the docker flag that asks for these devices, quoted as docker's CLI needs a
// list to be (--gpus '"device=0,1"'; a single device needs no quotes).
func gpusFlag(ids []string) string {
	if len(ids) == 1 {
		return "--gpus device=" + ids[0]
	}
	return `--gpus '"device=` + strings.Join(ids, ",") + `"'`
}

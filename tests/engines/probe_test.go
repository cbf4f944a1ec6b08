package engines

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// probe is the command every container runs; wantGPUs checks its output against the suite's
// fake host.
const probe = enginetest.Probe

func wantGPUs(t *testing.T, out string, gpus ...int) {
	t.Helper()
	enginetest.WantGPUs(t, host, out, gpus...)
	if t.Failed() {
		logRuntimeTail(t)
	}
}

// wantRan checks that the engine ran a probe container to completion and that it got exactly
// the given GPUs (see wantGPUs). what names the command for the failure message.
func wantRan(t *testing.T, what string, r result, gpus ...int) {
	t.Helper()
	if r.Code != 0 {
		logRuntimeTail(t)
		t.Fatalf("%s: %s", what, r)
	}
	wantGPUs(t, r.Stdout, gpus...)
}

// wantRefused checks that the engine failed before the container ran (with exit status code,
// or any failure when code is 0) and that its error output holds each of msgs, as written or
// with quotes escaped (podman echoes the runtime's logrus lines as they are).
func wantRefused(t *testing.T, what string, r result, code int, msgs ...string) {
	t.Helper()
	if r.Code == 0 || (code != 0 && r.Code != code) || strings.Contains(r.Stdout, "probe-done") {
		t.Fatalf("want %s to fail (exit %d) before the container runs: %s", what, code, r)
	}
	for _, m := range msgs {
		if !strings.Contains(r.Stderr, m) && !strings.Contains(r.Stderr, strings.ReplaceAll(m, `"`, `\"`)) {
			t.Errorf("%s's error lacks %q:\n%s", what, m, r.Stderr)
		}
	}
}

// logRuntimeTail logs the end of gpu-runtime's log file, for failures.
func logRuntimeTail(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(runtimeLog)
	if err != nil {
		t.Logf("gpu-runtime log: %v", err)
		return
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	t.Logf("end of gpu-runtime's log (%s):\n%s", runtimeLog, data)
}

// engineCase is one `<engine> run` of the probe: its flags, and either the GPUs the probe
// must see (none: no GPU) or the error the engine must show.
type engineCase struct {
	description string
	flags       []string
	gpus        []int
	wantErr     string
}

// runEngineCases runs each case through run; what names the command in messages.
func runEngineCases(t *testing.T, what string, run func(t *testing.T, flags ...string) result, cases []engineCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.description, func(t *testing.T) {
			r := run(t, tc.flags...)
			if tc.wantErr != "" {
				wantRefused(t, what, r, 0, tc.wantErr)
				return
			}
			wantRan(t, fmt.Sprintf("%s %v", what, tc.flags), r, tc.gpus...)
		})
	}
}

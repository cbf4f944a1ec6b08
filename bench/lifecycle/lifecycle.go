package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// variant is one way of running a container: which binary containerd's shim would call,
// with which gpu-runtime config, on which spec.
type variant struct {
	key, label string
	binary     string // gpu-runtime or runc
	config     string // GPU_RUNTIME_CONFIG (ignored by runc)
	spec       []byte // the bundle's config.json before create
	image      string // the rootfs: imageBusybox or imageRealistic
}

// sample is one timed lifecycle, in milliseconds.
type sample struct {
	create, start, wait, delete, total float64
	waitMethod                         string
	trace                              *traceResult
}

// invocation is one run of a runtime binary.
type invocation struct {
	wall   time.Duration
	maxRSS int64 // KiB, set by runAlone only
	pid    int
}

var baseEnv = func() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPU_RUNTIME_CONFIG=") {
			env = append(env, kv)
		}
	}
	return env
}()

// invoke runs binary with args and waits for it; the wall time covers fork, exec and wait.
// Children get their own process group, so a Ctrl-C on the terminal reaches only the bench,
// which finishes the step in flight and then cleans up. Output goes to a file: a created
// container inherits runc's stdio and would hold a pipe open.
func (l *lab) invoke(binary, config string, stderr *os.File, args ...string) (invocation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(append([]string(nil), baseEnv...), "GPU_RUNTIME_CONFIG="+config)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return invocation{}, err
	}
	err := cmd.Wait()
	inv := invocation{wall: time.Since(start), pid: cmd.Process.Pid}
	return inv, err
}

// lifecycle runs create, start, wait-for-exit and delete on a fresh bundle, timing each step
// the way containerd's shim sees it. With a tracer, it also attributes the processes spawned.
func (l *lab) lifecycle(v variant) (sample, error) {
	id, dir, err := l.newImageBundle(v.spec, v.image)
	if err != nil {
		return sample{}, fmt.Errorf("prepare bundle: %w", err)
	}
	stderr, err := os.OpenFile(filepath.Join(dir, "runtime.stderr"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return sample{}, err
	}
	defer stderr.Close()
	global := []string{"--root", l.state, "--log", filepath.Join(dir, "log.json"), "--log-format", "json"}
	pidFile := filepath.Join(dir, "init.pid")
	fail := func(step string, err error) (sample, error) {
		return sample{}, fmt.Errorf("%s: %s %s of container %s (bundle %s): %w%s", v.label, filepath.Base(v.binary), step, id, dir, err, diagnostics(dir))
	}
	var marks [5]int64
	mark := func(i int) {
		if l.tracer != nil {
			marks[i] = monotonicNow()
		}
	}

	var s sample
	mark(0)
	c, err := l.invoke(v.binary, v.config, stderr, append(global, "create", "--bundle", dir, "--pid-file", pidFile, id)...)
	mark(1)
	if err != nil {
		return fail("create", err)
	}
	s.create = ms(c.wall)
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return fail("create (pid file)", err)
	}
	initPID, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return fail("create (pid file)", err)
	}
	hookEntries := -1
	if l.tracer != nil {
		hookEntries = countHooks(filepath.Join(dir, "config.json"))
	}

	st, err := l.invoke(v.binary, v.config, stderr, append(global, "start", id)...)
	mark(2)
	if err != nil {
		return fail("start", err)
	}
	s.start = ms(st.wall)

	t := time.Now()
	s.waitMethod, err = waitExit(initPID)
	s.wait = ms(time.Since(t))
	mark(3)
	if err != nil {
		return fail("wait", err)
	}

	d, err := l.invoke(v.binary, v.config, stderr, append(global, "delete", id)...)
	mark(4)
	if err != nil {
		return fail("delete", err)
	}
	s.delete = ms(d.wall)
	s.total = s.create + s.start + s.wait + s.delete

	if l.tracer != nil {
		s.trace = l.analyze(marks, c.pid, initPID)
		s.trace.hookEntries = hookEntries
	}
	if err := os.RemoveAll(dir); err != nil {
		return sample{}, fmt.Errorf("remove bundle %s: %w", dir, err)
	}
	return s, nil
}

// waitExit waits until the container's init process has exited. The bench is a child
// subreaper (as containerd's shim is), so runc's init is re-parented to it and wait4 both
// waits and reaps: no polling delay. If that fails (not our child), it polls.
func waitExit(pid int) (string, error) {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		switch {
		case err == nil:
			return "wait4", nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
		default:
			return "", fmt.Errorf("wait for init pid %d: %w", pid, err)
		}
		break
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			return "poll", nil
		}
		time.Sleep(200 * time.Microsecond)
	}
	return "", fmt.Errorf("init pid %d still running after a minute", pid)
}

// diagnostics returns the runtime's stderr and the error lines of its --log file.
func diagnostics(dir string) string {
	var b strings.Builder
	if out, _ := os.ReadFile(filepath.Join(dir, "runtime.stderr")); len(bytes.TrimSpace(out)) > 0 {
		b.WriteString("\n  stderr: " + strings.TrimSpace(string(out)))
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "log.json")); len(log) > 0 {
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"fatal"`) {
				b.WriteString("\n  log: " + line)
			}
		}
	}
	return b.String()
}

// countHooks returns the number of hook entries, all stages together, in a spec file.
func countHooks(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return -1
	}
	if s.Hooks == nil {
		return 0
	}
	h := s.Hooks
	return len(h.Prestart) + len(h.CreateRuntime) + len(h.CreateContainer) + len(h.StartContainer) + len(h.Poststart) + len(h.Poststop) //nolint:staticcheck // Prestart is deprecated, still run by runc
}

// traceResult is what the proc connector saw during one lifecycle.
type traceResult struct {
	hookEntries int // hook entries in the spec runc was given
	// hookProcs are the processes exec'd during the lifecycle that are neither the runtime
	// (gpu-runtime, runc, runc init) nor the container's own process, by comm. A process
	// that execs another program stays one process: "gpu-hook update-ldcache → ldconfig".
	hookProcs []string
	// hookMs is the time from the first exec of each hook process to its exit, by its
	// name in hookProcs (an exec chain is timed as one process).
	hookMs map[string][]float64
	// wrapperMs is, in the create invocation, the time from gpu-runtime's exec to its exec of
	// runc: the wrapper's whole cost in situ. NaN for plain runc.
	wrapperMs float64
	// runcCreateMs is from runc's exec (in the create invocation) to that process's exit.
	runcCreateMs float64
	execs        int // every exec seen in the lifecycle, the container's included
	nvmlHelpers  int // gpu-ctk runs (discovery-cache misses)
	lost         bool
}

// analyze collects the tracer's events for one lifecycle bracketed by marks.
func (l *lab) analyze(marks [5]int64, createPID, initPID int) *traceResult {
	// A sentinel child: once its exit is seen, every earlier event has been read.
	if cmd := exec.Command(l.noop); cmd.Run() == nil {
		deadline := time.Now().Add(2 * time.Second)
		for !l.tracer.sawExit(cmd.Process.Pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	events, lost := l.tracer.take()
	r := &traceResult{hookMs: map[string][]float64{}, wrapperMs: math.NaN(), runcCreateMs: math.NaN(), lost: lost}
	exitAt := map[int]int64{}
	for _, e := range events {
		if !e.exec && e.ts >= marks[0] {
			exitAt[e.pid] = e.ts
		}
	}
	var createExecs []procEvent
	hookIndex := map[int]int{}   // pid -> index in r.hookProcs
	hookStart := map[int]int64{} // pid -> its first exec
	for _, e := range events {
		if !e.exec || e.ts < marks[0] || e.ts > marks[4] {
			continue
		}
		r.execs++
		if e.pid == createPID {
			createExecs = append(createExecs, e)
		}
		if e.pid == initPID || l.isRuntime(e) {
			continue
		}
		if strings.HasPrefix(e.comm, "gpu-ctk") {
			r.nvmlHelpers++ // gpu-runtime asking NVML on a discovery-cache miss: not a hook
			continue
		}
		name := e.comm
		if name == "" {
			name = "? (exited before it could be named)"
		}
		if i, seen := hookIndex[e.pid]; seen {
			r.hookProcs[i] += " → " + name // execve: the same process runs another program
		} else {
			hookIndex[e.pid] = len(r.hookProcs)
			hookStart[e.pid] = e.ts
			r.hookProcs = append(r.hookProcs, name)
		}
	}
	for pid, i := range hookIndex {
		if end, ok := exitAt[pid]; ok && end >= hookStart[pid] {
			r.hookMs[r.hookProcs[i]] = append(r.hookMs[r.hookProcs[i]], float64(end-hookStart[pid])/1e6)
		}
	}
	if n := len(createExecs); n > 0 {
		last := createExecs[n-1]
		if n >= 2 {
			r.wrapperMs = float64(last.ts-createExecs[0].ts) / 1e6
		}
		if end, ok := exitAt[createPID]; ok {
			r.runcCreateMs = float64(end-last.ts) / 1e6
		}
	}
	return r
}

// isRuntime says whether an exec is of a runtime: gpu-runtime (the baseline build's too), the
// exec-only Go wrapper, or runc (runc init included, which runc 1.1 runs from /proc/self/exe
// or from a sealed memfd copy of itself).
func (l *lab) isRuntime(e procEvent) bool {
	if strings.HasPrefix(e.comm, "runc") || strings.Contains(e.exe, "memfd:runc") {
		return true
	}
	for _, p := range []string{l.runc, l.runtime, l.baseRuntime, l.goExec} {
		if p == "" {
			continue
		}
		if e.exe == p {
			return true
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && e.exe == real {
			return true
		}
	}
	return false
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

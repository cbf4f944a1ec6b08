// Package e2e drives the real gpu-runtime and gpu-hook binaries against real runc on a fake
// GPU host built by internal/fakehost. It needs root. Under `make test` (GPU_RUNTIME_E2E=1)
// a missing prerequisite fails the run; otherwise the tests skip with the reason.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/testbin"
)

var (
	skipReason     string
	binDir         string // built gpu-runtime and gpu-hook
	peakRSS        string // the peakrss program (peakRSSSource)
	workDir        string
	specTmpl       []byte // `runc spec` output
	busyboxApplets []string

	hostsMu sync.Mutex
	hosts   = map[int]*fakehost.Host{}
)

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		workDir, err = os.MkdirTemp("", "gpu-runtime-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(workDir)
		if reason := setup(); reason != "" {
			if os.Getenv("GPU_RUNTIME_E2E") == "1" {
				fmt.Fprintf(os.Stderr, "e2e: FAIL: prerequisite missing under GPU_RUNTIME_E2E=1: %s\n", reason)
				return 1
			}
			skipReason = reason
			fmt.Fprintf(os.Stderr, "\n*** e2e tests SKIPPED: %s (run `make test` as root to run them) ***\n\n", reason)
		}
		return m.Run()
	}()
	os.Exit(code)
}

// peakRSSSource is peakrss: "peakrss OUT PROG ARGS..." runs PROG in a child made by a plain
// fork (it starts with this small program's memory, not a test binary's), writes the peak
// resident set of it and every process it waited for, in KiB, to OUT, and exits as PROG did.
const peakRSSSource = `#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
	if (argc < 3) return 125;
	pid_t pid = fork();
	if (pid < 0) return 125;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(argv[2], argv + 2);
		_exit(127);
	}
	int status;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0) {}
	FILE *f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%ld\n", ru.ru_maxrss) < 0 || fclose(f) != 0) return 125;
	if (WIFEXITED(status)) return WEXITSTATUS(status);
	signal(WTERMSIG(status), SIG_DFL);
	raise(WTERMSIG(status));
	return 128 + WTERMSIG(status);
}
`

// setup checks prerequisites and builds the binaries; it returns a reason to skip, or "".
func setup() string {
	if os.Geteuid() != 0 {
		return "end-to-end tests need root (mknod, runc)"
	}
	for _, tool := range []string{"runc", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (make deps)"
		}
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return "/bin/busybox is not installed (apt-get install busybox-static)"
	}
	busyboxApplets = strings.Fields(string(out))

	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "cannot find the module root: " + err.Error()
	}
	peakRSS = filepath.Join(workDir, "peakrss")
	cc := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-x", "c", "-o", peakRSS, "-")
	cc.Stdin = strings.NewReader(peakRSSSource)
	if out, err := cc.CombinedOutput(); err != nil {
		return fmt.Sprintf("build peakrss: %v: %s", err, out)
	}
	binDir = filepath.Join(workDir, "bin")
	if err := testbin.Build(strings.TrimSpace(string(root)), binDir); err != nil {
		return err.Error()
	}
	tmpl := filepath.Join(workDir, "spec")
	if err := os.MkdirAll(tmpl, 0o755); err != nil {
		return err.Error()
	}
	if out, err := exec.Command("runc", "spec", "-b", tmpl).CombinedOutput(); err != nil {
		return fmt.Sprintf("runc spec: %v: %s", err, out)
	}
	if specTmpl, err = os.ReadFile(filepath.Join(tmpl, "config.json")); err != nil {
		return err.Error()
	}
	return ""
}

func requireE2E(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED: " + skipReason)
	}
}

// fakeHost returns a shared fake host with n GPUs (built once per test binary).
func fakeHost(t *testing.T, n int) *fakehost.Host {
	t.Helper()
	hostsMu.Lock()
	defer hostsMu.Unlock()
	if h, ok := hosts[n]; ok {
		return h
	}
	h, err := fakehost.Build(filepath.Join(workDir, fmt.Sprintf("host%d", n)), fakehost.Default(n))
	if err != nil {
		t.Fatalf("build fake host with %d GPUs: %v", n, err)
	}
	hosts[n] = h
	return h
}

// env is one test's world: a fake host, a gpu-runtime config pointing at it, and a private
// runc state root.
type env struct {
	host      *fakehost.Host
	dir       string
	config    string
	stateRoot string
	// capKiB, when not zero, caps the address space of gpu-runtime and what it starts
	// (runc, the hook): a test of memory bounds must not take the machine with it when
	// they fail.
	capKiB int
}

func newEnv(t *testing.T, gpus int) *env {
	t.Helper()
	requireE2E(t)
	h := fakeHost(t, gpus)
	dir := t.TempDir()
	e := &env{host: h, dir: dir, config: filepath.Join(dir, "config.toml"), stateRoot: filepath.Join(dir, "runc-state")}
	e.writeConfig(t, "")
	return e
}

func (e *env) writeConfig(t *testing.T, extra string) {
	t.Helper()
	cfg := fmt.Sprintf(`[runtime]
runtimes = ["runc"]
log-level = "debug"
[driver]
root = %q
dev-root = %q
proc-root = %q
[hook]
path = %q
[discovery]
cache-file = %q
%s`, e.host.DriverRoot, e.host.DevRoot, e.host.ProcRoot, filepath.Join(binDir, "gpu-hook"), filepath.Join(e.dir, "discovery-cache.csv"), extra)
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bundle creates a bundle whose container runs `sh -c script` with the given environment.
func (e *env) bundle(t *testing.T, containerEnv []string, script string) string {
	t.Helper()
	b := filepath.Join(t.TempDir(), "bundle")
	rootfs := filepath.Join(b, "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "usr/bin", "usr/lib"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link("/bin/busybox", filepath.Join(rootfs, "bin/busybox")); err != nil {
		if out, err := exec.Command("cp", "/bin/busybox", filepath.Join(rootfs, "bin/busybox")).CombinedOutput(); err != nil {
			t.Fatalf("copy busybox: %v: %s", err, out)
		}
	}
	for _, a := range busyboxApplets {
		if a == "busybox" {
			continue
		}
		_ = os.Symlink("busybox", filepath.Join(rootfs, "bin", a))
	}
	var spec specs.Spec
	if err := json.Unmarshal(specTmpl, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"/bin/sh", "-c", script}
	spec.Process.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, containerEnv...)
	spec.Root.Readonly = false
	data, err := json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

type result struct {
	stdout, stderr string
	code           int
	// maxRSS is the peak resident set, in bytes, of gpu-runtime (then runc) and every
	// process it waited for: its hooks among them. peakrss measures it: a process this test
	// binary starts shares the binary's memory until it execs (Go starts it with vfork), and
	// the kernel counts that memory's peak in the child's, so the rusage of a direct child
	// would report at least this test binary's own peak (which grows with what it links).
	maxRSS int64
}

// runtime runs bin/gpu-runtime with the test config and private runc root. Output goes to
// files, not pipes: a created container inherits them and would hold a pipe open.
func (e *env) runtime(t *testing.T, stdout *os.File, args ...string) result {
	t.Helper()
	full := append([]string{"--root", e.stateRoot}, args...)
	argv := append([]string{filepath.Join(binDir, "gpu-runtime")}, full...)
	if e.capKiB > 0 {
		argv = append([]string{"/bin/sh", "-c", fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, e.capKiB)}, argv...)
	}
	dir := t.TempDir()
	rssFile := filepath.Join(dir, "maxrss")
	cmd := exec.Command(peakRSS, append([]string{rssFile}, argv...)...)
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	outFile, err := os.OpenFile(filepath.Join(dir, "stdout"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	errFile, err := os.OpenFile(filepath.Join(dir, "stderr"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, errFile
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("gpu-runtime %v: timed out", args)
	}
	out, _ := os.ReadFile(outFile.Name())
	errb, _ := os.ReadFile(errFile.Name())
	rssOut, err := os.ReadFile(rssFile)
	if err != nil {
		t.Fatalf("gpu-runtime %v: no peak RSS from peakrss: %v", args, err)
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(rssOut)), 10, 64)
	if err != nil {
		t.Fatalf("gpu-runtime %v: peak RSS from peakrss: %v", args, err)
	}
	return result{stdout: string(out), stderr: string(errb), code: cmd.ProcessState.ExitCode(), maxRSS: kib << 10}
}

// run runs a container to completion with `gpu-runtime run` and returns its output.
func (e *env) run(t *testing.T, bundle string, extraArgs ...string) result {
	t.Helper()
	id := containerID(t)
	args := append(append([]string{}, extraArgs...), "run", "--bundle", bundle, id)
	r := e.runtime(t, nil, args...)
	_ = e.runtime(t, nil, "delete", "--force", id)
	return r
}

var idSeq struct {
	sync.Mutex
	n int
}

func containerID(t *testing.T) string {
	idSeq.Lock()
	defer idSeq.Unlock()
	idSeq.n++
	return fmt.Sprintf("e2e-%d-%d", os.Getpid(), idSeq.n)
}

// lines splits output into a set of trimmed lines.
func lines(s string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		out[strings.TrimSpace(l)] = true
	}
	return out
}

// withDriverRoot returns a copy of h whose driver root is root (for broken-host cases).
func withDriverRoot(h *fakehost.Host, root string) *fakehost.Host {
	c := *h
	c.DriverRoot = root
	return &c
}

// wantSpecUnchanged checks that a failed create left the bundle's config.json as it was
// (before) and no temporary file of gpu-runtime's beside it.
func wantSpecUnchanged(t *testing.T, bundle string, before []byte) {
	t.Helper()
	if after, _ := os.ReadFile(filepath.Join(bundle, "config.json")); !bytes.Equal(before, after) {
		t.Errorf("config.json changed by a failed create")
	}
	entries, _ := os.ReadDir(bundle)
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), ".config.json") {
			t.Errorf("temporary file left in the bundle: %s", en.Name())
		}
	}
}

// editSpec edits a bundle's config.json as generic JSON.
func editSpec(t *testing.T, bundle string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	edit(s)
	if data, err = json.Marshal(s); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

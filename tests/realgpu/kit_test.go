// Package realgpu holds the real-GPU check (README.md here): the kit `make realgpu-kit` builds,
// run.sh, which runs on a GPU machine, and gpu-probe. Its tests prove them on fake GPU hosts:
// they build the kit and run run.sh against hosts from tests/cmd/fakehost and
// internal/fakehost, with real runc (the kit's) and real containers; the CUDA checks are
// skipped there with their reason, and every other check must pass. They need root and run
// under GPU_RUNTIME_E2E=1 (make test); otherwise they skip, saying so.
package realgpu

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

var (
	kitOnce sync.Once
	kitDir  string
	kitErr  error
	workDir string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if workDir != "" {
		_ = os.RemoveAll(workDir)
	}
	os.Exit(code)
}

// repoRoot is the repository, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// requireE2E skips without GPU_RUNTIME_E2E=1 and fails where it is set but the test cannot run.
func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("GPU_RUNTIME_E2E") != "1" {
		t.Skip("SKIPPED: the real-GPU kit's fake-host run builds the kit and runs containers: set GPU_RUNTIME_E2E=1 and run as root (make test does)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("GPU_RUNTIME_E2E=1 but not root: run.sh needs root (runc, mknod)")
	}
}

// kit builds the kit once per test binary with `make realgpu-kit`.
func kit(t *testing.T) string {
	t.Helper()
	requireE2E(t)
	kitOnce.Do(func() {
		if workDir, kitErr = os.MkdirTemp("", "gpu-runtime-realgpu-test-"); kitErr != nil {
			return
		}
		kitDir = filepath.Join(workDir, "kit")
		start := time.Now()
		out, err := exec.Command("make", "--no-print-directory", "-C", repoRoot(t), "realgpu-kit", "KIT="+kitDir).CombinedOutput()
		if err != nil {
			kitErr = fmt.Errorf("make realgpu-kit: %w: %s", err, out)
			return
		}
		t.Logf("make realgpu-kit took %s:\n%s", time.Since(start).Round(time.Second), out)
	})
	if kitErr != nil {
		t.Fatal(kitErr)
	}
	return kitDir
}

// row is one line of results.md's table of checks.
type row struct{ check, outcome, detail string }

// result is what a run of run.sh left.
type result struct {
	status  int
	stdout  string
	stderr  string
	checks  []row
	facts   map[string]string
	timings map[string][]string // name => runs, median, min, max
}

// runScript runs run.sh with the kit, a fresh output folder and args, under wrap (a
// command prefix, e.g. unshare) when given.
func runScript(t *testing.T, wrap []string, args ...string) result {
	t.Helper()
	out := t.TempDir()
	argv := append(append(append([]string{}, wrap...), "bash", filepath.Join(repoRoot(t), "tests/realgpu/run.sh"), kit(t), out), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	var exitErr *exec.ExitError
	res := result{stdout: stdout.String(), stderr: stderr.String(), facts: map[string]string{}, timings: map[string][]string{}}
	if errors.As(err, &exitErr) {
		res.status = exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("run.sh %q: exit status %d in %s; stderr: %s", args, res.status, time.Since(start).Round(100*time.Millisecond), stderr.String())
	for _, f := range []string{"run.log", "results.md", "gpu-runtime.log"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("run.sh left no %s: %v", f, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s", err, res.stdout)
	}
	table := ""
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "| | |" || line == "| check | outcome | detail |" || line == "| timing | runs | median | min | max |":
			table = line
		case !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "|---"):
		case table == "| | |":
			k, v, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
			res.facts[k] = v
		case table == "| check | outcome | detail |":
			cells := strings.SplitN(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ", 3)
			if len(cells) != 3 {
				t.Fatalf("results.md: malformed row %q", line)
			}
			res.checks = append(res.checks, row{cells[0], cells[1], cells[2]})
		case table == "| timing | runs | median | min | max |":
			cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
			res.timings[cells[0]] = cells[1:]
		}
	}
	return res
}

// outcomes returns check => outcome.
func (r result) outcomes() map[string]string {
	m := map[string]string{}
	for _, c := range r.checks {
		m[c.check] = c.outcome
	}
	return m
}

func (r result) detail(check string) string {
	for _, c := range r.checks {
		if c.check == check {
			return c.detail
		}
	}
	return "(no such check)"
}

// fakeHostVars builds a fake host with tests/cmd/fakehost and returns its KEY=value lines.
func fakeHostVars(t *testing.T, args ...string) map[string]string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fakehost")
	build := exec.Command("go", "build", "-o", bin, "./tests/cmd/fakehost")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tests/cmd/fakehost: %v: %s", err, out)
	}
	out, err := exec.Command(bin, append([]string{"--dir", filepath.Join(t.TempDir(), "host")}, args...)...).Output()
	if err != nil {
		t.Fatalf("fakehost %q: %v", args, err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	return vars
}

// The CUDA checks' reason on a fake host.
const fakeCUDA = "skipped: fake host — its libcuda has only cuInit and cuDriverGetVersion (no device API)"

// wantOutcomes is every check of a good fake host, in run.sh's order.
func wantOutcomes(alt string) []row {
	return []row{
		{check: "NVML initialisation", outcome: "pass"},
		{check: "gpu-ctk info", outcome: "pass"},
		{check: "gpu-ctk doctor", outcome: "pass"},
		{check: "plain runc container", outcome: "pass"},
		{check: "non-GPU container through gpu-runtime", outcome: "pass"},
		{check: "GPU 0: device nodes", outcome: "pass"},
		{check: "GPU 0: nvidia-smi -L", outcome: "pass"},
		{check: "GPU 0: CUDA probe", outcome: "skip"},
		{check: "none: no GPU device node", outcome: "pass"},
		{check: "none: driver files", outcome: "pass"},
		{check: "none: CUDA finds no device", outcome: "skip"},
		{check: "utility: nvidia-smi works", outcome: "pass"},
		{check: "utility: no libcuda", outcome: "pass"},
		{check: "requirement the host fails", outcome: "pass"},
		{check: "requirement the host passes", outcome: "pass"},
		{check: "MIG device", outcome: "skip"},
		{check: `GPU 0 with driver.root "/"`, outcome: alt},
		{check: "MPS shares 80 % / 20 %", outcome: "pass"},
		{check: "create: cache miss vs hit", outcome: "pass"},
	}
}

// checkGoodRun checks what every run on a good fake host shows; libDir is where the
// container finds the driver's libraries.
func checkGoodRun(t *testing.T, r result, alt, libDir, nvml string, runs int) {
	t.Helper()
	var got []row
	for _, c := range r.checks {
		got = append(got, row{check: c.check, outcome: c.outcome})
	}
	if want := wantOutcomes(alt); !reflect.DeepEqual(got, want) {
		t.Errorf("checks and outcomes:\n%v\nwant:\n%v\nstdout:\n%s", got, want, r.stdout)
	}
	if r.status != 0 {
		t.Errorf("exit status %d, want 0", r.status)
	}
	n := len(wantOutcomes(alt))
	skips := 4
	if alt == "pass" {
		skips = 3
	}
	if last := regexp.MustCompile(fmt.Sprintf(`\n%d passed, 0 failed, %d skipped in [0-9]+ s\n$`, n-skips, skips)); !last.MatchString(r.stdout) {
		t.Errorf("stdout does not end with the summary line:\n%s", r.stdout)
	}
	details := map[string]*regexp.Regexp{
		"NVML initialisation": regexp.MustCompile("^" + regexp.QuoteMeta(nvml) +
			fmt.Sprintf(`: first [0-9.]+ ms, then median [0-9.]+ ms over %d fresh processes$`, runs)),
		"gpu-ctk info":      regexp.MustCompile(`^driver 550\.54\.15, CUDA 12\.4, [0-9]+ GPU\(s\), GPU 0: NVIDIA A100-SXM4-80GB$`),
		"gpu-ctk doctor":    regexp.MustCompile(`^exit 0: [0-9]+ ok, [0-9]+ warn, 0 fail$`),
		"GPU 0: CUDA probe": regexp.MustCompile("^" + regexp.QuoteMeta(fakeCUDA+"; libcuda.so.1 loaded from "+libDir+"/libcuda.so.1") + "$"),
		"GPU 0: nvidia-smi -L": regexp.MustCompile(`^GPU 0: NVIDIA A100-SXM4-80GB \(UUID: GPU-[0-9a-f-]+\)` +
			regexp.QuoteMeta(" (the fake nvidia-smi lists every GPU)") + "$"),
		"GPU 0: device nodes":         regexp.MustCompile(`^nvidia-uvm nvidia-uvm-tools nvidia0 nvidiactl$`),
		"none: no GPU device node":    regexp.MustCompile(`^devices: nvidia-uvm nvidia-uvm-tools nvidiactl$`),
		"none: driver files":          regexp.MustCompile(`^libcuda\.so\.1 loads; nvidia-smi exit=0$`),
		"none: CUDA finds no device":  regexp.MustCompile("^" + regexp.QuoteMeta(fakeCUDA+"; libcuda.so.1 loaded from "+libDir+"/libcuda.so.1") + "$"),
		"utility: no libcuda":         regexp.MustCompile("^" + regexp.QuoteMeta(`library=libcuda.so.1 loaded=no error="libcuda.so.1: cannot open shared object file: No such file or directory"`) + "$"),
		"requirement the host fails":  regexp.MustCompile("^" + regexp.QuoteMeta("cuda>=99.0 refused: unsatisfied condition: cuda>=99.0, please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)") + "$"),
		"requirement the host passes": regexp.MustCompile(`^cuda>=12\.4,driver>=550: the container ran$`),
		"create: cache miss vs hit":   regexp.MustCompile(fmt.Sprintf(`^medians [0-9.]+ ms \(miss\) vs [0-9.]+ ms \(hit\), ratio [0-9.]+, over %d pairs$`, runs)),
	}
	for check, re := range details {
		if d := r.detail(check); !re.MatchString(d) {
			t.Errorf("%s: detail %q does not match %s", check, d, re)
		}
	}
	if got, want := r.facts["libcuda in the container"], libDir+"/libcuda.so.1 -> "+libDir+"/libcuda.so.550.54.15"; got != want {
		t.Errorf("libcuda in the container: %q, want %q", got, want)
	}
	for name, wantRuns := range map[string]string{
		"NVML init, first in this run": "1", "NVML init, a fresh process each": fmt.Sprint(runs),
		"create, discovery cache miss": fmt.Sprint(runs), "create, discovery cache hit": fmt.Sprint(runs),
	} {
		cells := r.timings[name]
		if len(cells) != 4 || cells[0] != wantRuns || !regexp.MustCompile(`^[0-9.]+ ms$`).MatchString(cells[1]) {
			t.Errorf("timing %q: %q, want %s runs and a median in ms", name, cells, wantRuns)
		}
	}
}

// TestRunFakeHost runs run.sh on a fake host as `tests/cmd/fakehost` builds it (the driver's
// files where a distribution installs them), with its default 20 runs of each timing.
func TestRunFakeHost(t *testing.T) {
	kit(t)
	v := fakeHostVars(t, "--gpus", "2", "--mig", "1=3g.40gb,1g.10gb")
	r := runScript(t, nil, "--fake", "--driver-root", v["DRIVER_ROOT"], "--dev-root", v["DEV_ROOT"], "--proc-root", v["PROC_ROOT"])
	checkGoodRun(t, r, "skip", "/usr/lib/x86_64-linux-gnu", v["DRIVER_ROOT"]+"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", 20)
	if d := r.detail(`GPU 0 with driver.root "/"`); d != "skipped: the driver is not in /usr/local/nvidia" {
		t.Errorf("driver.root / check: %q", d)
	}
	// GPU 1 is in MIG mode with MIG devices: the container gets the first one, with the CUDA
	// check skipped on the fake host.
	if mig := r.detail("MIG device"); !strings.HasPrefix(mig, fakeCUDA) {
		t.Errorf("MIG device: %q, want %q…", mig, fakeCUDA)
	}
	if got := r.facts["driver root"]; got != v["DRIVER_ROOT"] {
		t.Errorf("driver root fact %q, want %q", got, v["DRIVER_ROOT"])
	}
}

// TestRunLib64AtUsrLocalNvidia rehearses the GPU machines' layout: a lib64/bin driver folder
// at /usr/local/nvidia (mounted there in a private mount namespace, over a tmpfs on
// /usr/local), found by run.sh itself, and also reached with driver.root "/".
func TestRunLib64AtUsrLocalNvidia(t *testing.T) {
	kit(t)
	opts := fakehost.Default(1)
	opts.Layout = fakehost.LayoutLib64
	h, err := fakehost.Build(filepath.Join(t.TempDir(), "host"), opts)
	if err != nil {
		t.Fatal(err)
	}
	wrap := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o mode=755 tmpfs /usr/local && mkdir /usr/local/nvidia && mount --bind "$0" /usr/local/nvidia && exec "$@"`,
		h.DriverRoot}
	r := runScript(t, wrap, "--fake", "--dev-root", h.DevRoot, "--proc-root", h.ProcRoot, "--runs", "3")
	checkGoodRun(t, r, "pass", "/lib64", "/usr/local/nvidia/lib64/libnvidia-ml.so.1", 3)
	if got, want := r.facts["driver root"], "/usr/local/nvidia (found: it has lib64/libnvidia-ml.so.*)"; got != want {
		t.Errorf("driver root fact %q, want %q", got, want)
	}
	if d, want := r.detail(`GPU 0 with driver.root "/"`), "libcuda from /usr/local/nvidia/lib64/libcuda.so.1; nvidia-smi ran; CUDA skipped: fake host"; d != want {
		t.Errorf("driver.root / check: %q, want %q", d, want)
	}
	if d, want := r.detail("MIG device"), "skipped: no MIG device on this host (nvidia-smi -L lists none; MIG mode is never changed here)"; d != want {
		t.Errorf("MIG device: %q, want %q", d, want)
	}
}

// TestRunMountsCgroups: where /sys/fs/cgroup holds no hierarchy (as in some sandboxes),
// run.sh mounts one in a private mount namespace of its own and goes on.
func TestRunMountsCgroups(t *testing.T) {
	kit(t)
	v := fakeHostVars(t, "--gpus", "1")
	wrap := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount -t tmpfs tmpfs /sys/fs/cgroup && exec "$@"`, "sh"}
	r := runScript(t, wrap, "--fake", "--driver-root", v["DRIVER_ROOT"], "--dev-root", v["DEV_ROOT"], "--proc-root", v["PROC_ROOT"], "--runs", "2")
	checkGoodRun(t, r, "skip", "/usr/lib/x86_64-linux-gnu", v["DRIVER_ROOT"]+"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", 2)
	if got, want := r.facts["cgroups"], "v2 (mounted at /sys/fs/cgroup in a private mount namespace)"; got != want {
		t.Errorf("cgroups fact %q, want %q", got, want)
	}
	if want := "run.sh: /sys/fs/cgroup has no usable cgroup hierarchy: going on in a private mount namespace to mount one\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

// TestBuildKitRefuses: the kit build replaces only a kit, and says how it was misused.
func TestBuildKitRefuses(t *testing.T) {
	requireE2E(t)
	script := filepath.Join(repoRoot(t), "scripts/build-realgpu-kit.sh")
	notKit := t.TempDir()
	if err := os.WriteFile(filepath.Join(notKit, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		args        []string
		status      int
		want        string
	}{
		{"a folder that is no kit", []string{"--out", notKit}, 1, "build-realgpu-kit: " + notKit + " is not empty and is no kit (no KIT.txt): refusing to replace it\n"},
		{"--out without a folder", []string{"--out"}, 2, "build-realgpu-kit: --out needs a directory\n"},
		{"an unknown argument", []string{"--kit"}, 2, "build-realgpu-kit: unknown argument --kit (see --help)\n"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			cmd := exec.Command(script, tc.args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != tc.status || stderr.String() != tc.want {
				t.Errorf("build-realgpu-kit %q: %v, stderr %q; want exit status %d and %q", tc.args, err, stderr.String(), tc.status, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(notKit, "precious")); err != nil {
		t.Errorf("the folder that is no kit was touched: %v", err)
	}
}

// TestKitCarriesRunScript: the kit's run.sh is this one, so a GPU machine needs only the kit.
func TestKitCarriesRunScript(t *testing.T) {
	dir := kit(t)
	for _, f := range []string{"bin/gpu-runtime", "bin/gpu-hook", "bin/gpu-ctk", "bin/runc", "bin/ldconfig", "rootfs/usr/bin/gpu-probe", "rootfs/bin/busybox", "KIT.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("kit: %v", err)
		}
	}
	inKit, err := os.ReadFile(filepath.Join(dir, "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	here, err := os.ReadFile(filepath.Join(repoRoot(t), "tests/realgpu/run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if string(inKit) != string(here) {
		t.Error("the kit's run.sh differs from tests/realgpu/run.sh")
	}
	info, err := os.ReadFile(filepath.Join(dir, "KIT.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^runc: runc version 1\.4\.3;spec: [0-9.]+;go: go[0-9.]+;libseccomp: [0-9.]+$`),
		regexp.MustCompile(`(?m)^runc build: v1\.4\.3 from the Go module proxy, static-pie, seccomp on \(libseccomp [0-9.]+ linked in\)$`),
		regexp.MustCompile(`(?m)^size: [0-9]+ KiB$`),
	} {
		if !want.Match(info) {
			t.Errorf("KIT.txt lacks %s:\n%s", want, info)
		}
	}
}

// TestRunFailures: a run where things are wrong fails, names what, and skips what depends on it.
func TestRunFailures(t *testing.T) {
	kit(t)
	t.Run("no driver in the driver root", func(t *testing.T) {
		v := fakeHostVars(t, "--gpus", "1")
		empty := t.TempDir()
		r := runScript(t, nil, "--fake", "--driver-root", empty, "--dev-root", v["DEV_ROOT"], "--proc-root", v["PROC_ROOT"], "--runs", "2")
		want := map[string]row{
			"NVML initialisation": {outcome: "FAIL", detail: "no libnvidia-ml.so.1 under " + empty +
				" (lib64, usr/lib/x86_64-linux-gnu, lib/x86_64-linux-gnu, usr/lib64, usr/local/nvidia/lib64)"},
			"gpu-ctk info":               {outcome: "FAIL", detail: `gpu-ctk: NVML library not found: load libnvidia-ml.so.1 from driver root "` + empty + `": tried `},
			"GPU 0: device nodes":        {outcome: "skip", detail: "skipped: gpu-ctk info failed, so GPU 0 is unknown"},
			"requirement the host fails": {outcome: "skip", detail: "skipped: gpu-ctk info failed, so the CUDA version is unknown"},
			"none: no GPU device node":   {outcome: "FAIL", detail: "gpu-runtime run failed (exit 1): "},
			"create: cache miss vs hit":  {outcome: "skip", detail: "skipped: the GPU 0 container failed"},
			"plain runc container":       {outcome: "pass", detail: "busybox ran through the kit's runc"},
		}
		for check, w := range want {
			if got := r.outcomes()[check]; got != w.outcome || !strings.HasPrefix(r.detail(check), w.detail) {
				t.Errorf("%s: %s %q, want %s %q…", check, got, r.detail(check), w.outcome, w.detail)
			}
		}
		if r.status != 1 || !regexp.MustCompile(`\n[0-9]+ passed, [1-9][0-9]* failed, [0-9]+ skipped in [0-9]+ s\n$`).MatchString(r.stdout) {
			t.Errorf("exit status %d, want 1, and a summary with failures:\n%s", r.status, r.stdout)
		}
	})
	t.Run("past the deadline", func(t *testing.T) {
		v := fakeHostVars(t, "--gpus", "1")
		r := runScript(t, []string{"env", "REALGPU_DEADLINE=0"}, "--fake", "--driver-root", v["DRIVER_ROOT"], "--dev-root", v["DEV_ROOT"], "--proc-root", v["PROC_ROOT"])
		for check, want := range map[string]row{
			"NVML initialisation":  {outcome: "pass", detail: v["DRIVER_ROOT"] + "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: first "},
			"plain runc container": {outcome: "FAIL", detail: "not run: the run is near its 10-minute limit"},
			"GPU 0: device nodes":  {outcome: "skip", detail: "skipped: not run: the run is near its 10-minute limit"},
			"MIG device":           {outcome: "skip", detail: "skipped: no MIG device on this host"},
		} {
			if got := r.outcomes()[check]; got != want.outcome || !strings.HasPrefix(r.detail(check), want.detail) {
				t.Errorf("%s: %s %q, want %s %q…", check, got, r.detail(check), want.outcome, want.detail)
			}
		}
		if r.status != 1 {
			t.Errorf("exit status %d, want 1", r.status)
		}
	})
	t.Run("libcuda missing", func(t *testing.T) {
		h := fakehost.BuildT(t, fakehost.Default(1))
		for _, f := range []string{"libcuda.so.550.54.15", "libcuda.so.1"} {
			if err := os.Remove(filepath.Join(h.LibDir, f)); err != nil {
				t.Fatal(err)
			}
		}
		r := runScript(t, nil, "--fake", "--driver-root", h.DriverRoot, "--dev-root", h.DevRoot, "--proc-root", h.ProcRoot, "--runs", "2")
		if got := r.outcomes()["GPU 0: device nodes"]; got != "FAIL" || !strings.HasPrefix(r.detail("GPU 0: device nodes"), "gpu-runtime run failed (exit 1): gpu-runtime: ") {
			t.Errorf("GPU 0: device nodes: %s %q, want FAIL naming gpu-runtime's error", got, r.detail("GPU 0: device nodes"))
		}
		if got := r.outcomes()["utility: no libcuda"]; got != "pass" {
			t.Errorf("utility: no libcuda: %s %q, want pass (utility needs no libcuda)", got, r.detail("utility: no libcuda"))
		}
		if r.status != 1 {
			t.Errorf("exit status %d, want 1", r.status)
		}
	})
}

func TestRunUsage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: run.sh checks for root before the kit; run this test as root")
	}
	script := filepath.Join(repoRoot(t), "tests/realgpu/run.sh")
	notKit := t.TempDir()
	usage := "usage: bash tests/realgpu/run.sh KIT OUT [--driver-root DIR] [--dev-root DIR] [--proc-root DIR] [--runs N] [--fake]\n"
	testCases := []struct {
		description string
		args        []string
		want        string
	}{
		{"no arguments", nil, usage},
		{"no output folder", []string{notKit}, usage},
		{"three folders", []string{notKit, notKit, notKit}, usage},
		{"runs not a number", []string{notKit, notKit, "--runs", "0"}, usage},
		{"unknown option", []string{notKit, notKit, "--gpus", "1"}, "run.sh: unknown option --gpus\n" + usage},
		{"not a kit", []string{notKit, t.TempDir()}, "run.sh: " + notKit + " is no kit: bin/gpu-runtime is missing (make realgpu-kit)\n"},
		{"no kit folder", []string{filepath.Join(notKit, "missing"), t.TempDir()}, "run.sh: kit folder not found\n"},
		{"--runs without a value", []string{notKit, notKit, "--runs"}, usage},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			cmd := exec.Command("bash", append([]string{script}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 || string(out) != tc.want {
				t.Errorf("run.sh %q: %v, output:\n%s\nwant exit status 2 and:\n%s", tc.args, err, out, tc.want)
			}
		})
	}
}

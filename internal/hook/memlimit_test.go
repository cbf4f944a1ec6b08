package hook

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

var (
	ctkOnce sync.Once
	ctkPath string
	ctkErr  error
)

// buildCTK builds the real gpu-ctk (cgo, NVML) once: gpu-hook memory-limit runs it.
func buildCTK(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("SKIPPED LOUDLY: no go tool to build gpu-ctk, which gpu-hook memory-limit runs")
	}
	ctkOnce.Do(func() {
		dir, err := os.MkdirTemp("", "memlimit-ctk-")
		if err != nil {
			ctkErr = err
			return
		}
		ctkPath = filepath.Join(dir, "gpu-ctk")
		out, err := exec.Command("go", "build", "-o", ctkPath, "github.com/gpu-runtime/gpu-runtime/cmd/gpu-ctk").CombinedOutput()
		if err != nil {
			ctkErr = errors.New(string(out))
		}
	})
	if ctkErr != nil {
		t.Fatalf("build gpu-ctk: %v", ctkErr)
	}
	return ctkPath
}

func TestContainerCgroup(t *testing.T) {
	testCases := []struct {
		description string
		file        string
		want        string
		wantErr     string
	}{
		{"cgroup v2", "0::/kubepods/pod1/ctr1\n", "/cg/kubepods/pod1/ctr1", ""},
		{"hybrid, in a v2 group", "4:memory:/x\n0::/kubepods/ctr1\n", "/cg/kubepods/ctr1", ""},
		{"hybrid, v2 root", "4:memory:/x\n1:cpu:/x\n0::/\n", "",
			"no cgroup v2 group: the container is in the root of the cgroup v2 hierarchy of a hybrid (cgroup v1) host; per-cgroup GPU memory limits need cgroup v2"},
		{"cgroup v1", "4:memory:/x\n1:cpu:/x\n", "",
			"no cgroup v2 group: PROC/proc/7/cgroup has no cgroup v2 line (a cgroup v1 host); per-cgroup GPU memory limits need cgroup v2"},
		{"unclean path", "0::/a/../../etc\n", "", `PROC/proc/7/cgroup: cgroup v2 path "/a/../../etc" is not a clean absolute path`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			proc := t.TempDir()
			if err := os.MkdirAll(filepath.Join(proc, "proc/7"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(proc, "proc/7/cgroup"), []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ContainerCgroup(proc, 7, "/cg")
			gotErr := ""
			if err != nil {
				gotErr = strings.ReplaceAll(err.Error(), proc, "PROC")
			}
			if got != tc.want || gotErr != tc.wantErr {
				t.Errorf("got %q, %q\nwant %q, %q", got, gotErr, tc.want, tc.wantErr)
			}
			if tc.wantErr != "" && strings.HasPrefix(tc.wantErr, "no cgroup v2") != errors.Is(err, ErrNoCgroupV2) {
				t.Errorf("errors.Is(err, ErrNoCgroupV2) wrong for %v", err)
			}
		})
	}
}

// TestMemoryLimitHook runs gpu-hook memory-limit, set then clear, with the real gpu-ctk
// against fake NVMLs (this process loads none, so several fake drivers are fine).
func TestMemoryLimitHook(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED LOUDLY: nvmlDeviceSetMemoryLimits_v1 needs root, and so does the fake NVML; run as root")
	}
	ctk := buildCTK(t)
	offered := fakehost.Default(1)
	offered.MemoryLimits = fakehost.MemoryLimitsOffered
	h := fakehost.BuildFilesT(t, offered)
	uuid := h.Options.GPUs[0].UUID
	total := uint64(h.Options.GPUs[0].TotalMemoryMiB()) << 20

	proc, cgRoot, stateDir := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "state")
	writeCgroup := func(pid, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, "proc", pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, "proc", pid, "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCgroup("4242", "0::/kubepods/pod1/ctr1\n")
	writeCgroup("4343", "0::/kubepods/pod1/ctr-gone\n")
	writeCgroup("4444", "4:memory:/docker/x\n1:cpu:/docker/x\n")
	cg := filepath.Join(cgRoot, "kubepods/pod1/ctr1")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(root string, state string, args ...string) (string, error) {
		var stdout, stderr strings.Builder
		argv := append([]string{"memory-limit", "--ctk", ctk, "--driver-root", root, "--device", uuid,
			"--state-dir", stateDir, "--proc-root", proc, "--cgroup-root", cgRoot}, args...)
		err := Run("gpu-hook", argv, strings.NewReader(state), &stdout, &stderr)
		return stderr.String(), err
	}
	limits := func() []fakehost.MemoryLimit {
		t.Helper()
		l, err := h.MemoryLimitsSet()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	// createRuntime: set; the fake NVML holds it on the container's cgroup.
	if out, err := run(h.DriverRoot, `{"id":"ctr1","pid":4242}`, "--bytes", "10737418240"); err != nil || out != "" {
		t.Fatalf("set: %v (%s)", err, out)
	}
	if got, want := limits(), []fakehost.MemoryLimit{{UUID: uuid, Cgroup: cg, Soft: 10 << 30, Hard: 10 << 30}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("fake NVML holds %+v, want %+v", got, want)
	}
	// poststop (runc passes no live pid): clear, then again — idempotent.
	for i := range 2 {
		if out, err := run(h.DriverRoot, `{"id":"ctr1","pid":0}`, "--clear"); err != nil || out != "" {
			t.Fatalf("clear %d: %v (%s)", i, err, out)
		}
	}
	if got := limits(); len(got) != 0 {
		t.Fatalf("after clear the fake NVML holds %+v", got)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "ctr1."+uuid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state record left behind: %v", err)
	}

	testCases := []struct {
		description string
		root        string
		state       string
		args        []string
		wantErr     string
		wantStderr  string
	}{
		{"over total memory", h.DriverRoot, `{"id":"ctr2","pid":4242}`, []string{"--bytes", strconvU(total + 1)},
			ctk + " memory-limit set: NVML query failed: set GPU memory limit of " + uuid + " on cgroup " + cg + ": Invalid Argument (the soft limit is above the hard limit, or a limit is above the GPU's total memory)", ""},
		{"missing cgroup", h.DriverRoot, `{"id":"ctr3","pid":4343}`, []string{"--bytes", "1024"},
			ctk + " memory-limit set: NVML query failed: set GPU memory limit of " + uuid + " on cgroup " + filepath.Join(cgRoot, "kubepods/pod1/ctr-gone") + ": The operating system has blocked the request (the cgroup cannot be opened; give the full path of an existing cgroup under /sys/fs/cgroup)", ""},
		{"cgroup v1", h.DriverRoot, `{"id":"ctr4","pid":4444}`, []string{"--bytes", "1024"}, "",
			"gpu-hook: GPU memory limit of 1024 bytes on " + uuid + " not applied: no cgroup v2 group: " + filepath.Join(proc, "proc/4444/cgroup") + " has no cgroup v2 line (a cgroup v1 host); per-cgroup GPU memory limits need cgroup v2\n"},
		{"clear failure is logged", "/nonexistent-driver", `{"id":"ctr5","pid":0}`, []string{"--clear"}, "", ""},
		{"bad container id", h.DriverRoot, `{"id":"../x","pid":4242}`, []string{"--bytes", "1024"},
			`bad hook input: container state has id "../x", want letters, digits and _.+- only`, ""},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			out, err := run(tc.root, tc.state, tc.args...)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.wantErr || out != tc.wantStderr {
				t.Errorf("err %q\nwant %q\nstderr %q\nwant %q", gotErr, tc.wantErr, out, tc.wantStderr)
			}
		})
	}
	if got := limits(); len(got) != 0 {
		t.Errorf("failed sets left limits: %+v", got)
	}

	// A clear that fails (the record is there, the driver is not) is a warning, not an error.
	if err := os.WriteFile(filepath.Join(stateDir, "ctr6."+uuid), []byte(cg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run("/nonexistent-driver", `{"id":"ctr6","pid":0}`, "--clear")
	if err != nil || !strings.HasPrefix(out, "gpu-hook: warning: clear GPU memory limit: "+ctk+" memory-limit clear: ") {
		t.Errorf("failed clear: %v, stderr %q", err, out)
	}

	// A driver without the call: the hook does nothing and says why.
	old := fakehost.BuildFilesT(t, fakehost.Default(1))
	uuid = old.Options.GPUs[0].UUID
	lib := filepath.Join(old.LibDir, "libnvidia-ml.so."+old.Options.DriverVersion)
	out, err = run(old.DriverRoot, `{"id":"ctr7","pid":4242}`, "--bytes", "1024")
	want := "gpu-hook: GPU memory limit not applied: per-cgroup GPU memory limits not offered: " + lib + " has no nvmlDeviceSetMemoryLimits_v1; it needs NVIDIA driver R615 (CUDA 13.4) or later\n"
	if err != nil || out != want {
		t.Errorf("not offered: %v, stderr %q\nwant %q", err, out, want)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "ctr7."+uuid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state record kept where nothing was set: %v", err)
	}
}

func strconvU(n uint64) string { return strconv.FormatUint(n, 10) }

package create

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func exe(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLowLevelRuntime(t *testing.T) {
	dir := t.TempDir()
	runc := exe(t, filepath.Join(dir, "path", "runc"))
	crun := exe(t, filepath.Join(dir, "abs", "crun"))
	self := exe(t, filepath.Join(dir, "path", "gpu-runtime"))
	notExec := filepath.Join(dir, "abs", "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Join(dir, "path"))
	testCases := []struct {
		description string
		candidates  []string
		want        string
		wantErr     string
	}{
		{description: "name found in PATH", candidates: []string{"runc", "crun"}, want: runc},
		{description: "first missing, path used as is", candidates: []string{"nope", crun}, want: crun},
		{description: "itself is skipped", candidates: []string{"gpu-runtime", "runc"}, want: runc},
		{description: "only itself", candidates: []string{self},
			wantErr: "low-level runtime not found: tried [" + self + " (is gpu-runtime itself)]; install runc or set runtime.runtimes in the gpu-runtime config"},
		{description: "nothing usable", candidates: []string{"nope", notExec},
			wantErr: "low-level runtime not found: tried [nope (exec: \"nope\": executable file not found in $PATH) " + notExec + " (runtime.runtimes " + notExec + ": not an executable file)]; install runc or set runtime.runtimes in the gpu-runtime config"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := LowLevelRuntime(tc.candidates, self)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrRuntimeNotFound) {
					t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestHookPath(t *testing.T) {
	dir := t.TempDir()
	self := exe(t, filepath.Join(dir, "bin", "gpu-runtime"))
	beside := exe(t, filepath.Join(dir, "bin", "gpu-hook"))
	configured := exe(t, filepath.Join(dir, "opt", "hook"))
	inPath := exe(t, filepath.Join(dir, "path", "gpu-hook"))
	lonely := exe(t, filepath.Join(dir, "alone", "gpu-runtime"))
	t.Setenv("PATH", filepath.Join(dir, "path"))
	testCases := []struct {
		description, configured, executable, want, wantErr string
	}{
		{description: "configured wins", configured: configured, executable: self, want: configured},
		{description: "next to the executable", executable: self, want: beside},
		{description: "then PATH", executable: lonely, want: inPath},
		{description: "configured but missing", configured: filepath.Join(dir, "missing"), executable: self,
			wantErr: "hook.path " + filepath.Join(dir, "missing") + ": stat " + filepath.Join(dir, "missing") + ": no such file or directory"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := HookPath(tc.configured, tc.executable)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// Neither in PATH nor in the system directories (which a make install on this machine
	// would fill: stub them as TestCTKNotFound does).
	saved := systemDirs
	systemDirs = []string{t.TempDir()}
	t.Cleanup(func() { systemDirs = saved })
	t.Setenv("PATH", t.TempDir())
	if _, err := HookPath("", lonely); err == nil || !strings.Contains(err.Error(), "set hook.path") {
		t.Errorf("missing hook: error %v should say to set hook.path", err)
	}
}

func TestNVMLQuery(t *testing.T) {
	dir := t.TempDir()
	script := func(body string) string {
		p := filepath.Join(t.TempDir(), "gpu-ctk")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	argsFile := filepath.Join(dir, "args")
	testCases := []struct {
		description string
		ctk         string
		wantErr     string
	}{
		{description: "parses gpu-ctk info --json", ctk: script(`echo "$@" > ` + argsFile + `; echo '{"driver_version":"550.54.15","cuda_version":"12.4","gpus":[{"index":0,"minor":3,"uuid":"GPU-a"}]}'`)},
		{description: "reports its error without the program prefix", ctk: script(`echo "gpu-ctk: NVML library not found: tried x" >&2; exit 1`),
			wantErr: "NVML library not found: tried x"},
		{description: "garbage output", ctk: script(`echo nope`), wantErr: "decode its output"},
		{description: "empty answer", ctk: script(`echo '{}'`), wantErr: "no driver version in its output"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			d, err := NVMLQuery(tc.ctk)(context.Background(), "/drv")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "query NVML ("+tc.ctk+" info): ") {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d.Version != "550.54.15" || len(d.GPUs) != 1 || d.GPUs[0].Minor != 3 {
				t.Fatalf("got %+v, %v", d, err)
			}
			if args, _ := os.ReadFile(argsFile); string(args) != "info --json --driver-root /drv\n" {
				t.Errorf("gpu-ctk called with %q", args)
			}
		})
	}
	// The deadline kills a hung query.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := NVMLQuery(script("sleep 5"))(ctx, "/drv"); err == nil || time.Since(start) > 3*time.Second {
		t.Errorf("hung query: err %v after %s", err, time.Since(start))
	}
}

// TestHandOffToCTK: gpu-runtime hands a CDI create to the gpu-ctk beside it with its own
// arguments; an exit status of 1 means gpu-ctk reported the error itself; a gpu-ctk that does
// not finish within the timeout (cdi.timeout) is killed, with what it started, and the error
// names the setting.
func TestHandOffToCTK(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "gpu-runtime")
	if err := os.WriteFile(self, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	ctk := filepath.Join(dir, "gpu-ctk")
	argsFile, pidFile := filepath.Join(dir, "args"), filepath.Join(dir, "pid")
	args := []string{"create", "--bundle", "/b", "id"}
	testCases := []struct {
		description string
		script      string
		wantErr     string // "" for none
		wantIs      error
	}{
		{description: "done", script: `echo "$@" > ` + argsFile},
		{description: "reported", script: "exit 1", wantErr: ErrReported.Error(), wantIs: ErrReported},
		{description: "crashed", script: "exit 3", wantErr: "run " + ctk + " cdi inject: exit status 3"},
		{description: "hangs, with a child of its own", script: "sleep 300 & echo $! > " + pidFile + "; wait",
			wantErr: "CDI hand-off timed out: " + ctk + " cdi inject, which resolves the container's CDI devices, did not finish within 300ms (setting cdi.timeout) and was killed: " +
				"find what it waits on (a CDI spec directory on a file system that does not answer; NVML, bounded by discovery.timeout), or raise cdi.timeout if the host is only slow",
			wantIs: ErrHandOffTimeout},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if err := os.WriteFile(ctk, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- HandOffToCTK(self, args, 300*time.Millisecond)() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				if data, rerr := os.ReadFile(pidFile); rerr == nil { // what the test started
					pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Fatal("the hand-off did not return within 5s")
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := os.ReadFile(argsFile); string(got) != "cdi inject -- create --bundle /b id\n" {
					t.Errorf("gpu-ctk called with %q", got)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) {
				t.Errorf("error = %v\nwant    %s", err, tc.wantErr)
			}
		})
	}
	// The hung gpu-ctk's child died with it.
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		state, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(state), ") Z ") {
			break // gone, or dead and not yet reaped
		}
		if time.Now().After(deadline) {
			t.Errorf("the hung gpu-ctk's child %d outlived it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			break
		}
	}
}

// TestLowLevelRuntimeWithoutPATH: podman's cleanup runs the runtime with no PATH; runc by
// name must still be found in the system directories.
func TestLowLevelRuntimeWithoutPATH(t *testing.T) {
	dir := t.TempDir()
	runc := exe(t, filepath.Join(dir, "sbin", "runc"))
	saved := systemDirs
	systemDirs = []string{filepath.Join(dir, "bin"), filepath.Join(dir, "sbin")}
	defer func() { systemDirs = saved }()
	t.Setenv("PATH", "")
	got, err := LowLevelRuntime([]string{"runc"}, "")
	if err != nil || got != runc {
		t.Fatalf("got %q, %v; want %q", got, err, runc)
	}
}

func TestCTKNotFound(t *testing.T) {
	saved := systemDirs
	systemDirs = nil
	defer func() { systemDirs = saved }()
	t.Setenv("PATH", t.TempDir())
	self := exe(t, filepath.Join(t.TempDir(), "gpu-runtime"))
	_, err := toolPath(CTKName, "", self, "install gpu-ctk next to gpu-runtime or in PATH (it answers NVML queries)")
	want := "find gpu-ctk: not next to " + self + " nor in PATH; install gpu-ctk next to gpu-runtime or in PATH (it answers NVML queries)"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

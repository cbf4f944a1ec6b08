package fakehost

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mpsFrontEnd runs the fake nvidia-cuda-mps-control as a front end with commands on stdin,
// as uid (a different uid needs root).
func mpsFrontEnd(t *testing.T, bin string, env []string, uid uint32, commands string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(commands)
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatalf("run %s as uid %d: %v", bin, uid, err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// TestFakeMPSControl: the fake MPS control daemon makes the files the real one was seen to
// make, with their modes; its front end reaches the privileged socket as root only, and a
// command that changes the daemon is refused on the other one; quit ends it.
func TestFakeMPSControl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the fake MPS daemon's privileged socket is root's: run this test as root")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: the fake MPS daemon needs gcc; install it (apt-get install gcc)")
	}
	data, err := mpsControl("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // another user's front end must reach it
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	if err := writeNewFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	pipe, logDir := filepath.Join(dir, "pipe"), filepath.Join(dir, "log")
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_LOG_DIRECTORY=" + logDir, "CUDA_VISIBLE_DEVICES=GPU-1"}

	if out, code := mpsFrontEnd(t, bin, env, 0, "get_server_list\n"); code != 1 || out != "Cannot find MPS control daemon process\n" {
		t.Errorf("front end without a daemon: exit %d, %q", code, out)
	}
	daemon := exec.Command(bin, "-f")
	daemon.Env = env
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = daemon.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon made no control socket")
		}
		time.Sleep(10 * time.Millisecond)
	}

	want := map[string]fs.FileMode{
		"control":                     fs.ModeSocket | 0o666,
		"control_privileged":          fs.ModeSocket | 0o755,
		"control_lock":                0o666,
		"log":                         fs.ModeNamedPipe | 0o777,
		"nvidia-cuda-mps-control.pid": 0o666,
	}
	entries, err := os.ReadDir(pipe)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]fs.FileMode{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = fi.Mode() & (fs.ModeType | fs.ModePerm)
	}
	if len(got) != len(want) {
		t.Errorf("pipe directory holds %v, want %v", got, want)
	}
	for name, mode := range want {
		if got[name] != mode {
			t.Errorf("%s: mode %v, want %v", name, got[name], mode)
		}
	}

	for _, step := range []struct {
		description string
		uid         uint32
		commands    string
		want        string
	}{
		{"root sets a default", 0, "set_default_active_thread_percentage 20\nget_default_active_thread_percentage\n", "20\n"},
		{"another user can query, not set or quit", 65534,
			"set_default_active_thread_percentage 100\nset_default_device_pinned_mem_limit 0 80G\nquit\nget_default_active_thread_percentage\n",
			"set_default_active_thread_percentage: not permitted on this connection\nset_default_device_pinned_mem_limit: not permitted on this connection\nquit: not permitted on this connection\n20\n"},
		{"a command the daemon does not know", 0, "frobnicate\n", "Unknown command frobnicate\n"},
		{"root quits it", 0, "quit\n", ""},
	} {
		// The documented front end: what the daemon answers goes to stdout, exit 0.
		if out, code := mpsFrontEnd(t, bin, env, step.uid, step.commands); code != 0 || out != step.want {
			t.Errorf("%s: exit %d, output %q, want %q", step.description, code, out, step.want)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not quit")
	}
	log, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
	wantLog := "start CUDA_VISIBLE_DEVICES=GPU-1\n"
	if !strings.HasPrefix(string(log), wantLog) {
		t.Errorf("control.log starts %q, want %q", log, wantLog)
	}
	for _, line := range []string{
		"cmd set_default_active_thread_percentage 20",
		"refused set_default_active_thread_percentage 100 from uid 65534: not privileged",
		"refused set_default_device_pinned_mem_limit 0 80G from uid 65534: not privileged",
		"refused quit from uid 65534: not privileged",
		"cmd quit",
	} {
		if !strings.Contains(string(log), "\n"+line+"\n") {
			t.Errorf("control.log lacks %q:\n%s", line, log)
		}
	}
	for _, gone := range []string{"control", "control_privileged", "nvidia-cuda-mps-control.pid"} {
		if _, err := os.Lstat(filepath.Join(pipe, gone)); err == nil {
			t.Errorf("%s left after quit", gone)
		}
	}
}

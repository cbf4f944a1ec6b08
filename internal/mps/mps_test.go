package mps

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

// requireRoot skips, loudly, a test that gives files to another user.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: this test gives files to another user (chown): run it as root")
	}
}

// rootOnly makes a directory only root may write in, under dir: what a planted link aims at.
func rootOnly(t *testing.T, dir string) string {
	t.Helper()
	d := filepath.Join(dir, "root-only")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenLog: gpu-ctk's log of a share's daemon is opened through the log directory, never
// through a link, never blocking on a FIFO, and never when the daemon's own logs there are
// not plain files of root's (the daemon follows links itself); the message names each one.
func TestOpenLog(t *testing.T) {
	testCases := []struct {
		description string
		root        bool // needs root (chown to another user)
		plant       func(t *testing.T, logDir, target string)
		want        string // "" for success
	}{
		{description: "a fresh directory", plant: func(*testing.T, string, string) {}},
		{description: "an existing log is appended to", plant: func(t *testing.T, dir, _ string) {
			writeFile(t, filepath.Join(dir, "gpu-ctk.log"), "before\n")
		}},
		{description: "gpu-ctk.log linked into a root-only directory", plant: func(t *testing.T, dir, target string) {
			symlink(t, filepath.Join(target, "created"), filepath.Join(dir, "gpu-ctk.log"))
		}, want: "gpu-ctk.log is a symbolic link: remove them"},
		{description: "gpu-ctk.log a FIFO", plant: func(t *testing.T, dir, _ string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "gpu-ctk.log"), 0o666); err != nil {
				t.Fatal(err)
			}
		}, want: "gpu-ctk.log is not a regular file: remove them"},
		{description: "gpu-ctk.log a hard link to a root file", plant: func(t *testing.T, dir, target string) {
			writeFile(t, filepath.Join(target, "secret"), "root's\n")
			if err := os.Link(filepath.Join(target, "secret"), filepath.Join(dir, "gpu-ctk.log")); err != nil {
				t.Fatal(err)
			}
		}, want: "gpu-ctk.log has 2 hard links: remove them"},
		{description: "the daemon's logs linked out", plant: func(t *testing.T, dir, target string) {
			symlink(t, filepath.Join(target, "control"), filepath.Join(dir, "control.log"))
			symlink(t, filepath.Join(target, "server"), filepath.Join(dir, "server.log"))
		}, want: "control.log is a symbolic link; server.log is a symbolic link: remove them"},
		{description: "another user's file", root: true, plant: func(t *testing.T, dir, _ string) {
			writeFile(t, filepath.Join(dir, "server.log"), "")
			if err := os.Chown(filepath.Join(dir, "server.log"), 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}, want: "server.log belongs to uid 1000: remove them"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
			}
			base := t.TempDir()
			target := rootOnly(t, base)
			dir := filepath.Join(base, "log")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, dir, target)
			done := make(chan struct{})
			var f *os.File
			var err error
			go func() {
				f, err = openLog(dir)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("openLog blocked")
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteString("after\n"); err != nil {
					t.Fatal(err)
				}
				_ = f.Close()
				if data, _ := os.ReadFile(filepath.Join(dir, "gpu-ctk.log")); !strings.HasSuffix(string(data), "after\n") || strings.Count(string(data), "\n") > 2 {
					t.Errorf("gpu-ctk.log holds %q", data)
				}
				return
			}
			want := "log directory " + dir + ": " + tc.want + " (gpu-ctk and the MPS daemon write there as root; an older gpu-ctk let the share's user write there too)"
			if err == nil || err.Error() != want {
				t.Errorf("error %v\nwant %s", err, want)
			}
			if f != nil {
				t.Error("a file was opened")
			}
			entries, _ := os.ReadDir(target)
			for _, e := range entries {
				if e.Name() != "secret" {
					t.Errorf("%s created in the root-only directory", e.Name())
				}
			}
		})
	}
	t.Run("the log directory a link", func(t *testing.T) {
		base := t.TempDir()
		symlink(t, rootOnly(t, base), filepath.Join(base, "log"))
		if _, err := openLog(filepath.Join(base, "log")); err == nil || !strings.HasPrefix(err.Error(), "open log directory "+filepath.Join(base, "log")+" (not a symbolic link): ") {
			t.Errorf("error %v", err)
		}
	})
}

// TestPrepareTakesDirectoriesBack: directories an older gpu-ctk gave to the share's user
// become root's again; the pipe directory is made anew and the client view emptied, so
// nothing planted there is left for the daemon to follow or a container to see; the logs
// stay. The client view stays the same directory (its inode): containers of the share that
// have it bind-mounted see what gpu-ctk links there after a restart.
func TestPrepareTakesDirectoriesBack(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	cfg := config.MPSConfig{Root: filepath.Join(base, "mps"), Shares: map[string]config.MPSShare{"a": {Devices: []string{"0"}, UID: 1000}}}
	target := rootOnly(t, base)
	writeFile(t, filepath.Join(target, "kept"), "root's\n")
	for _, d := range []string{cfg.PipeDir("a"), cfg.LogDir("a"), cfg.ClientDir("a")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 1000, -1); err != nil {
			t.Fatal(err)
		}
	}
	symlink(t, filepath.Join(target, "pid"), filepath.Join(cfg.PipeDir("a"), "nvidia-cuda-mps-control.pid"))
	writeFile(t, filepath.Join(cfg.LogDir("a"), "control.log"), "kept\n")
	// The client view of the daemon before: its old control socket, what a killed linkView
	// left, and what the share's user planted when the directory was theirs.
	writeFile(t, filepath.Join(cfg.ClientDir("a"), "control"), "")
	writeFile(t, filepath.Join(cfg.ClientDir("a"), ".control.new"), "")
	symlink(t, target, filepath.Join(cfg.ClientDir("a"), "planted"))
	if err := os.MkdirAll(filepath.Join(cfg.ClientDir("a"), "sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	var before syscall.Stat_t
	if err := syscall.Lstat(cfg.ClientDir("a"), &before); err != nil {
		t.Fatal(err)
	}
	// prepare mounts the share's tmpfs too: unmounted when the test ends.
	if err := os.MkdirAll(cfg.ShmDir("a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := prepare(cfg, "a"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(cfg.ShmDir("a"), syscall.MNT_DETACH) })
	for _, d := range []string{cfg.PipeDir("a"), cfg.ClientDir("a"), cfg.LogDir("a")} {
		var st syscall.Stat_t
		if err := syscall.Lstat(d, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Mode&0o7777 != 0o755 {
			t.Errorf("%s: uid %d, mode %o; want root's, 0755", d, st.Uid, st.Mode&0o7777)
		}
	}
	for _, d := range []string{cfg.PipeDir("a"), cfg.ClientDir("a")} {
		if entries, _ := os.ReadDir(d); len(entries) != 0 {
			t.Errorf("%s kept %v", d, entries)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(cfg.LogDir("a"), "control.log")); string(data) != "kept\n" {
		t.Errorf("control.log: %q", data)
	}
	var after syscall.Stat_t
	if err := syscall.Lstat(cfg.ClientDir("a"), &after); err != nil || after.Dev != before.Dev || after.Ino != before.Ino {
		t.Errorf("the client view is a new directory (inode %d, was %d; %v): containers that have it mounted lose the share", after.Ino, before.Ino, err)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 1 || entries[0].Name() != "kept" {
		t.Errorf("the root-only directory now holds %v", entries)
	}
	// A link at the client view's path is replaced by a directory, never followed.
	if err := os.Remove(cfg.ClientDir("a")); err != nil {
		t.Fatal(err)
	}
	symlink(t, target, cfg.ClientDir("a"))
	if err := prepare(cfg, "a"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(cfg.ClientDir("a")); err != nil || !fi.IsDir() {
		t.Errorf("client view: %v, %v; want a directory", fi, err)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 1 || entries[0].Name() != "kept" {
		t.Errorf("the root-only directory now holds %v", entries)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(target, &st); err != nil || st.Mode&0o7777 != 0o700 {
		t.Errorf("the root-only directory: mode %o (%v)", st.Mode&0o7777, err)
	}
}

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestClientView: the client view holds the daemon's control socket itself (a hard link),
// and nothing else of the pipe directory; a daemon that made its socket anew leaves the view
// stale until gpu-ctk mps start links it again, and the share is not running meanwhile.
func TestClientView(t *testing.T) {
	base := t.TempDir()
	cfg := config.MPSConfig{Root: base, Shares: map[string]config.MPSShare{"a": {Devices: []string{"0"}}}}
	if err := os.MkdirAll(cfg.PipeDir("a"), 0o755); err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		t.Helper()
		_ = os.Remove(filepath.Join(cfg.PipeDir("a"), "control"))
		l, err := net.Listen("unixpacket", filepath.Join(cfg.PipeDir("a"), "control"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	if why := viewProblem(cfg, "a"); why != "its daemon has no control socket in "+cfg.PipeDir("a") {
		t.Errorf("no daemon: %q", why)
	}
	if err := linkView(cfg, "a"); err == nil || err.Error() != `the daemon of MPS share "a" made no control socket: lstat `+filepath.Join(cfg.PipeDir("a"), "control")+": no such file or directory; see "+cfg.LogDir("a") {
		t.Errorf("linkView without a socket: %v", err)
	}
	writeFile(t, filepath.Join(cfg.PipeDir("a"), "control"), "")
	if err := linkView(cfg, "a"); err == nil || err.Error() != `the daemon of MPS share "a" made no control socket: `+filepath.Join(cfg.PipeDir("a"), "control")+" is not a socket; see "+cfg.LogDir("a") {
		t.Errorf("linkView with a file: %v", err)
	}
	listen()
	writeFile(t, filepath.Join(cfg.PipeDir("a"), "nvidia-cuda-mps-control.pid"), "1")
	if why := viewProblem(cfg, "a"); why != "its client view "+cfg.ClientDir("a")+" holds no control socket yet" {
		t.Errorf("before linkView: %q", why)
	}
	if err := linkView(cfg, "a"); err != nil {
		t.Fatal(err)
	}
	if why := viewProblem(cfg, "a"); why != "" {
		t.Errorf("after linkView: %q", why)
	}
	entries, _ := os.ReadDir(cfg.ClientDir("a"))
	if len(entries) != 1 || entries[0].Name() != "control" || entries[0].Type() != os.ModeSocket {
		t.Errorf("client view holds %v", entries)
	}
	// A client connects through the view.
	c, err := net.Dial("unixpacket", filepath.Join(cfg.ClientDir("a"), "control"))
	if err != nil {
		t.Fatalf("connect through the client view: %v", err)
	}
	_ = c.Close()
	listen() // the daemon made its socket anew
	if why := viewProblem(cfg, "a"); why != "its client view "+cfg.ClientDir("a")+" holds an old control socket" {
		t.Errorf("a new socket: %q", why)
	}
	if err := linkView(cfg, "a"); err != nil || viewProblem(cfg, "a") != "" {
		t.Errorf("linked again: %v, %q", err, viewProblem(cfg, "a"))
	}
}

// TestReadPID: the pid file is believed only when it is a regular file of root's (gpu-ctk's
// user's), mode 0600, as gpu-ctk mps start writes it: one of another owner or mode, or a
// link, names no daemon; a missing one says the share was not started.
func TestReadPID(t *testing.T) {
	testCases := []struct {
		description string
		root        bool // needs root (chown to another user)
		plant       func(t *testing.T, p string)
		want        string // the error; "" for pid 4242
	}{
		{description: "root's, 0600", plant: func(t *testing.T, p string) { writeFileMode(t, p, "4242\n", 0o600) }},
		{description: "mode 0644", plant: func(t *testing.T, p string) { writeFileMode(t, p, "4242\n", 0o644) }, want: "mode 0644, not 0600"},
		{description: "mode 0666", plant: func(t *testing.T, p string) { writeFileMode(t, p, "4242\n", 0o666) }, want: "mode 0666, not 0600"},
		{description: "another user's", root: true, plant: func(t *testing.T, p string) {
			writeFileMode(t, p, "4242\n", 0o600)
			if err := os.Chown(p, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}, want: "owned by uid 1000, not 0"},
		{description: "a link to root's file", plant: func(t *testing.T, p string) {
			writeFileMode(t, p+".real", "4242\n", 0o600)
			symlink(t, p+".real", p)
		}, want: "it is a symbolic link"},
		{description: "too long", plant: func(t *testing.T, p string) { writeFileMode(t, p, strings.Repeat("4", 33), 0o600) }, want: "33 bytes, more than 32"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
			}
			p := filepath.Join(t.TempDir(), "daemon.pid")
			tc.plant(t, p)
			pid, err := readPID(p)
			if tc.want == "" {
				if err != nil || pid != 4242 {
					t.Errorf("pid %d, error %v", pid, err)
				}
				return
			}
			if want := "MPS pid file " + p + " ignored: " + tc.want; err == nil || err.Error() != want || !errors.Is(err, trustedfile.ErrUntrusted) || pid != 0 {
				t.Errorf("pid %d, error %v\nwant %s", pid, err, want)
			}
		})
	}
	if _, err := readPID(filepath.Join(t.TempDir(), "daemon.pid")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing pid file: %v", err)
	}
}

// TestLaunchWritesPIDFile: gpu-ctk mps start records its daemon's pid in a new file of its
// own, mode 0600, whatever was at the path before (another user's 0644 file), so readPID
// believes it.
func TestLaunchWritesPIDFile(t *testing.T) {
	requireRoot(t)
	cfg := config.MPSConfig{Root: t.TempDir(), Shares: map[string]config.MPSShare{"a": {Devices: []string{"0"}}}}
	if err := os.MkdirAll(cfg.LogDir("a"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileMode(t, cfg.PIDFile("a"), "1\n", 0o644)
	if err := os.Chown(cfg.PIDFile("a"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	pid, err := launch(cfg, "a", Options{Self: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readPID(cfg.PIDFile("a")); err != nil || got != pid {
		t.Errorf("readPID: %d, %v; want %d", got, err, pid)
	}
}

func writeFileMode(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	writeFile(t, p, data)
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// frontEnd writes a stand-in for nvidia-cuda-mps-control's front end that records the
// commands it reads in <dir>/commands and answers get_default_active_thread_percentage with
// get and every set_* command with set (nothing when ""), exiting with code: what the real
// front end does with a daemon that took, or refused, the share's defaults.
func frontEnd(t *testing.T, dir, get, set string, code int) string {
	t.Helper()
	p := filepath.Join(dir, "nvidia-cuda-mps-control")
	script := fmt.Sprintf(`#!/bin/sh
while IFS= read -r line; do
  echo "$line" >> %q
  case "$line" in
  get_default_active_thread_percentage) echo %q;;
  set_*) [ -n %q ] && echo %q;;
  esac
done
exit %d
`, filepath.Join(dir, "commands"), get, set, set, code)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSetDefaults: the share's defaults are set, then the active thread percentage read
// back and compared as a number; a daemon that answers with another value (it refused the
// setting, printing why, and its front end exited 0) fails the start, its answers quoted.
func TestSetDefaults(t *testing.T) {
	startWait = 200 * time.Millisecond
	t.Cleanup(func() { startWait = 10 * time.Second })
	const sets = "set_default_active_thread_percentage 20\nset_default_device_pinned_mem_limit 0 16G\n"
	testCases := []struct {
		description string
		share       config.MPSShare
		get, set    string
		code        int
		want        string // the error, LOG and CONTROL for the share's log directory and the front end; "" for none
		commands    string // what reached the front end
	}{
		{description: "taken, read back as the fake prints it", share: config.MPSShare{ActiveThreadPercentage: 20, PinnedMemoryLimit: "16G"},
			get: "20", commands: sets + "get_default_active_thread_percentage\n"},
		{description: "taken, read back as a float", share: config.MPSShare{ActiveThreadPercentage: 20, PinnedMemoryLimit: "16G"},
			get: "20.0", commands: sets + "get_default_active_thread_percentage\n"},
		{description: "refused, with the daemon's reason", share: config.MPSShare{ActiveThreadPercentage: 20, PinnedMemoryLimit: "16G"},
			get: "100", set: "Invalid active thread percentage 20",
			want: `the daemon of MPS share "a" did not take active-thread-percentage 20: get_default_active_thread_percentage answers "100", ` +
				`and to the settings it answered "Invalid active thread percentage 20\nInvalid active thread percentage 20"; see LOG`,
			commands: sets + "get_default_active_thread_percentage\n"},
		{description: "refused silently", share: config.MPSShare{ActiveThreadPercentage: 20},
			get: "100", want: `the daemon of MPS share "a" did not take active-thread-percentage 20: get_default_active_thread_percentage answers "100"; see LOG`,
			commands: "set_default_active_thread_percentage 20\nget_default_active_thread_percentage\n"},
		{description: "an answer that is no number", share: config.MPSShare{ActiveThreadPercentage: 20},
			get: "Unknown command", want: `the daemon of MPS share "a" did not take active-thread-percentage 20: get_default_active_thread_percentage answers "Unknown command"; see LOG`,
			commands: "set_default_active_thread_percentage 20\nget_default_active_thread_percentage\n"},
		{description: "no percentage: nothing read back", share: config.MPSShare{PinnedMemoryLimit: "16G"},
			get: "100", commands: "set_default_device_pinned_mem_limit 0 16G\n"},
		{description: "no defaults: the daemon is not asked", share: config.MPSShare{}},
		{description: "no daemon answers", share: config.MPSShare{ActiveThreadPercentage: 20},
			set: "Cannot find MPS control daemon process", code: 1,
			want: `set the defaults of MPS share "a": CONTROL: exit status 1: Cannot find MPS control daemon process`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			tc.share.Devices = []string{"0"}
			cfg := config.MPSConfig{Root: dir, Shares: map[string]config.MPSShare{"a": tc.share}}
			o := Options{Control: frontEnd(t, dir, tc.get, tc.set, tc.code), UUIDs: []string{"GPU-0"}}
			err := setDefaults(cfg, "a", o, tc.share)
			want := strings.NewReplacer("LOG", cfg.LogDir("a"), "CONTROL", o.Control).Replace(tc.want)
			if (err == nil) != (want == "") || err != nil && err.Error() != want {
				t.Errorf("error %v\nwant  %s", err, want)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "commands")); tc.code == 0 && string(got) != tc.commands {
				t.Errorf("commands:\n%s\nwant\n%s", got, tc.commands)
			}
		})
	}
}

// TestWaitReady: a daemon that is gone before it made its control pipe fails the start at
// once, saying so; one that runs on without making it fails once the wait is over. Both
// messages name the share and where its logs are.
func TestWaitReady(t *testing.T) {
	testCases := []struct {
		description string
		daemon      func(t *testing.T) int // starts what the pid file names
		wait        time.Duration
		want        string // PID, PIPE and LOG stand for the pid, the pipe and log directories
	}{
		{description: "the daemon exited", daemon: func(t *testing.T) int {
			cmd := exec.Command("/bin/true")
			if err := cmd.Run(); err != nil {
				t.Fatal(err)
			}
			return cmd.Process.Pid
		}, wait: 10 * time.Second, want: `the daemon of MPS share "a" exited: its daemon (pid PID) is gone; see LOG`},
		{description: "no control pipe", daemon: func(t *testing.T) int {
			cmd := exec.Command("/bin/sleep", "30")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			return cmd.Process.Pid
		}, wait: 100 * time.Millisecond, want: `the daemon of MPS share "a" did not create its control pipe in PIPE within 100ms; see LOG`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			cfg := config.MPSConfig{Root: t.TempDir(), Shares: map[string]config.MPSShare{"a": {Devices: []string{"0"}}}}
			if err := os.MkdirAll(cfg.PipeDir("a"), 0o755); err != nil {
				t.Fatal(err)
			}
			pid := tc.daemon(t)
			writeFileMode(t, cfg.PIDFile("a"), fmt.Sprintf("%d\n", pid), 0o600)
			err := waitReady(cfg, "a", tc.wait)
			want := strings.NewReplacer("PID", fmt.Sprint(pid), "PIPE", cfg.PipeDir("a"), "LOG", cfg.LogDir("a")).Replace(tc.want)
			if err == nil || err.Error() != want {
				t.Errorf("error %v\nwant  %s", err, want)
			}
		})
	}
}

// TestStopSignalsOnlyTheDaemon: a pid file whose daemon died names a pid another process may
// have since; stop leaves that process alone, and removes the stale pid file.
func TestStopSignalsOnlyTheDaemon(t *testing.T) {
	requireRoot(t)
	cfg := config.MPSConfig{Root: t.TempDir(), Shares: map[string]config.MPSShare{"a": {Devices: []string{"0"}}}}
	if err := os.MkdirAll(filepath.Join(cfg.Root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	writeFileMode(t, cfg.PIDFile("a"), fmt.Sprintf("%d\n", other.Process.Pid), 0o600)
	did, err := Stop(cfg, "a", Options{})
	if err != nil || did != "not running" {
		t.Errorf("Stop = %q, %v; want not running", did, err)
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process that has the dead daemon's pid was signalled: %v", err)
	}
	if _, err := os.Stat(cfg.PIDFile("a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale pid file kept: %v", err)
	}
}

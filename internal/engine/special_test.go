package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mkfifo makes a FIFO at path, and on cleanup opens it for writing once, which releases a
// reader blocked in open (a test that failed by hanging would otherwise keep its thread).
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.Close(fd)
		}
	})
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// planWithin plans, failing the test if planning takes more than ten seconds (it hung on a
// FIFO before).
func planWithin(t *testing.T, configure bool, eng Engine, opts Options) (*Plan, error) {
	t.Helper()
	type result struct {
		p   *Plan
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if configure {
			r.p, r.err = PlanConfigure(eng, opts)
		} else {
			r.p, r.err = PlanUnconfigure(eng, opts)
		}
		done <- r
	}()
	select {
	case r := <-done:
		return r.p, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("planning hung")
		return nil, nil
	}
}

// TestConfigPathNotARegularFile: what configure reads and writes at an engine's config path
// (daemon.json, containerd's main config and drop-in, cri-o's drop-in) must be a regular file
// or nothing. A link to a regular file is followed (TestSymlinkedConfig); a link to nothing is
// refused rather than a file created where it points; a FIFO (itself or linked) is refused
// without being opened for reading (it blocked gpu-ctk); so are a directory, a device and a
// file larger than 1 MiB. Each error names the path and what to do; nothing is written.
func TestConfigPathNotARegularFile(t *testing.T) {
	const dangling = "DIR/etc/daemon.json is a symbolic link to DIR/elsewhere/daemon.json, which does not exist: " +
		"gpu-ctk does not create a file where a link points; create that file (an empty one will do), point the link at the engine's configuration file, or remove the link, then run gpu-ctk again"
	testCases := []struct {
		description string
		engine      Engine
		setup       func(t *testing.T, dir string) // makes DIR/etc/daemon.json (or the file named)
		path        string                         // the path given, under DIR; etc/daemon.json when empty
		dropIn      bool                           // path is containerd's drop-in, the main config is missing
		wantErr     string
	}{
		{description: "docker: a dangling link", engine: Docker,
			setup: func(t *testing.T, dir string) {
				if err := os.MkdirAll(filepath.Join(dir, "elsewhere"), 0o755); err != nil { // where a file could be created
					t.Fatal(err)
				}
				symlink(t, filepath.Join(dir, "elsewhere/daemon.json"), filepath.Join(dir, "etc/daemon.json"))
			},
			wantErr: "invalid options: " + dangling},
		{description: "docker: a dangling relative link", engine: Docker,
			setup: func(t *testing.T, dir string) {
				symlink(t, "../elsewhere/daemon.json", filepath.Join(dir, "etc/daemon.json"))
			},
			wantErr: "invalid options: DIR/etc/daemon.json is a symbolic link to ../elsewhere/daemon.json, which does not exist: " +
				"gpu-ctk does not create a file where a link points; create that file (an empty one will do), point the link at the engine's configuration file, or remove the link, then run gpu-ctk again"},
		{description: "docker: a link to a FIFO", engine: Docker,
			setup: func(t *testing.T, dir string) {
				mkfifo(t, filepath.Join(dir, "elsewhere/daemon.json"))
				symlink(t, filepath.Join(dir, "elsewhere/daemon.json"), filepath.Join(dir, "etc/daemon.json"))
			},
			wantErr: "invalid options: DIR/etc/daemon.json is a symbolic link to DIR/elsewhere/daemon.json, a FIFO, not a regular file: point the link at a regular file or remove it, then run gpu-ctk again"},
		{description: "docker: a link to a directory", engine: Docker,
			setup: func(t *testing.T, dir string) {
				if err := os.MkdirAll(filepath.Join(dir, "elsewhere/daemon.json"), 0o755); err != nil {
					t.Fatal(err)
				}
				symlink(t, filepath.Join(dir, "elsewhere/daemon.json"), filepath.Join(dir, "etc/daemon.json"))
			},
			wantErr: "invalid options: DIR/etc/daemon.json is a symbolic link to DIR/elsewhere/daemon.json, a directory, not a regular file: point the link at a regular file or remove it, then run gpu-ctk again"},
		{description: "docker: a link to a device", engine: Docker,
			setup:   func(t *testing.T, dir string) { symlink(t, "/dev/null", filepath.Join(dir, "etc/daemon.json")) },
			wantErr: "invalid options: DIR/etc/daemon.json is a symbolic link to /dev/null, a character device, not a regular file: point the link at a regular file or remove it, then run gpu-ctk again"},
		{description: "docker: a FIFO", engine: Docker,
			setup:   func(t *testing.T, dir string) { mkfifo(t, filepath.Join(dir, "etc/daemon.json")) },
			wantErr: "invalid options: DIR/etc/daemon.json is a FIFO, not a regular file: gpu-ctk edits regular files only; remove it, or name the engine's configuration file"},
		{description: "docker: a directory", engine: Docker,
			setup: func(t *testing.T, dir string) {
				if err := os.MkdirAll(filepath.Join(dir, "etc/daemon.json"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "invalid options: DIR/etc/daemon.json is a directory, not a regular file: gpu-ctk edits regular files only; remove it, or name the engine's configuration file"},
		{description: "docker: larger than 1 MiB", engine: Docker,
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "etc/daemon.json"), "{}"+strings.Repeat(" ", 1<<20), 0o644)
			},
			wantErr: "invalid options: DIR/etc/daemon.json is 1048578 bytes, more than the 1048576 allowed"},
		{description: "containerd: a dangling link as the main config", engine: Containerd,
			setup: func(t *testing.T, dir string) {
				symlink(t, filepath.Join(dir, "elsewhere/config.toml"), filepath.Join(dir, "etc/config.toml"))
			},
			path: "etc/config.toml",
			wantErr: "invalid options: DIR/etc/config.toml is a symbolic link to DIR/elsewhere/config.toml, which does not exist: " +
				"gpu-ctk does not create a file where a link points; create that file (an empty one will do), point the link at the engine's configuration file, or remove the link, then run gpu-ctk again"},
		{description: "containerd: a FIFO as the drop-in", engine: Containerd, dropIn: true,
			setup:   func(t *testing.T, dir string) { mkfifo(t, filepath.Join(dir, "etc/conf.d/99-gpu-runtime.toml")) },
			path:    "etc/conf.d/99-gpu-runtime.toml",
			wantErr: "invalid options: DIR/etc/conf.d/99-gpu-runtime.toml is a FIFO, not a regular file: gpu-ctk edits regular files only; remove it, or name the engine's configuration file"},
		{description: "cri-o: a dangling link as the drop-in", engine: CRIO,
			setup: func(t *testing.T, dir string) {
				symlink(t, filepath.Join(dir, "elsewhere/99-gpu-runtime.conf"), filepath.Join(dir, "etc/crio.conf.d/99-gpu-runtime.conf"))
			},
			path: "etc/crio.conf.d/99-gpu-runtime.conf",
			wantErr: "invalid options: DIR/etc/crio.conf.d/99-gpu-runtime.conf is a symbolic link to DIR/elsewhere/99-gpu-runtime.conf, which does not exist: " +
				"gpu-ctk does not create a file where a link points; create that file (an empty one will do), point the link at the engine's configuration file, or remove the link, then run gpu-ctk again"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			if tc.path == "" {
				tc.path = "etc/daemon.json"
			}
			opts := testOptions()
			opts.ConfigPath = filepath.Join(dir, tc.path)
			if tc.engine == Containerd {
				opts.ConfigPath = filepath.Join(dir, "etc/config.toml")
				opts.DropInPath = filepath.Join(dir, "etc/conf.d/99-gpu-runtime.toml")
			}
			before := listDir(t, dir)
			want := strings.ReplaceAll(tc.wantErr, "DIR", dir)
			for _, configure := range []bool{true, false} {
				p, err := planWithin(t, configure, tc.engine, opts)
				if err == nil || err.Error() != want || !errors.Is(err, ErrInvalidOptions) {
					t.Fatalf("configure %v: plan %+v, error\n%v\nwant\n%s", configure, p, err, want)
				}
			}
			if after := listDir(t, dir); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Errorf("files before %v, after %v", before, after)
			}
		})
	}
}

// TestApplyRefusesALinkMadeDangling: a regular config planned from that becomes a dangling
// link before Apply is refused there too: no file is created where the link points.
func TestApplyRefusesALinkMadeDangling(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon.json")
	opts := testOptions()
	opts.ConfigPath = path
	p := mustPlan(t, true, Docker, opts) // no file yet: one is to be created
	elsewhere := filepath.Join(dir, "elsewhere")
	if err := os.MkdirAll(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, filepath.Join(elsewhere, "daemon.json"), path)
	if _, err := p.Apply(testNow); err == nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "which does not exist") {
		t.Errorf("Apply error = %v", err)
	}
	if names := listDir(t, elsewhere); len(names) != 0 {
		t.Errorf("created where the link points: %v", names)
	}
}

// TestContainerdImportsNotRegular: containerd's imports are read to carry the CRI section a
// version 2 drop-in must repeat. One that is a FIFO (matched by a glob, or named; itself or
// through a link) or a device is skipped with a warning naming it, never opened for reading
// (a FIFO blocked gpu-ctk forever); the regular ones still count.
func TestContainerdImportsNotRegular(t *testing.T) {
	dir := t.TempDir()
	mainPath := filepath.Join(dir, "config.toml")
	confd := filepath.Join(dir, "conf.d")
	writeFile(t, mainPath, "version = 2\nimports = [\""+confd+"/*.toml\", \""+dir+"/named.fifo\"]\n", 0o644)
	writeFile(t, filepath.Join(confd, "10-cri.toml"), "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"pause:3.10\"\n", 0o644)
	mkfifo(t, filepath.Join(confd, "20-fifo.toml"))
	mkfifo(t, filepath.Join(dir, "named.fifo"))
	symlink(t, "/dev/null", filepath.Join(confd, "30-null.toml"))
	symlink(t, filepath.Join(dir, "named.fifo"), filepath.Join(confd, "40-link.toml"))
	opts := testOptions()
	opts.ConfigPath = mainPath
	opts.DropInPath = filepath.Join(dir, "drop", "99-gpu-runtime.toml")

	p, err := planWithin(t, true, Containerd, opts)
	if err != nil {
		t.Fatal(err)
	}
	const fix = ", not a regular file: skipped; containerd cannot load it either: remove it, or take it out of imports"
	want := []string{
		"containerd import " + confd + "/20-fifo.toml is a FIFO" + fix,
		"containerd import " + confd + "/30-null.toml (a link to /dev/null) is a character device" + fix,
		"containerd import " + confd + "/40-link.toml (a link to " + dir + "/named.fifo) is a FIFO" + fix,
		"containerd import " + dir + "/named.fifo is a FIFO" + fix,
	}
	if strings.Join(p.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant\n%s", strings.Join(p.Warnings, "\n"), strings.Join(want, "\n"))
	}
	if len(p.Changes) == 0 || !strings.Contains(string(p.Changes[0].Content), "pause:3.10") {
		t.Errorf("the drop-in lacks the regular import's CRI settings:\n%s", p.Changes[0].Content)
	}
}

package trustedfile

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRead: each way a file can fail the rule is refused with its reason, without blocking
// on a FIFO and without reading through a link; files that pass are read whole.
func TestRead(t *testing.T) {
	exact := Rule{What: "health file", Mode: 0o600, Max: 64}
	shared := Rule{What: "CDI spec", Max: 64}
	write := func(data string, perm fs.FileMode) func(string) error {
		return func(p string) error {
			if err := os.WriteFile(p, []byte(data), perm); err != nil {
				return err
			}
			return os.Chmod(p, perm) // past the umask
		}
	}
	testCases := []struct {
		description string
		rule        Rule
		make        func(p string) error
		want        string // the data, or the error with {P} for the path
	}{
		{"0600 under an exact 0600", exact, write("ok", 0o600), "ok"},
		{"0644 under an exact 0600", exact, write("ok", 0o644), "health file {P} ignored: mode 0644, not 0600"},
		{"0644 where others may read", shared, write("ok", 0o644), "ok"},
		{"0444", shared, write("ok", 0o444), "ok"},
		{"group-writable", shared, write("ok", 0o664), "CDI spec {P} ignored: mode 0664, writable by its group or others"},
		{"world-writable", shared, write("ok", 0o646), "CDI spec {P} ignored: mode 0646, writable by its group or others"},
		{"at the size bound", shared, write(strings.Repeat("x", 64), 0o644), strings.Repeat("x", 64)},
		{"over the size bound", shared, write(strings.Repeat("x", 65), 0o644), "CDI spec {P} ignored: 65 bytes, more than 64"},
		{"a sparse file of a gigabyte", shared, func(p string) error {
			if err := write("", 0o644)(p); err != nil {
				return err
			}
			return os.Truncate(p, 1<<30)
		}, "CDI spec {P} ignored: 1073741824 bytes, more than 64"},
		{"a symbolic link to a trusted file", shared, func(p string) error {
			if err := write("ok", 0o644)(p + ".real"); err != nil {
				return err
			}
			return os.Symlink(filepath.Base(p)+".real", p)
		}, "CDI spec {P} ignored: it is a symbolic link"},
		{"a symbolic link to /dev/zero", shared, func(p string) error { return os.Symlink("/dev/zero", p) }, "CDI spec {P} ignored: it is a symbolic link"},
		{"a dangling symbolic link", shared, func(p string) error { return os.Symlink("/nonexistent", p) }, "CDI spec {P} ignored: it is a symbolic link"},
		{"a FIFO (must not hang)", shared, func(p string) error { return syscall.Mkfifo(p, 0o644) }, "CDI spec {P} ignored: not a regular file"},
		{"a directory", shared, func(p string) error { return os.Mkdir(p, 0o755) }, "CDI spec {P} ignored: not a regular file"},
		{"a unix socket", shared, func(p string) error {
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			if err != nil {
				return err
			}
			defer syscall.Close(fd)
			return syscall.Bind(fd, &syscall.SockaddrUnix{Name: p})
		}, "CDI spec {P} ignored: not a regular file"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var data []byte
			var err error
			go func() { data, err = Read(p, tc.rule); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Read blocked")
			}
			want := strings.ReplaceAll(tc.want, "{P}", p)
			switch {
			case err != nil && err.Error() != want:
				t.Errorf("error = %q\nwant    %q", err, want)
			case err != nil && !errors.Is(err, ErrUntrusted):
				t.Errorf("error %q does not wrap ErrUntrusted", err)
			case err == nil && string(data) != want:
				t.Errorf("read %q, want %q", data, want)
			}
		})
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing"), shared); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrUntrusted) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestOwner: a file of another user than root and this process's is refused, whatever its
// mode; root's is trusted by any reader.
func TestOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root to give a file to another user (run the unit tests as root)")
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, rule := range []Rule{{What: "health file", Mode: 0o600, Max: 64}, {What: "CDI spec", Max: 64}} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		_, err := Read(p, rule)
		if want := rule.What + " " + p + " ignored: owned by uid 1000, not 0"; err == nil || err.Error() != want {
			t.Errorf("another user's file: %v, want %s", err, want)
		}
		if err := os.Chown(p, 0, 1000); err != nil { // the group does not matter, only whether it may write
			t.Fatal(err)
		}
		if data, err := Read(p, rule); err != nil || string(data) != "ok" {
			t.Errorf("root's file: %q, %v", data, err)
		}
	}
}

// TestOpenReadsTheCheckedInode: the handle Open returns reaches the file that was checked,
// through /proc/self/fd, even after another file took its name.
func TestOpenReadsTheCheckedInode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(p, []byte("checked"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := Open(p, Rule{What: "CDI spec", Max: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := os.Rename(p, p+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", p); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(FDPath(h)); err != nil || string(data) != "checked" {
		t.Errorf("through %s: %q, %v", FDPath(h), data, err)
	}
}

// TestReadRegular: any owner's regular file within the bound is read, a link at the path only
// when followed; anything else is a *NotRegularError naming what it is, without blocking.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("ok"), 0o664); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o664); err != nil { // past the umask; group-writable: no owner rule here
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		path        string
		max         int64
		follow      bool
		want        string // the data, or the error
	}{
		{"a regular file", file, 2, false, "ok"},
		{"a link, followed", link, 2, true, "ok"},
		{"a link, not followed", link, 2, false, link + " is a symbolic link, not a regular file"},
		{"a FIFO (must not hang)", fifo, 2, true, fifo + " is a FIFO, not a regular file"},
		{"a directory", dir, 2, true, dir + " is a directory, not a regular file"},
		{"a device", "/dev/zero", 2, true, "/dev/zero is a character device, not a regular file"},
		{"over the bound", file, 1, false, file + " is 2 bytes, more than the 1 allowed"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			done := make(chan struct{})
			var data []byte
			var err error
			go func() { data, _, err = ReadRegular(tc.path, tc.max, tc.follow); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ReadRegular blocked")
			}
			var nr *NotRegularError
			switch {
			case err != nil && (err.Error() != tc.want || !errors.As(err, &nr)):
				t.Errorf("error = %v\nwant    %s (a *NotRegularError)", err, tc.want)
			case err == nil && string(data) != tc.want:
				t.Errorf("read %q, want %q", data, tc.want)
			}
		})
	}
	if _, mode, err := ReadRegular(file, 2, false); err != nil || mode != 0o664 {
		t.Errorf("mode %v, %v; want 0664", mode, err)
	}
	if _, _, err := ReadRegular(filepath.Join(dir, "missing"), 2, true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestReadLeavesNothingOpen: a read costs its own two descriptors and nothing more, in a
// process that read nothing before (gpu-runtime's start and delete each read the config once):
// no procfs instance made and kept for later reopens, as pathrs.Reopen does (fsopen, fsmount).
func TestReadLeavesNothingOpen(t *testing.T) {
	if os.Getenv("TRUSTEDFILE_FRESH") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReadLeavesNothingOpen$", "-test.v")
		cmd.Env = append(os.Environ(), "TRUSTEDFILE_FRESH=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("in a fresh process: %v\n%s", err, out)
		}
		return
	}
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	if _, _, err := ReadRegular(p, 64, true); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after the read, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

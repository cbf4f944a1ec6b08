package confined

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newRoot makes a root directory with files (path -> content; a value starting with "->"
// is a symbolic link to the rest) and opens it with lim.
func newRoot(t *testing.T, files map[string]string, lim Limits) (string, *Root) {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.HasSuffix(p, "/") {
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Open(dir, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return dir, r
}

func big() Limits { return Limits{Bytes: 1 << 20, Entries: 1000, Lookups: 1000} }

// TestLinksStayInRoot: absolute, ../ and /proc/self/root links resolve inside the root; the
// host's file is never read.
func TestLinksStayInRoot(t *testing.T) {
	host := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(host, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, r := newRoot(t, map[string]string{
		"/abs":        "->" + host,
		"/rel":        "->../../../../../../../.." + host,
		"/proc-link":  "->/proc/self/root" + host,
		host:          "inside", // the same path, inside the root
		"/etc/passwd": "root:x:0:0",
	}, big())
	for _, p := range []string{"/abs", "/rel"} {
		data, err := r.ReadFile(p, 100)
		if err != nil || string(data) != "inside" {
			t.Errorf("ReadFile(%s) = %q, %v; want the root's own file", p, data, err)
		}
	}
	if data, err := r.ReadFile("/proc-link", 100); err == nil {
		t.Errorf("ReadFile through /proc/self/root = %q, want an error", data)
	}
}

// TestBudget: each limit stops the update with a BudgetError naming the path and the limit.
func TestBudget(t *testing.T) {
	files := map[string]string{"/a": strings.Repeat("x", 600), "/b": strings.Repeat("y", 600)}
	for i := range 20 {
		files["/d/f"+string(rune('a'+i))] = ""
	}
	testCases := []struct {
		description string
		lim         Limits
		do          func(r *Root) error
		want        string
	}{
		{"bytes", Limits{Bytes: 1000, Entries: 100, Lookups: 100},
			func(r *Root) error {
				if _, err := r.ReadFile("/a", 1000); err != nil {
					return err
				}
				_, err := r.ReadFile("/b", 1000)
				return err
			}, "/b: reached the limit of 1000 bytes read for one container's update"},
		{"entries", Limits{Bytes: 1000, Entries: 10, Lookups: 100},
			func(r *Root) error { _, err := r.List("/d", 100); return err },
			"/d: reached the limit of 10 directory entries listed for one container's update"},
		{"entries over several listings", Limits{Bytes: 1000, Entries: 30, Lookups: 100},
			func(r *Root) error {
				if _, err := r.List("/d", 100); err != nil {
					return err
				}
				d, err := r.Dir("/d")
				if err != nil {
					return err
				}
				_, err = d.List(100)
				return err
			}, "/d: reached the limit of 30 directory entries listed for one container's update"},
		{"entries over refused listings", Limits{Bytes: 1000, Entries: 30, Lookups: 100},
			func(r *Root) error {
				// Each listing reads 6 names and is refused ("more than 5 entries"): what it
				// read is spent all the same.
				for range 100 {
					if _, err := r.List("/d", 5); errors.Is(err, ErrBudget) {
						return err
					}
				}
				return nil
			}, "/d: reached the limit of 30 directory entries listed for one container's update"},
		{"deadline, listing a directory already open", Limits{Bytes: 1000, Entries: 100, Lookups: 100},
			func(r *Root) error {
				if _, err := r.List("/d", 100); err != nil {
					return err
				}
				r.b.lim.Deadline = time.Now().Add(-time.Second) // the handle is cached: no lookup
				_, err := r.List("/d", 100)
				return err
			}, "/d: reached the limit of time for one container's update"},
		{"lookups", Limits{Bytes: 10000, Entries: 100, Lookups: 2},
			func(r *Root) error {
				for _, p := range []string{"/a", "/b", "/a"} {
					if _, err := r.ReadFile(p, 1000); err != nil {
						return err
					}
				}
				return nil
			}, "/a: reached the limit of 2 paths resolved for one container's update"},
		{"deadline", Limits{Bytes: 1000, Entries: 100, Lookups: 100, Deadline: time.Now().Add(-time.Second)},
			func(r *Root) error { _, err := r.ReadFile("/a", 1000); return err },
			"/a: reached the limit of time for one container's update"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, r := newRoot(t, files, tc.lim)
			err := tc.do(r)
			if !errors.Is(err, ErrBudget) || err.Error() != tc.want {
				t.Errorf("err = %v, want %q (ErrBudget)", err, tc.want)
			}
		})
	}
}

// TestListLimit: a directory larger than the caller's limit is refused, within budget.
func TestListLimit(t *testing.T) {
	files := map[string]string{}
	for i := range 5 {
		files["/d/f"+string(rune('a'+i))] = ""
	}
	_, r := newRoot(t, files, big())
	if _, err := r.List("/d", 4); err == nil || err.Error() != "more than 4 entries" {
		t.Errorf("List = %v", err)
	}
	names, err := r.List("/d", 5)
	if err != nil || strings.Join(names, ",") != "fa,fb,fc,fd,fe" {
		t.Errorf("List = %v, %v", names, err)
	}
}

// TestNonRegular: a FIFO, a directory and a link are refused by the readers without
// blocking.
func TestNonRegular(t *testing.T) {
	dir, r := newRoot(t, map[string]string{"/etc/": "", "/etc/link": "->/etc/x", "/etc/x": "x"}, big())
	if err := unix.Mkfifo(filepath.Join(dir, "etc/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := r.ReadFile("/etc/fifo", 100); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFile(fifo) = %v, want ErrNotRegular", err)
		}
		if _, err := r.ReadFile("/etc", 100); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFile(dir) = %v, want ErrNotRegular", err)
		}
		d, err := r.Dir("/etc")
		if err != nil {
			t.Error(err)
			return
		}
		if _, _, err := d.Open("fifo", false); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Open(fifo) = %v, want ErrNotRegular", err)
		}
		if _, _, err := d.Open("link", false); !errors.Is(err, unix.ELOOP) && !errors.Is(err, ErrNotRegular) {
			t.Errorf("Open(link) = %v, want a refusal (no link followed)", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a read of a FIFO blocked")
	}
}

// TestReadFileTooLarge: a file over the caller's limit is refused before it is read.
func TestReadFileTooLarge(t *testing.T) {
	_, r := newRoot(t, map[string]string{"/f": "0123456789"}, big())
	if _, err := r.ReadFile("/f", 9); err == nil || err.Error() != "larger than 9 bytes" {
		t.Errorf("ReadFile = %v", err)
	}
	if r.b.left.Bytes != big().Bytes {
		t.Errorf("budget spent on a refused file: %d left", r.b.left.Bytes)
	}
}

// TestWritesThroughHandles: WriteFile replaces a link at the name (never writes through
// it); Symlink accepts the same link and refuses another.
func TestWritesThroughHandles(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host")
	if err := os.WriteFile(host, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, r := newRoot(t, map[string]string{"/etc/ld.so.cache": "->" + host}, big())
	d, err := r.Dir("/etc")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("ld.so.cache", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(host); string(data) != "host" {
		t.Errorf("the host file was written: %q", data)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "etc/ld.so.cache")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the link was not replaced: %v %v", fi, err)
	}
	if err := d.Symlink("a", "l"); err != nil {
		t.Fatal(err)
	}
	if err := d.Symlink("a", "l"); err != nil {
		t.Errorf("the same link again: %v", err)
	}
	if err := d.Symlink("b", "l"); err == nil || !strings.Contains(err.Error(), "create link /etc/l -> b: file exists") {
		t.Errorf("another link: %v", err)
	}
	for _, name := range []string{"", ".", "..", "a/b"} {
		if err := d.WriteFile(name, nil, 0o644); err == nil {
			t.Errorf("WriteFile(%q) accepted", name)
		}
	}
}

// root skips a test that needs root, loudly.
func root(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root (mounts a tmpfs / changes file-system credentials)")
	}
}

// mountTmpfs mounts a tmpfs at dir, unmounted at cleanup.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("SKIP: cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// TestOtherMount: nothing on a mount inside the root is read, listed or written, and
// MkdirAll makes nothing there — whether it is reached directly or through an image link.
func TestOtherMount(t *testing.T) {
	root(t)
	dir := t.TempDir()
	if err := os.Symlink("/data", filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	mountTmpfs(t, data)
	if err := os.WriteFile(filepath.Join(data, "shadow"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, big())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := func(what string, err error, p string) {
		t.Helper()
		var me *MountError
		if !errors.As(err, &me) || !errors.Is(err, ErrOtherMount) || me.Path != p {
			t.Errorf("%s: %v, want a MountError for %s", what, err, p)
		}
	}
	_, err = r.ReadFile("/etc/shadow", 100)
	want("ReadFile through a link", err, "/etc/shadow")
	_, err = r.ReadFile("/data/shadow", 100)
	want("ReadFile", err, "/data/shadow")
	_, err = r.Dir("/etc")
	want("Dir", err, "/etc")
	_, err = r.List("/data", 10)
	want("List", err, "/data")
	_, err = r.MkdirAll("/etc/ld.so.conf.d", 0o755)
	want("MkdirAll", err, "/etc")
	if _, err := os.Stat(filepath.Join(data, "ld.so.conf.d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("MkdirAll made a directory in the mount: %v", err)
	}
	// The root's own directories are fine, and the mount point itself (a directory of the
	// root's mount, covered) is reached only as the mount.
	if _, err := r.MkdirAll("/usr/lib", 0o755); err != nil {
		t.Error(err)
	}
	if h, err := r.Lookup("/etc/shadow"); err != nil {
		t.Errorf("Lookup (any mount) = %v", err)
	} else {
		_ = h.Close()
	}
}

// TestReadAs: with the container user's credentials, a file that user may not read is
// not read; writes stay root's.
func TestReadAs(t *testing.T) {
	root(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // t.TempDir is 0700: the user must traverse it
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"shadow": 0o600, "conf": 0o644, "group": 0o640} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(p), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(dir, "group"), 0, 4242); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, big())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.ReadAs(&Cred{UID: 1000, GID: 1000})
	if _, err := r.ReadFile("/shadow", 100); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("ReadFile(0600 root file) as uid 1000 = %v, want permission denied", err)
	}
	if data, err := r.ReadFile("/conf", 100); err != nil || string(data) != "conf" {
		t.Errorf("ReadFile(0644) as uid 1000 = %q, %v", data, err)
	}
	if _, err := r.ReadFile("/group", 100); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("ReadFile(0640, group 4242) without the group = %v, want permission denied", err)
	}
	r.ReadAs(&Cred{UID: 1000, GID: 1000, Groups: []uint32{4242}})
	if data, err := r.ReadFile("/group", 100); err != nil || string(data) != "group" {
		t.Errorf("ReadFile(0640, group 4242) with the group = %q, %v", data, err)
	}
	d, err := r.Dir("/")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("cache", []byte("x"), 0o644); err != nil {
		t.Fatalf("a write after reads as uid 1000: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "cache"), &st); err != nil || st.Uid != 0 {
		t.Errorf("the written file is uid %d (%v), want root's", st.Uid, err)
	}
	// The process's own access is root's again.
	if _, err := os.ReadFile(filepath.Join(dir, "shadow")); err != nil {
		t.Errorf("root lost its access after ReadAs: %v", err)
	}
	r.ReadAs(nil)
	if _, err := r.ReadFile("/shadow", 100); err != nil {
		t.Errorf("ReadFile as root = %v", err)
	}
}

// TestErrorTexts: what the reading calls say when they refuse, word for word.
func TestErrorTexts(t *testing.T) {
	testCases := []struct {
		description string
		do          func(r *Root) error
		want        string
	}{
		{"a container user with more groups than the kernel allows",
			func(r *Root) error {
				r.ReadAs(&Cred{UID: 1000, GID: 1000, Groups: make([]uint32, maxGroups+1)})
				_, err := r.ReadFile("/etc/conf", 100)
				return err
			}, "the container's user has 65537 groups, more than the kernel allows"},
		{"a link name that is a path",
			func(r *Root) error {
				d, err := r.Dir("/etc")
				if err != nil {
					return err
				}
				_, err = d.Readlink("a/b")
				return err
			}, `"a/b" is not a file name`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, r := newRoot(t, map[string]string{"/etc/conf": "x"}, big())
			if err := tc.do(r); err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

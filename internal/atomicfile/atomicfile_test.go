package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func read(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func TestWriteNewAndReplace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	if err := Write(p, []byte("one"), 0o640, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two"), 0o604, Options{KeepOwner: true, Follow: true}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, p); got != "two" || fi.Mode().Perm() != 0o604 {
		t.Errorf("content %q mode %v", got, fi.Mode())
	}
	if got := names(t, dir); strings.Join(got, ",") != "config.json" {
		t.Errorf("directory holds %v", got)
	}
}

// TestWriteKeepsOwner: a config.json owned by the engine's user stays owned by it.
func TestWriteKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: changing a file's owner needs root")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{KeepOwner: true}, {}} {
		if err := Write(p, []byte("new"), 0o644, o); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		want := [2]uint32{1234, 5678}
		if !o.KeepOwner {
			want = [2]uint32{uint32(os.Geteuid()), uint32(os.Getegid())}
		}
		if got := [2]uint32{st.Uid, st.Gid}; got != want {
			t.Errorf("%+v: owner %v, want %v", o, got, want)
		}
	}
}

// TestWriteFollowsSymlink: with Follow, a symlinked file (absolute, relative, a chain) is
// replaced where it lives and the links stay; without it, the link itself is replaced.
func TestWriteFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	realFile := filepath.Join(dir, "realFile", "config.json")
	if err := os.MkdirAll(filepath.Dir(realFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(realFile, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := filepath.Join(dir, "links")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(links, "abs.json")
	rel := filepath.Join(links, "rel.json")
	chain := filepath.Join(links, "chain.json")
	for link, target := range map[string]string{abs: realFile, rel: "../realFile/config.json", chain: "rel.json"} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	for i, link := range []string{abs, rel, chain} {
		content := fmt.Sprintf("v%d", i)
		if err := Write(link, []byte(content), 0o644, Options{Follow: true}); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s is no longer a symlink: %v %v", link, fi, err)
		}
		if got := read(t, realFile); got != content {
			t.Errorf("%s: target holds %q, want %q", link, got, content)
		}
	}
	if got := names(t, filepath.Dir(realFile)); strings.Join(got, ",") != "config.json" {
		t.Errorf("target directory holds %v", got)
	}
	if err := Write(abs, []byte("replaced"), 0o644, Options{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(abs); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("without Follow the link should be replaced by a file: %v %v", fi, err)
	}
	if got := read(t, realFile); got != "v2" {
		t.Errorf("without Follow the target changed: %q", got)
	}
}

// TestRemoveStale: temporary files a killed writer left behind (kill -9 mid-create) are
// removed by the next write there; one being written by a live process is kept.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	me := os.Getpid()
	files := map[string]time.Duration{
		fmt.Sprintf(".config.json.tmp-%d-1", deadPid): 0,               // writer gone
		fmt.Sprintf(".config.json.tmp-%d-2", me):      0,               // being written
		fmt.Sprintf(".config.json.tmp-%d-3", me):      2 * time.Minute, // pid reused long after
		".config.json.tmp-4175082918":                 0,               // os.CreateTemp's naming, before this package
		fmt.Sprintf(".other.json.tmp-%d-1", deadPid):  0,               // another file's: not ours to judge
		"unrelated": 0,
	}
	for name, age := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		if age > 0 {
			old := time.Now().Add(-age)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := Write(filepath.Join(dir, "config.json"), []byte("{}"), 0o644, Options{}); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf(".config.json.tmp-%d-2", me), fmt.Sprintf(".other.json.tmp-%d-1", deadPid), "config.json", "unrelated"}
	sort.Strings(want)
	if got := names(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after the write the directory holds\n%v\nwant\n%v", got, want)
	}
}

func TestWriteFailureCleansUp(t *testing.T) {
	dir := t.TempDir()
	// The target is a non-empty directory: the temporary file is written, then the rename
	// fails. The error must say so and the temporary file must be gone.
	target := filepath.Join(dir, "config.json")
	if err := os.MkdirAll(filepath.Join(target, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := Write(target, []byte("x"), 0o644, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "replace "+target+": rename ") {
		t.Fatalf("error = %v", err)
	}
	if got := names(t, dir); strings.Join(got, ",") != "config.json" {
		t.Errorf("left behind: %v", got)
	}
	if _, err := os.Stat(filepath.Join(target, "inside")); err != nil {
		t.Errorf("target changed: %v", err)
	}
	// A missing directory fails before anything is written.
	missing := filepath.Join(dir, "missing", "config.json")
	if err := Write(missing, []byte("x"), 0o644, Options{}); err == nil ||
		!strings.HasPrefix(err.Error(), "create temporary file for "+missing+": ") {
		t.Errorf("missing dir: error = %v", err)
	}
}

// TestWriteAt: a link the image planted at the name is replaced, never followed; the new file
// has the mode asked for, and no temporary file is left.
func TestWriteAt(t *testing.T) {
	dir, victim := t.TempDir(), t.TempDir()
	if err := os.Symlink(filepath.Join(victim, "ld.so.cache"), filepath.Join(dir, "ld.so.cache")); err != nil {
		t.Fatal(err)
	}
	h := openPath(t, dir)
	if err := WriteAt(h, "ld.so.cache", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(dir, "ld.so.cache"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("ld.so.cache: %v, %v; want a regular file of mode 0644", fi, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "ld.so.cache")); string(data) != "new" {
		t.Errorf("content %q", data)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Errorf("written through a link: %v", entries)
	}
	if got := names(t, dir); strings.Join(got, ",") != "ld.so.cache" {
		t.Errorf("directory holds %v", got)
	}
}

func openPath(t *testing.T, dir string) *os.File {
	t.Helper()
	h, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// helperEnv, when set, makes the test binary a writer for TestWriteAtConcurrent:
// <directory>:<byte>:<rounds>.
const helperEnv = "ATOMICFILE_TEST_WRITER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperWriter(spec))
	}
	os.Exit(m.Run())
}

// helperWriter writes content(b) over <directory>/ld.so.cache rounds times with WriteAt.
func helperWriter(spec string) int {
	parts := strings.Split(spec, ":")
	b, _ := strconv.Atoi(parts[1])
	rounds, _ := strconv.Atoi(parts[2])
	h, err := os.OpenFile(parts[0], unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range rounds {
		if err := WriteAt(h, "ld.so.cache", content(byte(b)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// content is one writer's file: large enough that a torn write shows, all one byte.
func content(b byte) []byte { return bytes.Repeat([]byte{b}, 128<<10) }

// whole reports whether data is one writer's content, and which.
func whole(data []byte) (byte, bool) {
	if len(data) != 128<<10 {
		return 0, false
	}
	return data[0], bytes.Count(data, data[:1]) == len(data)
}

// TestWriteAtConcurrent: many writers of one name in one directory — goroutines and two
// other processes, as two creates on one shared root (ctr run --rootfs, podman --rootfs)
// — each succeed; a reader only ever sees one writer's content whole; the file left is one
// of them, and no temporary file is left behind. Before, WriteAt's one temporary name
// (ld.so.cache~) was removed and recreated under other writers: they failed, or renamed
// another's half-written file into place.
func TestWriteAtConcurrent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ld.so.cache")
	h := openPath(t, dir)
	const goroutines, processes, rounds = 16, 2, 40

	var procs []*exec.Cmd
	var outs []*bytes.Buffer
	for i := range processes {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%d", helperEnv, dir, 'A'+i, rounds))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs, outs = append(procs, cmd), append(outs, &out)
	}
	stop := make(chan struct{})
	readerDone := make(chan string, 1)
	go func() {
		bad := ""
		for {
			select {
			case <-stop:
				readerDone <- bad
				return
			default:
			}
			data, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				bad = err.Error()
			} else if _, ok := whole(data); err == nil && !ok && bad == "" {
				bad = fmt.Sprintf("a reader saw %d bytes that are no writer's content", len(data))
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := WriteAt(h, "ld.so.cache", content(byte('a'+i)), 0o644); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	for i, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Errorf("writer process %d: %v: %s", i, err, outs[i])
		}
	}
	close(stop)
	if bad := <-readerDone; bad != "" {
		t.Error(bad)
	}
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Errorf("WriteAt: %v", err)
		}
	}
	if n > 3 {
		t.Errorf("and %d more WriteAt errors", n-3)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := whole(data); !ok || !(b >= 'a' && b < 'a'+goroutines || b >= 'A' && b < 'A'+processes) {
		t.Errorf("the file left is no writer's content (%d bytes)", len(data))
	}
	if got := names(t, dir); strings.Join(got, ",") != "ld.so.cache" {
		t.Errorf("directory holds %v", got)
	}
}

// TestWriteConcurrent: the same for Write, the host writer, from goroutines of one process
// (their temporary names share a pid).
func TestWriteConcurrent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := Write(p, content(byte('a'+i)), 0o644, Options{Follow: true, KeepOwner: true}); err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("Write: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := whole(data); !ok {
		t.Errorf("the file left is no writer's content (%d bytes)", len(data))
	}
	if got := names(t, dir); strings.Join(got, ",") != "config.json" {
		t.Errorf("directory holds %v", got)
	}
}

// TestWriteAtRemovesStale: a temporary file a killed writer left (kill -9 between create and
// rename) is removed by the next WriteAt there once it is a minute old, whatever pid its name
// holds; a younger one may be a live writer's (of another PID namespace) and stays. Files of
// other names, ldconfig's own temporary file and anything but a regular file are left alone.
func TestWriteAtRemovesStale(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Minute)
	files := map[string]bool{ // name → old
		".ld.so.cache.tmp-1-0123456789abcdef":    true,  // killed writer: removed
		".ld.so.cache.tmp-99999999-1":            true,  // any pid, any suffix: removed
		".ld.so.cache.tmp-1-fedcba9876543210":    false, // young: a writer may be at work
		".00-compat.conf.tmp-1-0123456789abcdef": true,  // another name's: not this write's to judge
		"ld.so.cache~":                           true,  // ldconfig's temporary name
	}
	for name, isOld := range files {
		fp := filepath.Join(dir, name)
		if err := os.WriteFile(fp, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if isOld {
			if err := os.Chtimes(fp, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	link := ".ld.so.cache.tmp-1-link"
	if err := os.Symlink("/nonexistent", filepath.Join(dir, link)); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, link), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if err := WriteAt(openPath(t, dir), "ld.so.cache", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{".00-compat.conf.tmp-1-0123456789abcdef", link, ".ld.so.cache.tmp-1-fedcba9876543210", "ld.so.cache", "ld.so.cache~"}
	sort.Strings(want)
	if got := names(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after the write the directory holds\n%v\nwant\n%v", got, want)
	}
}

// TestWriteAtFailureCleansUp: when the rename fails (a non-empty directory at the name), the
// error says so and the temporary file is gone.
func TestWriteAtFailureCleansUp(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ld.so.cache", "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteAt(openPath(t, dir), "ld.so.cache", []byte("x"), 0o644)
	if err == nil || !strings.HasPrefix(err.Error(), "rename .ld.so.cache.tmp-") || !strings.HasSuffix(err.Error(), " to ld.so.cache: file exists") && !strings.HasSuffix(err.Error(), " to ld.so.cache: is a directory") {
		t.Fatalf("error = %v", err)
	}
	if got := names(t, dir); strings.Join(got, ",") != "ld.so.cache" {
		t.Errorf("left behind: %v", got)
	}
}

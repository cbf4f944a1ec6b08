package atomicfile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
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

// TestWriteAt: a link the image planted at the name or at the temporary name is replaced or
// removed, never followed; the new file has the mode asked for.
func TestWriteAt(t *testing.T) {
	dir, victim := t.TempDir(), t.TempDir()
	for _, n := range []string{"ld.so.cache", "ld.so.cache~"} {
		if err := os.Symlink(filepath.Join(victim, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	h, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
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
	if _, err := os.Lstat(filepath.Join(dir, "ld.so.cache~")); err == nil {
		t.Error("the temporary name is left")
	}
}

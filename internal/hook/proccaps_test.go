package hook

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcCaps: with the /proc interface, only the granted access files are visible, read
// only, in the container's capabilities directory. The container's procfs is stood in for by
// a tmpfs (the branch a second call takes), in a private mount namespace of this thread.
func TestProcCaps(t *testing.T) {
	requireRoot(t)
	host := t.TempDir()
	for _, c := range []string{"mig/config", "gpu0/mig/gi1/access", "gpu0/mig/gi1/ci0/access", "gpu0/mig/gi2/access"} {
		p := filepath.Join(host, CapabilitiesDir, c)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("DeviceFileMinor: 1\n# "+c+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	caps := filepath.Join(root, CapabilitiesDir)
	if err := os.MkdirAll(caps, 0o755); err != nil {
		t.Fatal(err)
	}
	type result struct {
		files []string
		write error
		err   error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, with its mount namespace, ends with the goroutine
		var r result
		defer func() { done <- r }()
		if r.err = unix.Unshare(unix.CLONE_NEWNS); r.err != nil {
			return
		}
		if r.err = unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); r.err != nil {
			return
		}
		if r.err = unix.Mount("tmpfs", caps, "tmpfs", 0, ""); r.err != nil {
			return
		}
		if r.err = ProcCaps(root, host, []string{"gpu0/mig/gi1/access", "gpu0/mig/gi1/ci0/access"}); r.err != nil {
			return
		}
		_ = filepath.Walk(caps, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				data, _ := os.ReadFile(p)
				r.files = append(r.files, strings.TrimPrefix(p, caps+"/")+": "+strings.TrimSpace(string(data)))
			}
			return nil
		})
		r.write = os.WriteFile(filepath.Join(caps, "gpu0/mig/gi2/access"), nil, 0o444)
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := []string{
		"gpu0/mig/gi1/access: DeviceFileMinor: 1\n# gpu0/mig/gi1/access",
		"gpu0/mig/gi1/ci0/access: DeviceFileMinor: 1\n# gpu0/mig/gi1/ci0/access",
	}
	if strings.Join(r.files, "|") != strings.Join(want, "|") {
		t.Errorf("the container sees\n%q\nwant\n%q", r.files, want)
	}
	if r.write == nil {
		t.Error("the capabilities directory is writable")
	}
	if _, err := os.Stat(filepath.Join(caps, "gpu0")); err == nil {
		t.Error("the host's mount namespace sees the container's capabilities")
	}
	for _, bad := range []string{"../../etc/passwd", "gpu0/mig/gi1/../../x", "/abs"} {
		if err := ProcCaps(root, host, []string{bad}); err == nil || !strings.Contains(err.Error(), "is not a MIG capability") {
			t.Errorf("%q: error = %v", bad, err)
		}
	}
}

// TestProcCapsErrors: what proc-caps says where the container's /proc is not there or not
// procfs, and of a capability name it does not know (no mount is attempted in any of them).
func TestProcCapsErrors(t *testing.T) {
	noProc := t.TempDir()
	notProc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(notProc, CapabilitiesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(notProc, &st); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		description, root string
		caps              []string
		wantPrefix        string
		wantSuffix        string
	}{
		{"no /proc in the root", noProc, []string{"mig/config"}, "open /proc/driver/nvidia/capabilities in container root: ", " (is /proc mounted in the container?)"},
		{"not procfs", notProc, []string{"mig/config"}, fmt.Sprintf("/proc/driver/nvidia/capabilities in container root is not procfs (statfs type %#x)", st.Type), ""},
		{"an unknown capability", noProc, []string{"gpu0/mig/gi1/../../../x"}, `proc-caps: "gpu0/mig/gi1/../../../x" is not a MIG capability`, ""},
	} {
		if tc.root == notProc && (st.Type == unix.PROC_SUPER_MAGIC || st.Type == unix.TMPFS_MAGIC) {
			continue // TMPDIR on tmpfs: covered as an earlier call's mount
		}
		err := ProcCaps(tc.root, "/", tc.caps)
		if err == nil || !strings.HasPrefix(err.Error(), tc.wantPrefix) || !strings.HasSuffix(err.Error(), tc.wantSuffix) {
			t.Errorf("%s: error %v, want %q … %q", tc.description, err, tc.wantPrefix, tc.wantSuffix)
		}
	}
}

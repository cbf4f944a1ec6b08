package testimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// TestDlopenCUDA: the program DlopenCUDA compiles runs in the root, with no LD_LIBRARY_PATH,
// and says whether the loader found libcuda.so.1 and where.
func TestDlopenCUDA(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOARCH != "amd64" {
		t.Skip("SKIP: running the program chrooted needs root on linux/amd64")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("SKIP: gcc: %v", err)
	}
	root := t.TempDir()
	if _, err := Build(root, Options{DlopenCUDA: true, NoCache: true}); err != nil {
		t.Fatal(err)
	}
	run := func() (string, int) {
		cmd := exec.Command(DlopenCUDAProgram)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin"}
		out, err := cmd.Output()
		if err != nil && cmd.ProcessState == nil {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := run(); code != 1 || out != "libcuda.so.1 => error: libcuda.so.1: cannot open shared object file: No such file or directory\n" {
		t.Errorf("without libcuda: exit %d, %q", code, out)
	}
	lib, err := SharedObject(AMD64, "libcuda.so.1", "libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libcuda.so.1"), lib, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(); code != 0 || out != "libcuda.so.1 => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n" {
		t.Errorf("with libcuda: exit %d, %q", code, out)
	}
}

package testimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Symlink makes the link p -> target, and p's directory.
func Symlink(t testing.TB, target, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// Mkfifo makes a FIFO at p, and p's directory.
func Mkfifo(t testing.TB, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// BuildLib compiles a shared library with the SONAME soname at path with gcc (a real
// library, with section headers and a GNU hash); the test is skipped, saying so, without gcc.
func BuildLib(t testing.TB, path, soname string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: gcc not installed")
	}
	src := filepath.Join(t.TempDir(), "s.c")
	if err := os.WriteFile(src, []byte("int f(void){return 1;}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,"+soname, "-o", path, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
}

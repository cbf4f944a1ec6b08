package fakehost

import (
	"os"
	"path/filepath"
	"testing"
)

// BuildT builds a fake host under t's temporary directory for a test, skipping the test with
// a loud reason when not root (mknod needs it) and failing it when the build fails.
func BuildT(t testing.TB, opts Options) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the fake GPU host needs root (mknod)")
	}
	h, err := Build(filepath.Join(t.TempDir(), "host"), opts)
	if err != nil {
		t.Fatalf("build fake host: %v", err)
	}
	return h
}

// BuildFilesT is BuildFiles for a test: it needs no root (only gcc), and fails the test when
// the build fails.
func BuildFilesT(t testing.TB, opts Options) *Host {
	t.Helper()
	h, err := BuildFiles(filepath.Join(t.TempDir(), "host"), opts)
	if err != nil {
		t.Fatalf("build fake host files: %v", err)
	}
	return h
}

package engine

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// checkGolden compares got with testdata/<name>, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// checkErr asserts err matches wantErr (nil: no error) and contains every wantText.
func checkErr(t *testing.T, err, wantErr error, wantText ...string) {
	t.Helper()
	if wantErr == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, wantErr) {
		t.Fatalf("error %v, want one matching %v", err, wantErr)
	}
	for _, s := range wantText {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

const testRuntimePath = "/usr/local/bin/gpu-runtime"

func testOptions() Options {
	return Options{RuntimeName: "gpu", RuntimePath: testRuntimePath}
}

// completed fills opts in as planning does before the per-engine edits see them (containerd's
// defaults: its edits read the most options; the others ignore the paths).
func completed(t *testing.T, opts Options) Options {
	t.Helper()
	opts, err := opts.withDefaults(Containerd, false)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// pure runs one of the per-engine edits as a test reads it: content, changed, error.
func pure(t *testing.T, fn func([]byte, Options) (edit, error), current []byte, opts Options) ([]byte, bool, error) {
	t.Helper()
	e, err := fn(current, completed(t, opts))
	return e.content, e.changed, err
}

package hook

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealedExecutable(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "ldconfig")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec ldconfig.real \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notELF := filepath.Join(dir, "garbage")
	if err := os.WriteFile(notELF, []byte("garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	const fix = ": ldconfig runs inside the container root, where a dynamic executable would run the image's loader; set hook.ldconfig to glibc's static ldconfig"
	testCases := []struct {
		description string
		path        string
		wantErr     string
	}{
		{"glibc's static ldconfig", "/sbin/ldconfig", ""},
		{"a script", script, "hook.ldconfig " + script + " is a script" + fix},
		{"not an ELF file", notELF, "hook.ldconfig " + notELF + " is not an ELF executable" + fix},
		{"dynamically linked", "/bin/true", "hook.ldconfig /bin/true is dynamically linked" + fix},
		{"relative", "ldconfig", `ldconfig path "ldconfig" is not absolute`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			f, err := sealedExecutable(tc.path)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// Sealed: the copy can no longer be written.
			if _, err := f.Write([]byte("x")); err == nil {
				t.Error("the sealed copy accepted a write")
			}
		})
	}
	// Ubuntu's layout: a script with a static ldconfig.real beside it.
	data, err := os.ReadFile("/sbin/ldconfig")
	if err != nil {
		t.Skip("SKIPPED: no /sbin/ldconfig to copy")
	}
	if err := os.WriteFile(script+".real", data, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := sealedExecutable(script)
	if err != nil {
		t.Fatalf("script with a static .real: %v", err)
	}
	defer f.Close()
	copied, _ := io.ReadAll(f)
	if len(copied) != len(data) {
		t.Errorf("copied %d bytes of ldconfig.real, want %d", len(copied), len(data))
	}
}

// TestContainerRootLargeState: the state carries the spec's annotations; more than a megabyte of
// them must not fail every GPU create.
func TestContainerRootLargeState(t *testing.T) {
	annotations := `{"a":"` + strings.Repeat("x", 3<<20) + `"}`
	// The state is read whole: the bundle it names has no spec.
	_, _, err := ContainerRoot(strings.NewReader(`{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":"/nonexistent-b","annotations":` + annotations + `}`))
	if err == nil || !strings.HasPrefix(err.Error(), "read spec of bundle /nonexistent-b: ") {
		t.Fatalf("ContainerRoot: %v", err)
	}
	_, _, err = ContainerRoot(io.LimitReader(zeros{}, MaxState+1))
	if err == nil || err.Error() != "bad hook input: container state on stdin is larger than 64 MiB" {
		t.Errorf("error = %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

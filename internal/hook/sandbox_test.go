package hook

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestFlattenLDSOConf(t *testing.T) {
	root := t.TempDir()
	host := t.TempDir()
	write := func(p, content string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/ld.so.conf", "# top\ninclude /etc/ld.so.conf.d/*.conf\n/opt/lib   # trailing comment\n\ninclude\tsub/*.conf extra.conf\nhwcap 1 x\n")
	write("etc/ld.so.conf.d/a.conf", "/a\n")
	write("etc/ld.so.conf.d/b.conf", "/b\n")
	write("etc/ld.so.conf.d/skip.txt", "/never\n")
	write("etc/sub/x.conf", "/relative\n")
	write("etc/extra.conf", "/extra\n")
	write(filepath.Join(host, "secret.conf"), "/inside-root-only\n") // the link below resolves here, inside the root
	if err := os.WriteFile(filepath.Join(host, "secret.conf"), []byte("/host-only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(host, "secret.conf"), filepath.Join(root, "etc/ld.so.conf.d/c.conf")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "etc/ld.so.conf.d/d.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("etc/ld.so.conf.d/e.conf", "include /etc/ld.so.conf.d/e.conf\n") // includes itself

	h, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	conf, warnings := flattenLDSOConf(h)
	want := "/a\n/b\n/inside-root-only\n" + "/opt/lib\n/relative\n/extra\nhwcap 1 x\n"
	if string(conf) != want {
		t.Errorf("conf =\n%s\nwant\n%s", conf, want)
	}
	wantWarnings := []string{
		"loader configuration /etc/ld.so.conf.d/d.conf skipped: not a regular file",
		`/etc/ld.so.conf.d/e.conf: include "/etc/ld.so.conf.d/e.conf" skipped: includes nested more than 8 deep`,
	}
	if strings.Join(warnings, "\n") != strings.Join(wantWarnings, "\n") {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(warnings, "\n"), strings.Join(wantWarnings, "\n"))
	}

	// No /etc/ld.so.conf at all: an empty configuration, as for ldconfig.
	empty, err := openRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if conf, warnings := flattenLDSOConf(empty); len(conf) != 0 || len(warnings) != 0 {
		t.Errorf("empty root: %q %q", conf, warnings)
	}
}

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

// TestBundleLargeState: the state carries the spec's annotations; more than a megabyte of
// them must not fail every GPU create.
func TestBundleLargeState(t *testing.T) {
	annotations := `{"a":"` + strings.Repeat("x", 3<<20) + `"}`
	got, err := Bundle(strings.NewReader(`{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":"/b","annotations":` + annotations + `}`))
	if err != nil || got != "/b" {
		t.Fatalf("Bundle = %q, %v", got, err)
	}
	_, err = Bundle(io.LimitReader(zeros{}, MaxState+1))
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

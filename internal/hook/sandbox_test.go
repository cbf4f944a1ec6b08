package hook

import (
	"fmt"
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
	write("etc/ld.so.conf.d/e.conf", "include /etc/ld.so.conf.d/e.conf\n") // includes itself: read once
	// A chain of includes nine deep: the ninth is not followed.
	write("etc/ld.so.conf.d/f0.conf", "/f0\ninclude /etc/chain/f1.conf\n")
	for i := 1; i <= 9; i++ {
		write(fmt.Sprintf("etc/chain/f%d.conf", i), fmt.Sprintf("/g%d\ninclude /etc/chain/f%d.conf\n", i, i+1))
	}

	conf, err := flattenLDSOConf(openRoot(t, root))
	if err != nil {
		t.Fatal(err)
	}
	want := "/a\n/b\n/inside-root-only\n" + "/f0\n/g1\n/g2\n/g3\n/g4\n/g5\n/g6\n/g7\n" + "/opt/lib\n/relative\n/extra\nhwcap 1 x\n"
	if got := string(conf.bytes()); got != want {
		t.Errorf("conf =\n%s\nwant\n%s", got, want)
	}
	wantWarnings := []string{
		"loader configuration /etc/ld.so.conf.d/d.conf skipped: not a regular file",
		"/etc/chain/f7.conf line 2: include skipped: includes nested more than 8 deep",
	}
	if strings.Join(conf.warnings, "\n") != strings.Join(wantWarnings, "\n") {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(conf.warnings, "\n"), strings.Join(wantWarnings, "\n"))
	}
	// Each line knows where it came from.
	if l := conf.lines[len(conf.lines)-1]; l.file != "/etc/ld.so.conf" || l.line != 6 {
		t.Errorf("the hwcap line is %s line %d, want /etc/ld.so.conf line 6", l.file, l.line)
	}

	// No /etc/ld.so.conf at all: an empty configuration, as for ldconfig.
	if conf, err := flattenLDSOConf(openRoot(t, t.TempDir())); len(conf.lines) != 0 || len(conf.warnings) != 0 || err != nil {
		t.Errorf("empty root: %+v %v", conf, err)
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

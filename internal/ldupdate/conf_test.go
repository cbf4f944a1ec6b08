package ldupdate

import (
	"fmt"
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

	conf, err := ReadConfig(openRoot(t, root))
	if err != nil {
		t.Fatal(err)
	}
	want := "/a\n/b\n/inside-root-only\n" + "/f0\n/g1\n/g2\n/g3\n/g4\n/g5\n/g6\n/g7\n" + "/opt/lib\n/relative\n/extra\nhwcap 1 x\n"
	if got := string(conf.Bytes()); got != want {
		t.Errorf("conf =\n%s\nwant\n%s", got, want)
	}
	wantWarnings := []string{
		"loader configuration /etc/ld.so.conf.d/d.conf skipped: not a regular file",
		"/etc/chain/f7.conf line 2: include skipped: includes nested more than 8 deep",
	}
	if strings.Join(conf.Warnings, "\n") != strings.Join(wantWarnings, "\n") {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(conf.Warnings, "\n"), strings.Join(wantWarnings, "\n"))
	}
	// Each line knows where it came from.
	if l := conf.lines[len(conf.lines)-1]; l.file != "/etc/ld.so.conf" || l.line != 6 {
		t.Errorf("the hwcap line is %s line %d, want /etc/ld.so.conf line 6", l.file, l.line)
	}

	// No /etc/ld.so.conf at all: an empty configuration, as for ldconfig.
	if conf, err := ReadConfig(openRoot(t, t.TempDir())); len(conf.lines) != 0 || len(conf.Warnings) != 0 || err != nil {
		t.Errorf("empty root: %+v %v", conf, err)
	}
}

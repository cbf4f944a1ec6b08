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

// TestReadConfigWarnings: what ReadConfig says it skipped, word for word, and that an image
// repeating a bad line gets a bounded list of warnings, not one per line.
func TestReadConfigWarnings(t *testing.T) {
	badPatterns := make([]string, 0, maxConfWarnings+1)
	for i := range maxConfWarnings {
		badPatterns = append(badPatterns, fmt.Sprintf("/etc/ld.so.conf line %d: include: bad pattern: syntax error in pattern", i+1))
	}
	badPatterns = append(badPatterns, "90 more warnings about the loader configuration not shown")
	bigDir := make([]string, 0, maxConfWarnings+1)
	for i := range maxConfWarnings {
		bigDir = append(bigDir, fmt.Sprintf("/etc/ld.so.conf line %d: include: /big not searched: more than 4096 entries", i+1))
	}
	bigDir = append(bigDir, "5 more warnings about the loader configuration not shown")

	testCases := []struct {
		description string
		conf        string
		dirs        map[string]int // directory -> how many empty files it holds
		want        []string
		wantErr     string
	}{
		{
			description: "a bad pattern on 100 lines: ten warnings and a count",
			conf:        strings.Repeat("include /etc/[\n", 100),
			want:        badPatterns,
		},
		{
			description: "a pattern matching more than 256 files",
			conf:        "include /m/*\n",
			dirs:        map[string]int{"/m": maxConfFiles + 1},
			want: []string{
				"/etc/ld.so.conf line 1: include: more than 256 matches: only the first 256 are read",
				"/m/c0255.conf skipped: more than 256 loader configuration files", // /etc/ld.so.conf is the first
			},
		},
		{
			description: "more than 256 files over two patterns",
			conf:        "include /m/*\ninclude /n/*\n",
			dirs:        map[string]int{"/m": 200, "/n": 56},
			want:        []string{"/n/c0055.conf skipped: more than 256 loader configuration files"},
		},
		{
			description: "a directory over the listing limit",
			conf:        "include /big/*\n",
			dirs:        map[string]int{"/big": maxGlobEntries + 1},
			want:        []string{"/etc/ld.so.conf line 1: include: /big not searched: more than 4096 entries"},
		},
		{
			description: "a directory over the listing limit included 20,000 times: the budget ends it",
			conf:        strings.Repeat("include /big/*\n", 20000),
			dirs:        map[string]int{"/big": maxGlobEntries + 1},
			want:        bigDir,
			wantErr:     "/big: reached the limit of 65536 directory entries listed for one container's update",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root := t.TempDir()
			for dir, n := range tc.dirs {
				full := filepath.Join(root, dir)
				if err := os.MkdirAll(full, 0o755); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if err := os.WriteFile(filepath.Join(full, fmt.Sprintf("c%04d.conf", i)), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(tc.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			conf, err := ReadConfig(openRoot(t, root))
			if gotErr := fmt.Sprint(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && gotErr != tc.wantErr) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if got := strings.Join(conf.Warnings, "\n"); got != strings.Join(tc.want, "\n") {
				t.Errorf("warnings =\n%s\nwant\n%s", got, strings.Join(tc.want, "\n"))
			}
		})
	}
}

package create

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestShadowsLoaderMessagesBounded: why the loader cache is left to the hook names the mount
// destination (the user's volume) and the image path it covers quoted cut: a megabyte
// destination made a megabyte log line, twice over where the resolver's error repeated it.
func TestShadowsLoaderMessagesBounded(t *testing.T) {
	root := t.TempDir()
	cut := func(s string) string { return strconv.Quote(s[:256]) + fmt.Sprintf("… (%d bytes)", len(s)) }
	deep := "/usr/local/cuda/compat/" + strings.Repeat("a/", 1500) // resolvable: under PATH_MAX
	longName := "/" + strings.Repeat("x", 1<<20)
	deepConf := "/opt/" + strings.Repeat("l/", 1500) // an image's ld.so.conf line
	longConf := "/opt/" + strings.Repeat("l", 1<<20) // one of a megabyte
	for _, tc := range []struct {
		description string
		dest        string
		loader      []string
		want        string // the whole reason, or its start when cutErr is set
		cutErr      bool   // the resolver's error follows, cut
	}{
		{description: "short paths as they are, quoted", dest: "/usr", loader: []string{"/usr/local/cuda/compat"},
			want: `something is mounted at "/usr", and the update reads or writes "/usr/local/cuda/compat": the hook sees the mount`},
		{description: "a long destination below a loader path", dest: deep, loader: []string{"/usr/local/cuda/compat"},
			want: "something is mounted at " + cut(deep) + `, and the update reads or writes "/usr/local/cuda/compat": the hook sees the mount`},
		{description: "a long loader path below a destination", dest: "/opt", loader: []string{strings.TrimSuffix(deepConf, "/")},
			want: `something is mounted at "/opt", and the update reads or writes ` + cut(strings.TrimSuffix(deepConf, "/")) + ": the hook sees the mount"},
		{description: "a loader path that cannot be resolved", dest: "/opt", loader: []string{longConf},
			want: cut(longConf) + " cannot be resolved in the container root: lstat " + root, cutErr: true},
		{description: "a destination that cannot be resolved", dest: longName, loader: []string{"/etc/ld.so.cache"},
			want: "mount destination " + cut(longName) + " cannot be resolved in the container root: lstat " + root, cutErr: true},
	} {
		t.Run(tc.description, func(t *testing.T) {
			got := shadowsLoader(root, []specs.Mount{{Destination: tc.dest, Type: "bind", Source: "/tmp"}}, tc.loader)
			if len(got) > 2048 {
				t.Errorf("a reason of %d bytes", len(got))
			}
			switch {
			case tc.cutErr:
				if !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, " bytes)") {
					t.Errorf("reason\n%.1500s\nwant it to start with\n%.1500s\nand end cut", got, tc.want)
				}
			case got != tc.want:
				t.Errorf("reason\n%.1500s\nwant\n%.1500s", got, tc.want)
			}
		})
	}
}

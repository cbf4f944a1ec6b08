package hook

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/reexec"

	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// TestMain lets the test binary play gpu-hook's sandbox: runLDConfig re-executes
// /proc/self/exe, which in a test is this binary.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

func TestContainerRoot(t *testing.T) {
	bundle := t.TempDir()
	write := func(spec string) {
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testCases := []struct {
		description string
		spec        string
		state       string
		want        string
		wantErr     string
	}{
		{description: "relative root", spec: `{"root":{"path":"rootfs"}}`, state: `{"bundle":"` + bundle + `"}`, want: filepath.Join(bundle, "rootfs")},
		{description: "absolute root", spec: `{"root":{"path":"/x/y/"}}`, state: `{"bundle":"` + bundle + `"}`, want: "/x/y"},
		{description: "no state", spec: `{}`, state: ``, wantErr: "bad hook input: decode container state from stdin: EOF"},
		{description: "relative bundle", spec: `{}`, state: `{"bundle":"b"}`, wantErr: `bad hook input: container state has bundle "b", want an absolute path`},
		{description: "no root", spec: `{}`, state: `{"bundle":"` + bundle + `"}`, wantErr: "bad hook input: spec of bundle " + bundle + " has no root.path"},
		{description: "bundle without a spec", spec: `{}`, state: `{"bundle":"/nonexistent-bundle"}`,
			wantErr: "read spec of bundle /nonexistent-bundle: open /nonexistent-bundle/config.json: no such file or directory"},
		{description: "spec that is not JSON", spec: `{"root":`, state: `{"bundle":"` + bundle + `"}`, wantErr: "decode spec of bundle " + bundle + ": unexpected end of JSON input"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			write(tc.spec)
			got, _, err := ContainerRoot(strings.NewReader(tc.state))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the ldconfig sandbox (mount and PID namespaces) needs root")
	}
}

func TestUpdateLDCache(t *testing.T) {
	requireRoot(t)
	root := t.TempDir() // no /etc: the hook must create it inside the root
	lib := "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
	testimage.BuildLib(t, filepath.Join(root, lib), "libcuda.so.1")
	// The image already ships its own dev link for libnvidia-ml: it must be left alone.
	ml := "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"
	testimage.BuildLib(t, filepath.Join(root, ml), "libnvidia-ml.so.1")
	if err := os.Symlink("image-choice", filepath.Join(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so")); err != nil {
		t.Fatal(err)
	}
	if _, err := UpdateLDCache(root, LDCacheOptions{Options: ldupdate.Options{LDConfig: "/sbin/ldconfig", Libraries: libraries([]string{lib, ml}, nil)}}); err != nil {
		t.Fatal(err)
	}
	checks := []struct{ link, want string }{
		{"/usr/lib/x86_64-linux-gnu/libcuda.so", "libcuda.so.550.54.15"},
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.550.54.15"},
		{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so", "image-choice"},
	}
	for _, c := range checks {
		got, err := os.Readlink(filepath.Join(root, c.link))
		if err != nil || got != c.want {
			t.Errorf("%s -> %q (%v), want %q", c.link, got, err, c.want)
		}
	}
	cache, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil || !strings.Contains(string(cache), "libcuda.so.1") {
		t.Errorf("ld.so.cache lacks libcuda.so.1 (%v)", err)
	}
}

// TestUpdateLDCacheConfined: an image whose library directory is a symlink to a host
// directory must not get links created on the host.
func TestUpdateLDCacheConfined(t *testing.T) {
	requireRoot(t)
	host := t.TempDir()
	root := t.TempDir()
	for _, target := range []string{host, "../../../../../../../../" + host} {
		t.Run(target, func(t *testing.T) {
			if err := os.RemoveAll(filepath.Join(root, "usr")); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(root, "usr/lib/x86_64-linux-gnu")); err != nil {
				t.Fatal(err)
			}
			_, err := UpdateLDCache(root, LDCacheOptions{Options: ldupdate.Options{LDConfig: "/sbin/ldconfig", Libraries: libraries([]string{"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"}, nil)}})
			entries, _ := os.ReadDir(host)
			if len(entries) != 0 {
				t.Fatalf("hook wrote to the host through an image symlink: %v (err %v)", entries, err)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Logf("hook refused: %v", err)
			}
		})
	}
}

func TestUpdateLDCacheErrors(t *testing.T) {
	testCases := []struct {
		description string
		opts        LDCacheOptions
		wantErr     string
	}{
		{"relative ldconfig", LDCacheOptions{Options: ldupdate.Options{LDConfig: "ldconfig"}}, `update the container's loader cache: ldconfig path "ldconfig" is not absolute`},
		{"relative library", LDCacheOptions{Options: ldupdate.Options{LDConfig: "/sbin/ldconfig", Libraries: libraries([]string{"lib/x.so.1"}, nil)}}, `update ldcache: library path "lib/x.so.1" is not absolute`},
		// Refused before anything is done, though the common case runs no ldconfig.
		{"dynamic ldconfig", LDCacheOptions{Options: ldupdate.Options{LDConfig: "/bin/true"}},
			"update the container's loader cache: hook.ldconfig /bin/true is dynamically linked: ldconfig runs inside the container root, where a dynamic executable would run the image's loader; set hook.ldconfig to glibc's static ldconfig"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := UpdateLDCache(t.TempDir(), tc.opts)
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

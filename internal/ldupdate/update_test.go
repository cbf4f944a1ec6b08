package ldupdate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
)

func TestDevLinkName(t *testing.T) {
	testCases := []struct{ description, in, want string }{
		{"versioned", "libcuda.so.550.54.15", "libcuda.so"},
		{"soname", "libGLX_nvidia.so.0", "libGLX_nvidia.so"},
		{"no version", "libcuda.so", ""},
		{"not a library", "nvidia-smi", ""},
		{"leading .so.", ".so.1", ""},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := DevLinkName(tc.in); got != tc.want {
				t.Errorf("DevLinkName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestLoaderPaths: the configured directories count only for an image without a cache (the
// update scans them then); with one, the configuration is not even read.
func TestLoaderPaths(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/opt/vendor/lib\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const libDir64 = "/usr/lib/x86_64-linux-gnu"
	libs := []Library{{Path: libDir64 + "/libcuda.so.550.54.15"}}
	want := []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", CompatDir, libDir64}
	for _, cache := range []bool{false, true} {
		if cache {
			if err := os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := LoaderPaths(openRoot(t, root), libs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range want {
			if !slices.Contains(got, p) {
				t.Errorf("cache %v: %q missing from %q", cache, p, got)
			}
		}
		if slices.Contains(got, "/opt/vendor/lib") == cache {
			t.Errorf("cache %v: the configured /opt/vendor/lib listed %v, want %v: %q", cache, cache, !cache, got)
		}
	}
}

// TestLoaderPathsErrors: what LoaderPaths says when it gives the update up to the hook.
func TestLoaderPathsErrors(t *testing.T) {
	var many strings.Builder
	for i := range maxLoaderPaths {
		fmt.Fprintf(&many, "/opt/lib%03d\n", i)
	}
	testCases := []struct {
		description string
		conf        string
		lim         confined.Limits
		wantIs      error
		want        string
	}{
		{"256 configured directories, with the standard ones", many.String(), confined.DefaultLimits(0), ErrTooManyLoaderPaths,
			"the image's loader configuration names more than 256 directories"},
		{"past the deadline", "/opt/lib\n", confined.Limits{Bytes: 1 << 20, Entries: 100, Lookups: 100, Deadline: time.Now().Add(-time.Second)}, confined.ErrBudget,
			"/etc/ld.so.conf: reached the limit of time for one container's update"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(tc.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := confined.Open(root, tc.lim)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := LoaderPaths(r, []Library{{Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"}})
			if !errors.Is(err, tc.wantIs) || err.Error() != tc.want {
				t.Errorf("LoaderPaths = %d paths, %v; want %q (%v)", len(got), err, tc.want, tc.wantIs)
			}
		})
	}
}

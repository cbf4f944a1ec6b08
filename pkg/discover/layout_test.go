package discover

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// The driver folder of GKE/COS nodes (/home/kubernetes/bin/nvidia) and of GPU VMs
// (/usr/local/nvidia) keeps libraries in lib64 and binaries in bin, with no ld.so.cache of
// its own. Discovery finds them through its standard directories whether driver.root names
// that folder (container paths /lib64/..., /bin/...) or, for /usr/local/nvidia only, "/"
// (container paths /usr/local/nvidia/lib64/..., /usr/local/nvidia/bin/...).

// lib64Host builds a fake host with the lib64 layout and returns it and the driver root to
// give discovery: the host's own, or a new root holding the driver folder at under.
func lib64Host(t *testing.T, under string) (*fakehost.Host, string) {
	t.Helper()
	opts := fakehost.Default(1)
	opts.Layout = fakehost.LayoutLib64
	h := fakehost.BuildFilesT(t, opts)
	if under == "" {
		return h, h.DriverRoot
	}
	root := t.TempDir()
	folder := filepath.Join(root, under)
	if err := os.MkdirAll(filepath.Dir(folder), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(h.DriverRoot, folder); err != nil {
		t.Fatal(err)
	}
	return h, root
}

func TestFindDriverFilesLib64Layout(t *testing.T) {
	const version = "550.54.15"
	testCases := []struct {
		description string
		under       string // where the driver folder lies in the driver root; "" = it is the root
		prefix      string // the folder's path in the container
	}{
		{description: "driver.root is the driver folder", under: "", prefix: "/"},
		{description: "driver.root is / and the folder /usr/local/nvidia", under: "usr/local/nvidia", prefix: "/usr/local/nvidia"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, root := lib64Host(t, tc.under)
			folder := filepath.Join(root, tc.under)

			nvml, err := FindNVML(root)
			if want := filepath.Join(folder, "lib64/libnvidia-ml.so."+version); err != nil || nvml != want {
				t.Errorf("FindNVML = %q, %v; want %q", nvml, err, want)
			}

			files, err := FindDriverFiles(root, version)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]File{}
			for _, f := range files {
				got[f.ContainerPath] = f
			}
			want := map[string]Kind{}
			for _, l := range fakehost.Libraries(version) {
				want[path.Join(tc.prefix, fakehost.LayoutLib64.Path(l.RelPath))] = KindLibrary
			}
			for _, b := range fakehost.Binaries() {
				want[path.Join(tc.prefix, fakehost.LayoutLib64.Path(b))] = KindBinary
			}
			for p, kind := range want {
				f, ok := got[p]
				if !ok {
					t.Errorf("%s not found", p)
					continue
				}
				if f.Kind != kind || f.HostPath != filepath.Join(root, p) {
					t.Errorf("%s: kind %s, host path %s; want %s, %s", p, f.Kind, f.HostPath, kind, filepath.Join(root, p))
				}
				if kind == KindLibrary && f.Bits != 64 {
					t.Errorf("%s: %d bits, want 64", p, f.Bits)
				}
			}
			for _, d := range fakehost.Decoys(version) {
				if p := path.Join(tc.prefix, fakehost.LayoutLib64.Path(d.RelPath)); got[p].ContainerPath != "" {
					t.Errorf("decoy %s picked up", p)
				}
			}
			for p, f := range got {
				if (f.Kind == KindLibrary || f.Kind == KindBinary) && want[p] == "" {
					t.Errorf("unexpected %s %s", f.Kind, p)
				}
			}
		})
	}
}

// TestFindDriverFilesCOSFolderNeedsDriverRoot: /home/kubernetes/bin/nvidia is no standard
// directory, so on a COS node driver.root must name it; from "/" nothing is found, and the
// error says where NVML was looked for.
func TestFindDriverFilesCOSFolderNeedsDriverRoot(t *testing.T) {
	_, root := lib64Host(t, "home/kubernetes/bin/nvidia")
	_, err := FindNVML(root)
	if err == nil || !strings.Contains(err.Error(), root+"/usr/local/nvidia/lib64/libnvidia-ml.so.1 (not found)") {
		t.Errorf("FindNVML from / = %v, want a not-found error listing the standard directories", err)
	}
	files, err := FindDriverFiles(root, "550.54.15")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Kind == KindLibrary || f.Kind == KindBinary {
			t.Errorf("found %s %s from /", f.Kind, f.ContainerPath)
		}
	}
	folder := filepath.Join(root, "home/kubernetes/bin/nvidia")
	if nvml, err := FindNVML(folder); err != nil || nvml != filepath.Join(folder, "lib64/libnvidia-ml.so.550.54.15") {
		t.Errorf("FindNVML(%s) = %q, %v", folder, nvml, err)
	}
}

// TestDiscoverLib64LayoutCache: with no ld.so.cache to stamp, the cache still sees a driver
// upgrade in lib64 and a binary added to bin.
func TestDiscoverLib64LayoutCache(t *testing.T) {
	h, root := lib64Host(t, "")
	queries := 0
	opts := Options{
		DriverRoot: root,
		DevRoot:    h.DevRoot,
		ProcRoot:   h.ProcRoot,
		CacheFile:  filepath.Join(t.TempDir(), "cache.csv"),
		Query: func(context.Context, string) (Driver, error) {
			queries++
			return Driver{Version: "550.54.15", CUDAVersion: "12.4"}, nil
		},
	}
	devices, err := FindDeviceNodes(h.DevRoot)
	if err != nil {
		t.Fatal(err)
	}
	discover := func(step string, wantHit bool) {
		t.Helper()
		res, err := Discover(opts, devices)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if res.CacheHit != wantHit || res.CacheProblem != "" {
			t.Errorf("%s: cache hit %v (problem %q), want %v", step, res.CacheHit, res.CacheProblem, wantHit)
		}
	}
	discover("first", false)
	discover("unchanged", true)
	if err := fakehost.BuildLibrary(filepath.Join(root, "lib64/libnvidia-ml.so.560.35.03"), "libnvidia-ml.so.1"); err != nil {
		t.Fatal(err)
	}
	discover("a new library in lib64", false)
	discover("unchanged again", true)
	if err := os.WriteFile(filepath.Join(root, "bin/nv-fabricmanager"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	discover("a new binary in bin", false)
	if queries != 3 {
		t.Errorf("NVML queried %d times, want 3", queries)
	}
}

package create

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
)

// TestCheckVolumeTargets: an injected mount that the image's links lead into a volume (a
// bind mount of a host directory) is refused, naming the path, where it leads and the
// volume; one whose own path is inside a volume, one reached through a link that stays out
// of volumes, and bind mounts of files are fine.
func TestCheckVolumeTargets(t *testing.T) {
	hostDir := t.TempDir()
	hostFile := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	icd := edits.Mount{ContainerPath: "/etc/OpenCL/vendors/nvidia.icd"}
	lib := edits.Mount{ContainerPath: "/lib/x86_64-linux-gnu/libcuda.so.550.54.15"}
	volume := func(dest string) specs.Mount {
		return specs.Mount{Destination: dest, Type: "bind", Source: hostDir, Options: []string{"rbind", "rw"}}
	}
	testCases := []struct {
		description string
		links       map[string]string // image links: path -> target
		mounts      []specs.Mount
		injected    []edits.Mount
		wantErr     string
	}{
		{description: "no volume", links: map[string]string{"/etc": "/data"}, injected: []edits.Mount{icd}},
		{description: "/etc linked into a volume", links: map[string]string{"/etc": "/data"}, mounts: []specs.Mount{volume("/data")}, injected: []edits.Mount{lib, icd},
			wantErr: "the image leads a GPU mount into a volume: the image's links lead /etc/OpenCL/vendors/nvidia.icd to /data/OpenCL/vendors/nvidia.icd, inside /data, which the container mounts from the host directory " + quote.Value(hostDir) + ": the low-level runtime would create the mount's target there as root; remove the image's link, or mount the volume elsewhere"},
		{description: "relative link into a volume", links: map[string]string{"/lib": "../../data/lib"}, mounts: []specs.Mount{volume("/data")}, injected: []edits.Mount{lib},
			wantErr: "the image leads a GPU mount into a volume: the image's links lead /lib/x86_64-linux-gnu/libcuda.so.550.54.15 to /data/lib/x86_64-linux-gnu/libcuda.so.550.54.15, inside /data"},
		{description: "usr-merge link, volume elsewhere", links: map[string]string{"/lib": "usr/lib"}, mounts: []specs.Mount{volume("/data")}, injected: []edits.Mount{lib}},
		{description: "the injected path itself inside the volume", mounts: []specs.Mount{volume("/lib/x86_64-linux-gnu")}, injected: []edits.Mount{lib}},
		{description: "a bind mount of a file is no volume", links: map[string]string{"/etc": "/hosts"},
			mounts: []specs.Mount{{Destination: "/hosts", Type: "bind", Source: hostFile, Options: []string{"rbind"}}}, injected: []edits.Mount{icd}},
		{description: "a tmpfs is no volume", links: map[string]string{"/etc": "/data"},
			mounts: []specs.Mount{{Destination: "/data", Type: "tmpfs", Source: "tmpfs"}}, injected: []edits.Mount{icd}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root := t.TempDir()
			for p, target := range tc.links {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
			err := checkVolumeTargets(root, tc.mounts, tc.injected)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tc.wantErr != "" && (err == nil || !errors.Is(err, ErrIntoVolume) || !strings.HasPrefix(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v\nwant %s…", err, tc.wantErr)
			}
		})
	}
}

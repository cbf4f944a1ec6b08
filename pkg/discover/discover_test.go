package discover

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

func TestFindNVMLErrors(t *testing.T) {
	empty := t.TempDir()
	_, err := FindNVML(empty)
	if !errors.Is(err, ErrNVMLNotFound) {
		t.Fatalf("error = %v", err)
	}
	for _, want := range []string{
		`load libnvidia-ml.so.1 from driver root "` + empty + `": tried `,
		empty + "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 (not found)",
		empty + "/usr/local/nvidia/lib64/libnvidia-ml.so.1 (not found)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestFindDriverFiles(t *testing.T) {
	h := fakehost.BuildFilesT(t, fakehost.Default(1))
	files, err := FindDriverFiles(h.DriverRoot, "550.54.15")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]File{}
	for _, f := range files {
		if _, dup := got[f.ContainerPath]; dup {
			t.Errorf("duplicate %s", f.ContainerPath)
		}
		got[f.ContainerPath] = f
		if !strings.HasPrefix(f.HostPath, h.DriverRoot+"/") {
			t.Errorf("%s: host path %s outside the driver root", f.ContainerPath, f.HostPath)
		}
	}
	for _, l := range fakehost.Libraries("550.54.15") {
		f, ok := got["/"+l.RelPath]
		if !ok {
			t.Errorf("library %s not found", l.RelPath)
			continue
		}
		if f.Kind != KindLibrary || f.Prefix != l.Prefix || string(f.Capability) != l.Capability || f.Bits != 64 {
			t.Errorf("library %s: %+v", l.RelPath, f)
		}
	}
	for _, d := range fakehost.Decoys("550.54.15") {
		if _, ok := got["/"+d.RelPath]; ok {
			t.Errorf("decoy %s picked up", d.RelPath)
		}
	}
	for _, want := range []struct {
		path string
		kind Kind
	}{
		{"/usr/bin/nvidia-smi", KindBinary}, {"/usr/bin/nvidia-cuda-mps-control", KindBinary},
		{"/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", KindFirmware},
		{"/var/run/nvidia-persistenced/socket", KindSocket},
		{"/usr/share/vulkan/icd.d/nvidia_icd.json", KindConfig},
	} {
		if f, ok := got[want.path]; !ok || f.Kind != want.kind {
			t.Errorf("%s: got %+v, want kind %s", want.path, f, want.kind)
		}
	}
	// Another driver version finds no libraries at all.
	other, err := FindDriverFiles(h.DriverRoot, "999.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range other {
		if f.Kind == KindLibrary || f.Kind == KindFirmware {
			t.Errorf("version 999.1 found %s", f.ContainerPath)
		}
	}
}

func TestFindDriverFilesSymlinkStaysInRoot(t *testing.T) {
	// A driver root whose library is an absolute symlink (as in driver containers mounted
	// at /run/nvidia/driver) resolves inside the root, never on the host.
	root := t.TempDir()
	real := filepath.Join(root, "opt/driver/libcuda.so.1.2.3")
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, []byte("\x7fELF\x02\x01\x01"+strings.Repeat("\x00", 9)), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "usr/lib/x86_64-linux-gnu/libcuda.so.1.2.3")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/opt/driver/libcuda.so.1.2.3", link); err != nil {
		t.Fatal(err)
	}
	files, err := FindDriverFiles(root, "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].HostPath != real || files[0].ContainerPath != "/usr/lib/x86_64-linux-gnu/libcuda.so.1.2.3" {
		t.Errorf("files = %+v", files)
	}
}

func TestFindDeviceNodes(t *testing.T) {
	h := fakehost.BuildT(t, fakehost.Default(2))
	// Plant bad entries: a regular file and a symlink named like GPU nodes.
	if err := os.WriteFile(filepath.Join(h.DevRoot, "dev/nvidia5"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(h.DevRoot, "dev/nvidia6")); err != nil {
		t.Fatal(err)
	}
	dn, err := FindDeviceNodes(h.DevRoot)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for p := range dn.Nodes {
		names = append(names, p)
	}
	sort.Strings(names)
	want := []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("nodes = %v, want %v", names, want)
	}
	if n := dn.Nodes["/dev/nvidia1"]; n.Major != 195 || n.Minor != 1 || n.Type != "c" || n.HostPath != filepath.Join(h.DevRoot, "dev/nvidia1") {
		t.Errorf("nvidia1 = %+v", n)
	}
	if n := dn.Nodes["/dev/nvidia-uvm-tools"]; n.Major != int64(h.UVMMajor) || n.Minor != 1 {
		t.Errorf("uvm-tools = %+v", n)
	}
	wantInvalid := map[string]string{
		"/dev/nvidia5": "bad device node: " + filepath.Join(h.DevRoot, "dev/nvidia5") + " is not a device node (mode 0100000)",
		"/dev/nvidia6": "bad device node: " + filepath.Join(h.DevRoot, "dev/nvidia6") + " is a symlink, not a device node",
	}
	for p, msg := range wantInvalid {
		if err := dn.Invalid[p]; err == nil || err.Error() != msg || !errors.Is(err, ErrDeviceNode) {
			t.Errorf("%s: error %v, want %q", p, err, msg)
		}
	}
	missing, err := FindDeviceNodes(t.TempDir())
	if err != nil || len(missing.Nodes) != 0 {
		t.Errorf("missing /dev: %+v %v", missing, err)
	}
}

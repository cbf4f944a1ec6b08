package discover

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// migGPU is a GPU in MIG mode with one MIG device (GI 1, CI 0).
func migGPU(minor int) GPU {
	return GPU{Index: 0, Minor: minor, UUID: "GPU-a", MIGCapable: true, MIGCurrent: true, MIGPending: true,
		MIGDevices: []MIGDevice{{Index: 0, UUID: "MIG-a", GI: 1, CI: 0, Profile: "3g.40gb"}}}
}

// procTree writes files (relative path → content) under a new proc root.
func procTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o444))
	}
	return root
}

func TestReadMIGCaps(t *testing.T) {
	devices := "Character devices:\n  1 mem\n195 nvidia-frontend\n237 nvidia-caps\n\nBlock devices:\n  8 sd\n237 nvidia-caps\n"
	minors := "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi2/access 21\n"
	gi := ProcCapabilities + "/gpu0/mig/gi1/access"
	ci := ProcCapabilities + "/gpu0/mig/gi1/ci0/access"
	testCases := []struct {
		description string
		files       map[string]string
		want        MIGCaps
		wantGI      int
		wantCI      int
		wantErr     string // with the proc root as <root>
	}{
		{description: "device nodes: minors from mig-minors for the capabilities that exist",
			files: map[string]string{ProcDevices: devices, ProcMIGMinors: minors, gi: "x", ci: "x",
				ProcCapabilities + "/mig/config": "x", ProcCapabilities + "/mig/monitor": "x"},
			want: MIGCaps{Major: 237, Config: 1, Monitor: 2}, wantGI: 12, wantCI: 13},
		{description: "a capability that does not exist gets -1 although mig-minors lists it",
			files: map[string]string{ProcDevices: devices, ProcMIGMinors: minors, gi: "x"},
			want:  MIGCaps{Major: 237}, wantGI: 12, wantCI: 0},
		{description: "the /proc interface: no nvidia-caps major, minors from the access files",
			files: map[string]string{ProcDevices: "Character devices:\n195 nvidia-frontend\n", gi: "DeviceFileMinor: 12\nDeviceFileMode: 292\n", ci: "DeviceFileMinor: 13\n"},
			want:  MIGCaps{Major: 0}, wantGI: 12, wantCI: 13},
		{description: "malformed /proc/devices line", files: map[string]string{ProcDevices: "Character devices:\n  1 mem\nnvidia-caps\n"},
			wantErr: `unexpected driver /proc file: <root>/proc/devices line 3: "nvidia-caps" is not "<major> <name>"`},
		{description: "malformed mig-minors line", files: map[string]string{ProcDevices: devices, ProcMIGMinors: "config 1\ngpu0/gi1/access twelve\n"},
			wantErr: `unexpected driver /proc file: <root>/proc/driver/nvidia-caps/mig-minors line 2: "gpu0/gi1/access twelve" is not "<capability> <minor>"`},
		{description: "a capability this version does not use is skipped",
			files: map[string]string{ProcDevices: devices, ProcMIGMinors: "fabric-mgmt 0\n" + minors, gi: "x", ci: "x"},
			want:  MIGCaps{Major: 237}, wantGI: 12, wantCI: 13},
		{description: "access file without its minor", files: map[string]string{ProcDevices: devices, gi: "DeviceFileMode: 292\n"},
			wantErr: `unexpected driver /proc file: <root>/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access has no DeviceFileMinor line`},
		{description: "access file with a bad minor", files: map[string]string{ProcDevices: devices, gi: "DeviceFileMinor: -3\n"},
			wantErr: `unexpected driver /proc file: <root>/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access line 1: DeviceFileMinor "-3" is not a capability's minor`},
		{description: "access file that is not key: value", files: map[string]string{ProcDevices: devices, gi: "garbage\n"},
			wantErr: `unexpected driver /proc file: <root>/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access line 1: "garbage" is not "<key>: <value>"`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root := procTree(t, tc.files)
			gpus := []GPU{migGPU(0)}
			caps, err := ReadMIGCaps(root, gpus)
			if tc.wantErr != "" {
				want := strings.ReplaceAll(tc.wantErr, "<root>", root)
				if err == nil || err.Error() != want || !errors.Is(err, ErrProcFormat) {
					t.Fatalf("error = %v\nwant    %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if caps != tc.want || gpus[0].MIGDevices[0].GICap != tc.wantGI || gpus[0].MIGDevices[0].CICap != tc.wantCI {
				t.Errorf("caps %+v, device %+v", caps, gpus[0].MIGDevices[0])
			}
		})
	}
	// A host without MIG reads nothing: a proc root without the files is fine.
	if caps, err := ReadMIGCaps("/nonexistent", []GPU{{Index: 0}}); err != nil || caps != (MIGCaps{}) {
		t.Errorf("no MIG: %+v %v", caps, err)
	}
}

// TestReadMIGCapsFakeHost: on the fake host (the driver's real file formats) the minors
// agree with the caps device nodes it made, for both interfaces.
func TestReadMIGCapsFakeHost(t *testing.T) {
	for _, procInterface := range []bool{false, true} {
		opts := fakehost.Default(2)
		must(t, opts.GPUs[0].AddMIGDevices("3g.40gb", "2g.20gb", "1g.10gb"))
		opts.MIGCapsProcInterface = procInterface
		h := fakehost.BuildT(t, opts)
		var gpus []GPU
		for i, g := range h.Options.GPUs {
			gpu := GPU{Index: i, Minor: g.Minor, MIGCapable: g.MIGCapable, MIGCurrent: g.MIGCurrent, MIGPending: g.MIGPending}
			for _, m := range h.MIGDevices() {
				if m.GPU == g.Index {
					gpu.MIGDevices = append(gpu.MIGDevices, MIGDevice{Index: m.Index, UUID: m.UUID, GI: m.GI, CI: m.CI})
				}
			}
			gpus = append(gpus, gpu)
		}
		caps, err := ReadMIGCaps(h.ProcRoot, gpus)
		if err != nil {
			t.Fatal(err)
		}
		if caps.Major != h.CapsMajor || caps.Config != fakehost.CapMinorMIGConfig || caps.Monitor != fakehost.CapMinorMIGMonitor {
			t.Errorf("proc interface %v: caps %+v, want major %d", procInterface, caps, h.CapsMajor)
		}
		for _, m := range h.MIGDevices() {
			d := gpus[m.GPU].MIGDevices[m.Index]
			if d.GICap != m.GICapMinor || d.CICap != m.CICapMinor {
				t.Errorf("MIG %d:%d: minors %d/%d, want %d/%d", m.NVMLIndex, m.Index, d.GICap, d.CICap, m.GICapMinor, m.CICapMinor)
			}
		}
	}
}

// TestDiscoverCacheWatchesMIG: a MIG reconfiguration invalidates the cache — a capability
// node appears, mig-minors changes, the capabilities tree changes — and a hit answers the MIG
// devices and capability minors the miss found.
func TestDiscoverCacheWatchesMIG(t *testing.T) {
	e := newDiscoverEnv(t)
	pr := e.opts.ProcRoot
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(pr, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o444))
	}
	write(ProcDevices, "Character devices:\n237 nvidia-caps\n")
	write(ProcMIGMinors, "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n")
	write(ProcCapabilities+"/gpu0/mig/gi1/access", "DeviceFileMinor: 12\n")
	write(ProcCapabilities+"/gpu0/mig/gi1/ci0/access", "DeviceFileMinor: 13\n")
	e.opts.Query = func(context.Context, string) (Driver, error) {
		e.queries++
		return Driver{Version: "550.54.15", CUDAVersion: "12.4", GPUs: []GPU{migGPU(0)}}, nil
	}
	nodes := DeviceNodes{Nodes: map[string]DeviceNode{}}
	discover := func() Result {
		t.Helper()
		r, err := Discover(e.opts, nodes)
		must(t, err)
		return r
	}
	if r := discover(); r.CacheHit {
		t.Fatal("first discovery hit")
	}
	r := discover()
	if !r.CacheHit || r.Host.MIGCaps.Major != 237 || r.Host.Driver.GPUs[0].MIGDevices[0].GICap != 12 || r.Host.Driver.GPUs[0].MIGDevices[0].CICap != 13 {
		t.Fatalf("hit: %+v", r)
	}
	steps := []struct {
		description string
		change      func()
	}{
		{"a capability node appears", func() {
			nodes.Nodes["/dev/nvidia-caps/nvidia-cap12"] = DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap12", Type: "c", Major: 237, Minor: 12}
		}},
		{"mig-minors changes", func() {
			p := filepath.Join(pr, ProcMIGMinors)
			must(t, os.Chmod(p, 0o644))
			must(t, os.WriteFile(p, []byte("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi2/access 21\n"), 0o444))
		}},
		{"the capabilities tree changes (a GPU instance created)", func() { write(ProcCapabilities+"/gpu0/mig/gi2/access", "DeviceFileMinor: 21\n") }},
	}
	for _, s := range steps {
		s.change()
		if r := discover(); r.CacheHit {
			t.Errorf("%s: the cache answered", s.description)
		}
		if r := discover(); !r.CacheHit {
			t.Errorf("%s: not cached again", s.description)
		}
	}
}

package ctk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

// devCharHost builds a fake host with one GPU and GDS and MOFED nodes, and points
// GPU_RUNTIME_CONFIG at it.
func devCharHost(t *testing.T) (*fakehost.Host, config.Config) {
	t.Helper()
	opts := fakehost.Default(1)
	opts.Features = fakehost.Features{GDS: 1, MOFED: 1}
	h := fakehost.BuildT(t, opts)
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[driver]\nroot = \""+h.DriverRoot+"\"\ndev-root = \""+h.DevRoot+"\"\nproc-root = \""+h.ProcRoot+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPU_RUNTIME_CONFIG", cfgPath)
	cfg, _, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return h, cfg
}

// TestCreateDevCharSymlinks: every NVIDIA character node gets /dev/char/<major>:<minor>; a
// link to the same device is kept, one to anything else replaced saying so, a file that is not
// a link left alone and reported; --dry-run changes nothing; a second run changes nothing.
func TestCreateDevCharSymlinks(t *testing.T) {
	h, _ := devCharHost(t)
	char := filepath.Join(h.DevRoot, "dev/char")
	if err := os.MkdirAll(char, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"195:0":   "../nvidia0",      // ours already
		"233:0":   "/dev/nvidia-fs0", // another name of the same device (in the dev root)
		"195:255": "../stale",        // to nothing: replaced
	} {
		if err := os.Symlink(target, filepath.Join(char, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(char, "235:0"), nil, 0o644); err != nil { // not a link
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out strings.Builder
		err := Run(append([]string{"system", "create-dev-char-symlinks"}, args...), &out, &strings.Builder{})
		return out.String(), err
	}
	blocked := char + "/235:0 is a regular file, not a symbolic link: left alone; remove it and run this again to link /dev/nvidia-uvm"
	want := "would create " + char + "/10:58 -> ../infiniband/rdma_cm\n" +
		"would create " + char + "/195:254 -> ../nvidia-modeset\n" +
		"would replace " + char + "/195:255 -> ../nvidiactl (it pointed to ../stale, not a node of 195:255)\n" +
		"would create " + char + "/231:192 -> ../infiniband/uverbs0\n" +
		"would create " + char + "/235:1 -> ../nvidia-uvm-tools\n" +
		"dry run, nothing changed: 5 link(s) to create or replace, 2 already in place, under " + char + "\n"
	out, err := run("--dry-run")
	if out != want || err == nil || err.Error() != blocked {
		t.Fatalf("--dry-run:\n%s\nerr %v\nwant:\n%s\nerr %s", out, err, want, blocked)
	}
	if _, err := os.Lstat(filepath.Join(char, "10:58")); err == nil {
		t.Fatal("--dry-run created a link")
	}
	out, err = run()
	if want := strings.ReplaceAll(strings.ReplaceAll(want, "would create", "created"), "would replace", "replaced"); out != strings.Replace(want,
		"dry run, nothing changed: 5 link(s) to create or replace", "5 link(s) created or replaced", 1) || err == nil || err.Error() != blocked {
		t.Fatalf("run:\n%s\nerr %v", out, err)
	}
	for link, target := range map[string]string{"10:58": "../infiniband/rdma_cm", "195:255": "../nvidiactl", "231:192": "../infiniband/uverbs0",
		"235:1": "../nvidia-uvm-tools", "195:0": "../nvidia0", "233:0": "/dev/nvidia-fs0"} {
		if got, err := os.Readlink(filepath.Join(char, link)); err != nil || got != target {
			t.Errorf("%s -> %q (%v), want %q", link, got, err, target)
		}
	}
	if err := os.Remove(filepath.Join(char, "235:0")); err != nil {
		t.Fatal(err)
	}
	if out, err = run(); err != nil || out != "created "+char+"/235:0 -> ../nvidia-uvm\n1 link(s) created or replaced, 7 already in place, under "+char+"\n" {
		t.Errorf("after removing the file: %q, %v", out, err)
	}
	if out, err = run(); err != nil || out != "0 link(s) created or replaced, 8 already in place, under "+char+"\n" {
		t.Errorf("again: %q, %v", out, err)
	}
}

// TestDoctorDevChar: the check warns, with the fix, when an engine uses the systemd cgroup
// driver and a link is missing, and not otherwise.
func TestDoctorDevChar(t *testing.T) {
	h, cfg := devCharHost(t)
	write := func(root, p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	missing := `/dev/infiniband/rdma_cm (10:58), /dev/nvidia0 (195:0), /dev/nvidia-modeset (195:254), /dev/nvidiactl (195:255), /dev/infiniband/uverbs0 (231:192), /dev/nvidia-fs0 (233:0), /dev/nvidia-uvm (235:0), /dev/nvidia-uvm-tools (235:1)`
	warnTail := `: a systemctl daemon-reload takes these devices from running GPU containers ("Failed to initialize NVML: Unknown Error")`
	fix := "gpu-ctk system create-dev-char-symlinks, and at every boot: systemctl enable gpu-runtime-dev-char-symlinks.service"
	testCases := []struct {
		description string
		files       map[string]string
		linked      bool
		want        Check
	}{
		{description: "no engine: not needed", want: Check{Check: "/dev/char links", Status: statusOK}},
		{description: "containerd with SystemdCgroup, no links", files: map[string]string{
			"etc/containerd/config.toml": "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n"},
			want: Check{Check: "/dev/char links", Status: statusWarn, Fix: fix,
				Detail: `containerd uses the systemd cgroup driver (SystemdCgroup = true in /etc/containerd/config.toml); no /dev/char link under dev root "` + h.DevRoot + `" for ` + missing + warnTail}},
		{description: "containerd with SystemdCgroup in a drop-in, links made", linked: true, files: map[string]string{
			"etc/containerd/conf.d/10-systemd.toml": "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n"},
			want: Check{Check: "/dev/char links", Status: statusOK,
				Detail: `containerd uses the systemd cgroup driver (SystemdCgroup = true in /etc/containerd/conf.d/10-systemd.toml): every NVIDIA node (8) has its /dev/char link under dev root "` + h.DevRoot + `"`}},
		{description: "containerd with cgroupfs: not needed", files: map[string]string{
			"etc/containerd/config.toml": "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = false\n"},
			want: Check{Check: "/dev/char links", Status: statusOK}},
		{description: "cri-o installed, its default manager", files: map[string]string{"usr/bin/crio": "#!/bin/sh\n"},
			want: Check{Check: "/dev/char links", Status: statusWarn, Fix: fix, Detail: `cri-o uses the systemd cgroup driver (cri-o's default); no /dev/char link`}},
		{description: "cri-o set to cgroupfs", files: map[string]string{"usr/bin/crio": "#!/bin/sh\n", "etc/crio/crio.conf.d/01.conf": "[crio.runtime]\ncgroup_manager = \"cgroupfs\"\n"},
			want: Check{Check: "/dev/char links", Status: statusOK}},
		{description: "docker exec-opts", files: map[string]string{"etc/docker/daemon.json": `{"exec-opts": ["native.cgroupdriver=systemd"]}`},
			want: Check{Check: "/dev/char links", Status: statusWarn, Fix: fix, Detail: `docker uses the systemd cgroup driver (exec-opts native.cgroupdriver=systemd in /etc/docker/daemon.json); no /dev/char link`}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_ = os.RemoveAll(filepath.Join(h.DevRoot, "dev/char"))
			if tc.linked {
				if _, err := runQuiet("system", "create-dev-char-symlinks"); err != nil {
					t.Fatal(err)
				}
			}
			root := t.TempDir()
			for p, c := range tc.files {
				write(root, p, c)
			}
			d := &doctor{engineRoot: root, cfg: cfg}
			d.checkDevChar()
			if len(d.checks) != 1 {
				t.Fatalf("checks = %+v", d.checks)
			}
			got := d.checks[0]
			if got.Check != tc.want.Check || got.Status != tc.want.Status || got.Fix != tc.want.Fix || !strings.HasPrefix(got.Detail, tc.want.Detail) {
				t.Errorf("check:\n got %+v\nwant %+v", got, tc.want)
			}
			if got.Status == statusWarn && !strings.HasSuffix(got.Detail, warnTail) {
				t.Errorf("detail %q does not end with %q", got.Detail, warnTail)
			}
		})
	}
}

func runQuiet(args ...string) (string, error) {
	var out strings.Builder
	err := Run(args, &out, &strings.Builder{})
	return out.String(), err
}

// TestSystemUsage: gpu-ctk system names what it needs and what is unknown.
func TestSystemUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"system"}, "usage: gpu-ctk system needs create-dev-char-symlinks"},
		{[]string{"system", "link"}, `usage: unknown system command "link" (gpu-ctk system --help)`},
		{[]string{"cdi", "generate", "--mode", "ib"}, `usage: --mode "ib": want gpu, gds, mofed, gdrcopy, nvswitch`},
	} {
		err := Run(tc.args, &strings.Builder{}, &strings.Builder{})
		if err == nil || err.Error() != tc.want || ExitCode(err) != 2 {
			t.Errorf("gpu-ctk %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestDoctorSharedGPUs: with dra.shared-gpus set, doctor says once whether the driver offers
// per-cgroup GPU memory limits, as NVML answers (nvmlinfo's tests check its answers' texts
// against the fake drivers); without it, nothing.
func TestDoctorSharedGPUs(t *testing.T) {
	cfg := config.Default()
	d := &doctor{cfg: cfg, memoryLimits: func(string) error { t.Error("asked NVML without shared GPUs"); return nil }}
	d.checkSharedGPUs()
	if len(d.checks) != 0 {
		t.Errorf("no shared GPUs: checks %+v", d.checks)
	}
	cfg.DRA.SharedGPUs = []string{"0"}
	cfg.Driver.Root = "/drv"
	notOffered := fmt.Errorf("%w: /drv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15 has no nvmlDeviceSetMemoryLimits_v1; it needs NVIDIA driver R615 (CUDA 13.4) or later", nvmlinfo.ErrMemoryLimitsNotOffered)
	testCases := []struct {
		description string
		answer      error
		want        Check
	}{
		{"offered", nil, Check{Check: "shared GPUs", Status: statusOK,
			Detail: "dra.shared-gpus = 0: per-cgroup GPU memory limits offered by the driver: each shared claim's consumed memory is also set on its containers' cgroup v2 groups (gpu-hook memory-limit), beside its MPS daemon's pinned device memory limit"}},
		{"not offered", notOffered, Check{Check: "shared GPUs", Status: statusWarn,
			Detail: "dra.shared-gpus = 0: per-cgroup GPU memory limits not offered: /drv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15 has no nvmlDeviceSetMemoryLimits_v1; it needs NVIDIA driver R615 (CUDA 13.4) or later; a shared claim's memory is limited by its MPS daemon's pinned device memory limit only",
			Fix:    "none needed: each claim's MPS daemon enforces its memory; for per-cgroup limits too, install NVIDIA driver R615 (CUDA 13.4) or later"}},
		{"NVML fails", errors.New("NVML library not found"), Check{Check: "shared GPUs", Status: statusWarn,
			Detail: "dra.shared-gpus = 0: per-cgroup GPU memory limits: cannot ask NVML: NVML library not found; a shared claim's memory is limited by its MPS daemon's pinned device memory limit only",
			Fix:    "see the NVML check: until NVML answers, each claim's MPS daemon alone enforces its memory"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var root string
			d := &doctor{cfg: cfg, memoryLimits: func(r string) error { root = r; return tc.answer }}
			d.checkSharedGPUs()
			if len(d.checks) != 1 || d.checks[0] != tc.want || root != "/drv" {
				t.Errorf("checks (asked %q)\n got %+v\nwant %+v", root, d.checks, tc.want)
			}
		})
	}
}

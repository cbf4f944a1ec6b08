package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
)

const libDir = "/usr/lib/x86_64-linux-gnu"

// probe prints facts about the container, one per line:
//
//	dev <path> <major-hex> <minor-hex>   for every /dev/nvidia* character device
//	access <major>:<minor> allowed|denied  opening it: an allowed fake node fails with ENXIO
//	                                     (no driver), a denied one with EPERM, on cgroup v1 and v2
//	cgroup <rule>                        for every rule in devices.list naming major 195 or 235,
//	                                     and devices-list, where cgroup v1 shows them
//	file <path> / link <path> -> <t>     for the driver directories
//	mount <mountpoint> <options>         for driver-file mounts
//	and marker lines (ldcache-libcuda, soname-libcuda, nvidia-smi-runs, libcuda-readonly, ...)
const probe = `
for f in /dev/nvidia* /dev/nvidia-caps/*; do
  [ -c "$f" ] || continue
  set -- $(stat -c '%t %T' "$f")
  echo "dev $f $1 $2"
  case "$(dd if="$f" of=/dev/null bs=1 count=0 2>&1)" in
    *"No such device or address"*) echo "access $((0x$1)):$((0x$2)) allowed" ;;
    *"Operation not permitted"*) echo "access $((0x$1)):$((0x$2)) denied" ;;
  esac
done
if [ -r /sys/fs/cgroup/devices/devices.list ]; then
  echo devices-list
  grep -E '^c (195|235):' /sys/fs/cgroup/devices/devices.list | sed 's/^/cgroup /'
fi
for f in ` + libDir + `/* ` + libDir + `/vdpau/* /usr/bin/nvidia* /lib/firmware/nvidia/*/* /var/run/nvidia-persistenced/* /usr/share/vulkan/icd.d/* /usr/share/glvnd/egl_vendor.d/* /etc/OpenCL/vendors/*; do
  if [ -L "$f" ]; then echo "link $f -> $(readlink "$f")"; elif [ -e "$f" ]; then echo "file $f"; fi
done
awk '$5 ~ /^\/(usr|lib|var|etc)\// {print "mount", $5, $6}' /proc/self/mountinfo
grep -q libcuda.so.1 /etc/ld.so.cache 2>/dev/null && echo ldcache-libcuda
grep -q libnvidia-ml.so.1 /etc/ld.so.cache 2>/dev/null && echo ldcache-libnvidia-ml
[ -e ` + libDir + `/libcuda.so.1 ] && echo soname-libcuda
[ -e ` + libDir + `/libcuda.so ] && echo devlink-libcuda
nvidia-smi >/tmp/smi 2>&1 && grep -q 'Driver Version: 550.54.15' /tmp/smi && echo nvidia-smi-runs
( echo x > ` + libDir + `/libcuda.so.550.54.15 ) 2>/dev/null || echo libcuda-readonly
echo probe-done
`

type facts map[string]bool

// has reports whether the container showed want. A cgroup rule ("cgroup c 195:1 rwm") holds
// where opening the node was allowed — on cgroup v1 and v2 alike — and, where cgroup v1
// lists the rules, where devices.list has it too.
func (f facts) has(want string) bool {
	rule, isRule := strings.CutPrefix(want, "cgroup c ")
	if !isRule {
		return f[want]
	}
	if !f["access "+strings.TrimSuffix(rule, " rwm")+" allowed"] {
		return false
	}
	return !f["devices-list"] || f[want]
}

func (f facts) devs() []string {
	var out []string
	for l := range f {
		if strings.HasPrefix(l, "dev /dev/nvidia") {
			out = append(out, strings.Fields(l)[1])
		}
	}
	return out
}

func runProbe(t *testing.T, e *env, containerEnv ...string) facts {
	t.Helper()
	b := e.bundle(t, containerEnv, probe)
	r := e.run(t, b)
	if r.code != 0 || !strings.Contains(r.stdout, "probe-done") {
		t.Fatalf("container failed: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return facts(lines(r.stdout))
}

func TestInjection(t *testing.T) {
	uuid1 := func(e *env) string { return e.host.Options.GPUs[1].UUID }
	uuid0 := func(e *env) string { return e.host.Options.GPUs[0].UUID }
	testCases := []struct {
		description string
		gpus        int
		env         func(e *env) []string
		present     []string
		absent      []string
		devs        int // number of /dev/nvidia* nodes expected
	}{
		{description: "all GPUs, default capabilities", gpus: 2,
			env: func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=all"} },
			present: []string{"dev /dev/nvidia0 c3 0", "dev /dev/nvidia1 c3 1", "dev /dev/nvidiactl c3 ff", "dev /dev/nvidia-uvm eb 0", "dev /dev/nvidia-uvm-tools eb 1",
				"cgroup c 195:0 rwm", "cgroup c 195:1 rwm", "cgroup c 195:255 rwm", "cgroup c 235:0 rwm", "cgroup c 235:1 rwm",
				"file " + libDir + "/libcuda.so.550.54.15", "file " + libDir + "/libnvidia-ml.so.550.54.15",
				"link " + libDir + "/libcuda.so.1 -> libcuda.so.550.54.15", "link " + libDir + "/libcuda.so -> libcuda.so.550.54.15",
				"file /usr/bin/nvidia-smi", "file /lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", "file /var/run/nvidia-persistenced/socket",
				"ldcache-libcuda", "ldcache-libnvidia-ml", "soname-libcuda", "devlink-libcuda", "nvidia-smi-runs", "libcuda-readonly",
				"mount " + libDir + "/libcuda.so.550.54.15 ro,nosuid,nodev,relatime"},
			absent: []string{"file " + libDir + "/libGLX_nvidia.so.550.54.15", "dev /dev/nvidia-modeset c3 fe", "file " + libDir + "/libcuda.so.470.57.02"},
			devs:   5},
		{description: "none: control nodes and libraries, no GPU", gpus: 2,
			env:     func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=none"} },
			present: []string{"dev /dev/nvidiactl c3 ff", "dev /dev/nvidia-uvm eb 0", "file " + libDir + "/libcuda.so.550.54.15", "nvidia-smi-runs"},
			absent:  []string{"dev /dev/nvidia0 c3 0", "dev /dev/nvidia1 c3 1", "cgroup c 195:0 rwm"},
			devs:    3},
		{description: "index 1 only", gpus: 2,
			env:     func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=1"} },
			present: []string{"dev /dev/nvidia1 c3 1", "cgroup c 195:1 rwm", "dev /dev/nvidiactl c3 ff"},
			absent:  []string{"dev /dev/nvidia0 c3 0", "cgroup c 195:0 rwm"},
			devs:    4},
		{description: "full UUID", gpus: 2,
			env:     func(e *env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=" + uuid1(e)} },
			present: []string{"dev /dev/nvidia1 c3 1"},
			absent:  []string{"dev /dev/nvidia0 c3 0"},
			devs:    4},
		{description: "mixed UUID and index list", gpus: 2,
			env:     func(e *env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=" + uuid0(e) + ", 1"} },
			present: []string{"dev /dev/nvidia0 c3 0", "dev /dev/nvidia1 c3 1"},
			devs:    5},
		{description: "compute alone: libcuda, no nvidia-smi or libnvidia-ml", gpus: 1,
			env:     func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute"} },
			present: []string{"file " + libDir + "/libcuda.so.550.54.15", "ldcache-libcuda", "dev /dev/nvidia-uvm eb 0"},
			absent:  []string{"file /usr/bin/nvidia-smi", "file " + libDir + "/libnvidia-ml.so.550.54.15", "nvidia-smi-runs", "ldcache-libnvidia-ml"},
			devs:    4},
		{description: "utility alone: nvidia-smi and libnvidia-ml, no libcuda, no uvm", gpus: 1,
			env:     func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"} },
			present: []string{"file /usr/bin/nvidia-smi", "nvidia-smi-runs", "file " + libDir + "/libnvidia-ml.so.550.54.15", "ldcache-libnvidia-ml"},
			absent:  []string{"file " + libDir + "/libcuda.so.550.54.15", "ldcache-libcuda", "dev /dev/nvidia-uvm eb 0"},
			devs:    2},
		{description: "all capabilities: graphics, video, ngx, modeset, ICD files", gpus: 1,
			env: func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"} },
			present: []string{"file " + libDir + "/libGLX_nvidia.so.550.54.15", "file " + libDir + "/libnvcuvid.so.550.54.15",
				"file " + libDir + "/vdpau/libvdpau_nvidia.so.550.54.15", "file " + libDir + "/libnvidia-ngx.so.550.54.15",
				"dev /dev/nvidia-modeset c3 fe", "cgroup c 195:254 rwm", "file /usr/share/vulkan/icd.d/nvidia_icd.json",
				"file /usr/share/glvnd/egl_vendor.d/10_nvidia.json", "file /etc/OpenCL/vendors/nvidia.icd", "nvidia-smi-runs", "ldcache-libcuda"},
			devs: 5},
		{description: "legacy CUDA image gets every GPU and capability", gpus: 2,
			env:     func(*env) []string { return []string{"CUDA_VERSION=12.0.1"} },
			present: []string{"dev /dev/nvidia0 c3 0", "dev /dev/nvidia1 c3 1", "file " + libDir + "/libGLX_nvidia.so.550.54.15", "nvidia-smi-runs"},
			devs:    6},
		{description: "eight GPUs", gpus: 8,
			env:     func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=all"} },
			present: []string{"dev /dev/nvidia0 c3 0", "dev /dev/nvidia7 c3 7", "cgroup c 195:7 rwm", "ldcache-libcuda"},
			devs:    11},
		{description: "one-GPU host", gpus: 1,
			env:     func(*env) []string { return []string{"NVIDIA_VISIBLE_DEVICES=all"} },
			present: []string{"dev /dev/nvidia0 c3 0", "ldcache-libcuda", "nvidia-smi-runs"},
			devs:    4},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, tc.gpus)
			f := runProbe(t, e, tc.env(e)...)
			for _, p := range tc.present {
				if !f.has(p) {
					t.Errorf("missing in container: %q", p)
				}
			}
			for _, a := range tc.absent {
				if f.has(a) {
					t.Errorf("unexpected in container: %q", a)
				}
			}
			if got := f.devs(); len(got) != tc.devs {
				t.Errorf("device nodes = %v, want %d", got, tc.devs)
			}
			if t.Failed() {
				t.Logf("container facts:\n%s", dumpFacts(f))
			}
		})
	}
}

func dumpFacts(f facts) string {
	var b strings.Builder
	for l := range f {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func TestNoGPUSpecUntouched(t *testing.T) {
	for _, tc := range []struct {
		description string
		env         []string
	}{
		{"unset", nil},
		{"empty", []string{"NVIDIA_VISIBLE_DEVICES="}},
		{"void", []string{"NVIDIA_VISIBLE_DEVICES=void"}},
		{"legacy image with empty devices", []string{"CUDA_VERSION=12.0", "NVIDIA_VISIBLE_DEVICES="}},
		{"garbage capabilities but no GPU", []string{"NVIDIA_DRIVER_CAPABILITIES=bogus"}},
	} {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			// A driver root without NVML proves no NVML work happens for non-GPU containers.
			e.host = withDriverRoot(e.host, t.TempDir())
			e.writeConfig(t, "")
			b := e.bundle(t, tc.env, "ls /dev; echo done")
			before, _ := os.ReadFile(filepath.Join(b, "config.json"))
			r := e.run(t, b)
			if r.code != 0 || !strings.Contains(r.stdout, "done") {
				t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "nvidia") {
				t.Errorf("non-GPU container sees NVIDIA nodes:\n%s", r.stdout)
			}
			after, _ := os.ReadFile(filepath.Join(b, "config.json"))
			if !bytes.Equal(before, after) {
				t.Errorf("config.json changed for a non-GPU container")
			}
		})
	}
}

func TestCreateStartDelete(t *testing.T) {
	e := newEnv(t, 2)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, probe)
	id := containerID(t)
	out, err := os.OpenFile(filepath.Join(t.TempDir(), "stdout"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if r := e.runtime(t, out, "create", "--bundle", b, id); r.code != 0 {
		t.Fatalf("create: exit %d: %s", r.code, r.stderr)
	}
	defer e.runtime(t, nil, "delete", "--force", id)

	// The spec runc got: no hook at all, the loader cache having been updated at create
	// (TestLDCacheAtCreate), and the docker hook gone.
	var spec specs.Spec
	data, _ := os.ReadFile(filepath.Join(b, "config.json"))
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Hooks != nil && (len(spec.Hooks.CreateContainer) != 0 || len(spec.Hooks.Prestart) != 0) { //nolint:staticcheck // docker writes prestart
		t.Fatalf("want no hooks, got %+v", spec.Hooks)
	}
	if r := e.runtime(t, nil, "state", id); r.code != 0 || !strings.Contains(r.stdout, `"status": "created"`) {
		t.Fatalf("state after create: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if r := e.runtime(t, nil, "start", id); r.code != 0 {
		t.Fatalf("start: exit %d: %s", r.code, r.stderr)
	}
	waitStopped(t, e, id)
	if r := e.runtime(t, nil, "delete", id); r.code != 0 {
		t.Fatalf("delete: exit %d: %s", r.code, r.stderr)
	}
	got, _ := os.ReadFile(out.Name())
	f := facts(lines(string(got)))
	for _, want := range []string{"dev /dev/nvidia1 c3 1", "cgroup c 195:1 rwm", "ldcache-libcuda", "soname-libcuda", "nvidia-smi-runs", "libcuda-readonly", "probe-done"} {
		if !f.has(want) {
			t.Errorf("missing %q in container output:\n%s", want, got)
		}
	}
	if f["dev /dev/nvidia0 c3 0"] {
		t.Errorf("GPU 0 visible though only 1 was requested")
	}
	// The container's ld.so.cache, read from the host with our own parser.
	entries, err := ldcache.Load(filepath.Join(b, "rootfs/etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range entries {
		if en.Name == "libcuda.so.1" && en.Path == libDir+"/libcuda.so.1" {
			found = true
		}
	}
	if !found {
		t.Errorf("container ld.so.cache lacks libcuda.so.1: %+v", entries)
	}
}

func TestDockerGPUsHookReplaced(t *testing.T) {
	e := newEnv(t, 2)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}, probe)
	// What dockerd adds for --gpus: a prestart hook whose binary does not even exist here.
	// Left in place, runc would fail to start the container.
	p := filepath.Join(b, "config.json")
	var spec specs.Spec
	data, _ := os.ReadFile(p)
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Hooks = &specs.Hooks{Prestart: []specs.Hook{{ //nolint:staticcheck // docker writes the deprecated prestart stage
		Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"/usr/bin/nvidia-container-runtime-hook", "prestart"},
	}}}
	data, _ = json.Marshal(&spec)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, b)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	f := facts(lines(r.stdout))
	if !f["dev /dev/nvidia0 c3 0"] || f["dev /dev/nvidia1 c3 1"] || !f["nvidia-smi-runs"] {
		t.Errorf("docker --gpus request not honoured:\n%s", r.stdout)
	}
}

func TestCrun(t *testing.T) {
	e := newEnv(t, 2)
	if _, err := os.Stat("/usr/bin/crun"); err != nil {
		if os.Getenv("GPU_RUNTIME_E2E") == "1" {
			t.Fatal("crun is not installed (make deps)")
		}
		t.Skip("SKIPPED: crun is not installed")
	}
	replaceInFile(t, e.config, `runtimes = ["runc"]`, `runtimes = ["crun"]`)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, probe)
	r := e.run(t, b, "--cgroup-manager=disabled")
	if r.code != 0 && strings.Contains(r.stderr, "cgroups in hybrid mode not supported") {
		// crun 1.8 refuses hybrid cgroup hosts whose v2 side has controllers (ours has
		// hugetlb). That message comes from crun itself after gpu-runtime injected and
		// exec'd it, which is what this host can prove.
		if !strings.Contains(r.stderr, "injected NVIDIA GPUs") {
			t.Fatalf("crun failed before injection:\n%s", r.stderr)
		}
		t.Skip("SKIPPED in-container checks: crun cannot run containers on this host's hybrid cgroup layout: \"cgroups in hybrid mode not supported\"")
	}
	if r.code != 0 {
		t.Fatalf("crun: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	f := facts(lines(r.stdout))
	for _, want := range []string{"dev /dev/nvidia1 c3 1", "ldcache-libcuda", "soname-libcuda", "nvidia-smi-runs", "libcuda-readonly"} {
		if !f[want] {
			t.Errorf("crun: missing %q:\n%s", want, dumpFacts(f))
		}
	}
}

// lastJSONError returns the msg of the last "level":"error" line of a runc JSON log.
func lastJSONError(t *testing.T, path string) string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	defer fh.Close()
	var msg string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var line struct{ Level, Msg, Time string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Errorf("log line is not JSON: %q", sc.Text())
			continue
		}
		if line.Time == "" {
			t.Errorf("log line without time: %q", sc.Text())
		}
		if line.Level == "error" {
			msg = line.Msg
		}
	}
	return msg
}

// TestDockerGPUsCountError: docker run --gpus 3 on a two-GPU host reaches the runtime as
// NVIDIA_VISIBLE_DEVICES=0,1,2 beside docker's hook; the error names the flag and the count.
func TestDockerGPUsCountError(t *testing.T) {
	e := newEnv(t, 2)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0,1,2"}, "true")
	editSpec(t, b, func(s map[string]any) {
		s["hooks"] = map[string]any{"prestart": []any{map[string]any{"path": "/usr/bin/nvidia-container-runtime-hook", "args": []any{"nvidia-container-runtime-hook", "prestart"}}}}
	})
	r := e.run(t, b)
	want := "gpu-runtime: plan GPU injection: unknown device: docker run --gpus 3 asked for 3 GPUs, and this host has GPUs 0 (" + e.host.Options.GPUs[0].UUID + "), 1 (" + e.host.Options.GPUs[1].UUID + "); use --gpus 2 or fewer, --gpus all, or --gpus device=<index or UUID>"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant %q", r.code, r.stderr, want)
	}
}

// TestDockerGPUsCountOnMIGHost (issue 25 item 10): docker run --gpus 2 (and 3) on a host whose
// GPU 1 is in MIG mode fails with one error naming the flag, what it selected and what to ask
// for, never NVIDIA_VISIBLE_DEVICES, which docker wrote and the user never set.
func TestDockerGPUsCountOnMIGHost(t *testing.T) {
	opts := fakehost.Default(2)
	must(t, opts.GPUs[1].AddMIGDevices("3g.40gb", "1g.10gb"))
	e := newEnv(t, 1)
	e.host = privateHost(t, filepath.Join(e.dir, "host"), opts)
	e.writeConfig(t, "")
	mig := e.host.MIGDevices()
	gpu0, gpu1 := e.host.Options.GPUs[0].UUID, e.host.Options.GPUs[1].UUID
	ways := `; ask for whole GPUs not in MIG mode: --gpus device=0, or MIG devices: --gpus '"device=1:0,1:1"' (this host has MIG devices 1:0 (` + mig[0].UUID + `, 3g.40gb), 1:1 (` + mig[1].UUID + `, 1g.10gb)), or --gpus all (every GPU not in MIG mode and every MIG device)`
	for _, tc := range []struct{ devices, want string }{
		{"0,1", "gpu-runtime: plan GPU injection: GPU in MIG mode requested whole: docker run --gpus 2 selects the first 2 GPUs, 0 and 1; GPU 1 (" + gpu1 + ") is in MIG mode and cannot be given whole" + ways},
		{"0,1,2", "gpu-runtime: plan GPU injection: unknown device: docker run --gpus 3 asked for 3 GPUs, and this host has GPUs 0 (" + gpu0 + "), 1 (" + gpu1 + ", in MIG mode); GPU 1 (" + gpu1 + ") is in MIG mode and cannot be given whole" + ways},
	} {
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=" + tc.devices}, "true")
		editSpec(t, b, func(s map[string]any) {
			s["hooks"] = map[string]any{"prestart": []any{map[string]any{"path": "/usr/bin/nvidia-container-runtime-hook", "args": []any{"nvidia-container-runtime-hook", "prestart"}}}}
		})
		logPath := filepath.Join(t.TempDir(), "log.json")
		r := e.run(t, b, "--log", logPath, "--log-format", "json")
		if msg := lastJSONError(t, logPath); r.code == 0 || msg != tc.want {
			t.Errorf("%s: exit %d, error:\n%s\nwant\n%s", tc.devices, r.code, msg, tc.want)
		}
	}
}

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
)

// newCDIEnv is a MIG host env whose [cdi] spec-dirs holds the spec gpu-ctk cdi generate
// wrote for it.
func newCDIEnv(t *testing.T, extra string) (*env, string) {
	t.Helper()
	e := newMIGEnv(t)
	dir := t.TempDir()
	e.writeConfig(t, extra+fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", dir))
	gen := exec.Command(filepath.Join(binDir, "gpu-ctk"), "cdi", "generate", "--output", filepath.Join(dir, "nvidia.yaml"))
	gen.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gpu-ctk cdi generate: %v\n%s", err, out)
	}
	return e, dir
}

// nodesOf runs migProbe and returns the container's NVIDIA nodes, sorted: every one the
// cgroup allows (opening it reaches the missing driver, ENXIO).
func nodesOf(t *testing.T, e *env, b string) []string {
	got, _ := nodesAndOutput(t, e, b)
	return got
}

func nodesAndOutput(t *testing.T, e *env, b string) ([]string, string) {
	t.Helper()
	r := e.run(t, b)
	if r.code != 0 || !strings.Contains(r.stdout, "probe-done") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var got []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "dev ") {
			got = append(got, l)
		}
		if strings.HasPrefix(l, "open ") && !strings.HasSuffix(l, "No such device or address") {
			t.Errorf("access: %s", l)
		}
	}
	sort.Strings(got)
	return got, r.stdout
}

func TestCDI(t *testing.T) {
	h := migHost(t)
	mig := h.MIGDevices()
	gpu0, gpu1 := "dev /dev/nvidia0 195:0", "dev /dev/nvidia1 195:1"
	// The spec carries every capability's files (CDI cannot see NVIDIA_DRIVER_CAPABILITIES).
	common := []string{"dev /dev/nvidiactl 195:255", "dev /dev/nvidia-uvm 235:0", "dev /dev/nvidia-uvm-tools 235:1", "dev /dev/nvidia-modeset 195:254"}
	caps := func(m fakehost.MIGInfo) []string { return []string{capNode(h, m.GICapMinor), capNode(h, m.CICapMinor)} }
	testCases := []struct {
		description string
		config      string
		env         []string
		setup       func(t *testing.T, b string)
		want        []string
	}{
		{description: "a whole GPU by index", env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}, want: join([]string{gpu1}, common)},
		{description: "a whole GPU by UUID", env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=" + h.Options.GPUs[1].UUID}, want: join([]string{gpu1}, common)},
		{description: "a MIG device", env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0:1"}, want: join([]string{gpu0}, caps(mig[1]), common)},
		{description: "all", env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"}, want: join([]string{gpu0, gpu1}, caps(mig[0]), caps(mig[1]), caps(mig[2]), common)},
		{description: "mixed with a plain index", env: []string{"NVIDIA_VISIBLE_DEVICES=1,nvidia.com/gpu=0:0"}, want: join([]string{gpu0, gpu1}, caps(mig[0]), common)},
		{description: "the device plugin's cdi-annotations", setup: func(t *testing.T, b string) {
			editSpec(t, b, func(s map[string]any) {
				s["annotations"] = map[string]any{"cdi.k8s.io/k8s.device-plugin.nvidia.com_gpu": "nvidia.com/gpu=" + mig[2].UUID}
			})
		}, want: join([]string{gpu0}, caps(mig[2]), common)},
		{description: "the device plugin's cdi/ volume mount", config: "[request]\naccept-device-list-as-volume-mounts = true\n",
			env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, setup: func(t *testing.T, b string) {
				addMountRaw(t, b, "/dev/null", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=1")
			}, want: join([]string{gpu1}, common)},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e, _ := newCDIEnv(t, tc.config)
			b := e.bundle(t, tc.env, migProbe)
			if tc.setup != nil {
				tc.setup(t, b)
			}
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if got := nodesOf(t, e, b); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the container's NVIDIA nodes:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestCDIContainer: a container given a GPU by CDI name has the driver libraries read-only
// and its loader finds them (the spec's createContainer hook ran).
func TestCDIContainer(t *testing.T) {
	e, _ := newCDIEnv(t, "")
	f := runProbe(t, e, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1")
	for _, want := range []string{"ldcache-libcuda", "soname-libcuda", "libcuda-readonly", "nvidia-smi-runs", "dev /dev/nvidia1 c3 1"} {
		if !f[want] {
			t.Errorf("container lacks %q", want)
		}
	}
}

func TestCDIErrors(t *testing.T) {
	testCases := []struct {
		description string
		env         []string
		wantMsg     []string
		ran         bool // the create succeeded and the hook failed
	}{
		{"an unknown CDI device", []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=7,nvidia.com/gpu=1"},
			[]string{`unresolvable CDI devices "nvidia.com/gpu=7": the CDI specs in `, ` offer nvidia.com/gpu=0:0, nvidia.com/gpu=0:1, nvidia.com/gpu=0:2, nvidia.com/gpu=1, nvidia.com/gpu=`}, false},
		{"a requirement checks the GPU a CDI device names", []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0:1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"},
			[]string{"unsatisfied condition: arch>=9.0 (host: cuda 12.4, driver 550.54.15; GPU 0:1: arch 8.0, brand tesla)"}, true},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e, _ := newCDIEnv(t, "")
			b := e.bundle(t, tc.env, "echo should-not-run")
			before, _ := os.ReadFile(filepath.Join(b, "config.json"))
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if r.code == 0 || strings.Contains(r.stdout, "should-not-run") {
				t.Fatalf("the container ran:\n%s", r.stdout)
			}
			msg := lastJSONError(t, logPath)
			for _, m := range tc.wantMsg {
				if !strings.Contains(r.stderr, m) || !strings.Contains(msg, m) {
					t.Errorf("stderr or --log lacks %q:\nstderr %s\nlog %s", m, r.stderr, msg)
				}
			}
			if !tc.ran {
				wantSpecUnchanged(t, b, before)
			}
		})
	}
}

// TestCDIPolicyAndPassThrough: on a multi-tenant host an unprivileged container's CDI
// annotations grant nothing; a spec the engine already gave GPUs (CDI in podman or
// containerd 2.x) passes through byte for byte.
func TestCDIPolicyAndPassThrough(t *testing.T) {
	e, _ := newCDIEnv(t, "[request]\naccept-envvar-when-unprivileged = false\n")
	b := e.bundle(t, nil, migProbe)
	editSpec(t, b, func(s map[string]any) {
		s["annotations"] = map[string]any{"cdi.k8s.io/tenant": "nvidia.com/gpu=all"}
	})
	logPath := filepath.Join(t.TempDir(), "log.json")
	r := e.run(t, b, "--log", logPath, "--log-format", "json")
	if r.code != 0 || strings.Contains(r.stdout, "dev /dev/nvidia") {
		t.Errorf("an unprivileged tenant's annotation granted devices: exit %d\n%s", r.code, r.stdout)
	}
	if log, _ := os.ReadFile(logPath); !bytes.Contains(log, []byte(`CDI annotations \"cdi.k8s.io/tenant\" ignored: the container is unprivileged`)) {
		t.Errorf("no warning in the log:\n%s", log)
	}

	e2, _ := newCDIEnv(t, "")
	b = e2.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, "ls /dev/nvidia*")
	editSpec(t, b, func(s map[string]any) { // what podman's CDI injection leaves
		linux := s["linux"].(map[string]any)
		linux["devices"] = []any{map[string]any{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}}
		res := linux["resources"].(map[string]any)
		res["devices"] = append(res["devices"].([]any), map[string]any{"allow": true, "type": "c", "major": 195, "minor": 255, "access": "rwm"})
	})
	before, _ := os.ReadFile(filepath.Join(b, "config.json"))
	id := containerID(t)
	r = e2.runtime(t, nil, "create", "--bundle", b, id)
	defer e2.runtime(t, nil, "delete", "--force", id)
	after, _ := os.ReadFile(filepath.Join(b, "config.json"))
	if r.code != 0 || !bytes.Equal(before, after) {
		t.Errorf("an engine-injected spec was changed (exit %d %s)", r.code, r.stderr)
	}
}

// TestCDISpecDirTrust: a spec directory a user can write to (a world-writable /var/run/cdi)
// hands containers nothing of theirs. A user's spec that overrides nvidia.com/gpu=1 with a
// createRuntime hook (runc runs it on the host, as root), a FIFO and a link to a huge file
// (/dev/zero in the report) are each ignored with a warning naming the file; the create
// neither runs the hook, nor hangs, nor reads the huge file, and the container gets GPU 1
// from root's spec.
func TestCDISpecDirTrust(t *testing.T) {
	e, trusted := newCDIEnv(t, "")
	open := t.TempDir()
	if err := os.Chmod(open, 0o1777); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q, %q]\n", trusted, open))
	marker := filepath.Join(t.TempDir(), "hook-ran-on-the-host")
	evil := filepath.Join(open, "evil.yaml")
	writeFile(t, evil, fmt.Sprintf(`cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "1"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia1, type: c, major: 195, minor: 1}
containerEdits:
  hooks:
  - {hookName: createRuntime, path: /bin/sh, args: [sh, -c, "id -u > %s"]}
`, marker))
	if err := os.Chown(evil, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(open, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// The reported link was to /dev/zero; a regression here must not take the test host's
	// memory, so this one names a sparse file of 256 MiB, which reading would allocate.
	huge := filepath.Join(t.TempDir(), "huge")
	writeFile(t, huge, "")
	if err := os.Truncate(huge, 256<<20); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(open, "zero.yaml")
	if err := os.Symlink(huge, zero); err != nil {
		t.Fatal(err)
	}

	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}, migProbe)
	logPath := filepath.Join(t.TempDir(), "log.json")
	start := time.Now()
	r := e.run(t, b, "--log", logPath, "--log-format", "json")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the create took %s", took)
	}
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r.maxRSS > 200<<20 {
		t.Errorf("peak RSS %d MiB", r.maxRSS>>20)
	}
	if data, err := os.ReadFile(marker); err == nil {
		t.Errorf("the user's spec hook ran on the host as uid %s", strings.TrimSpace(string(data)))
	}
	var got []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "dev ") {
			got = append(got, l)
		}
	}
	sort.Strings(got)
	want := []string{"dev /dev/nvidia-modeset 195:254", "dev /dev/nvidia-uvm 235:0", "dev /dev/nvidia-uvm-tools 235:1", "dev /dev/nvidia1 195:1", "dev /dev/nvidiactl 195:255"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the container's NVIDIA nodes:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	log, _ := os.ReadFile(logPath)
	for _, w := range []string{
		"CDI spec not loaded: " + evil + ": owned by uid 1000, not 0",
		"CDI spec not loaded: " + fifo + ": not a regular file",
		"CDI spec not loaded: " + zero + ": it is a symbolic link",
	} {
		if !bytes.Contains(log, []byte(`"level":"warning","msg":"`+w+`"`)) {
			t.Errorf("no warning %q in the log:\n%s", w, log)
		}
	}
	// gpu-ctk cdi list warns the same, and lists root's devices only.
	list := exec.Command(filepath.Join(binDir, "gpu-ctk"), "cdi", "list")
	list.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	out, err := list.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("gpu-ctk: warning: spec not loaded: "+evil+": owned by uid 1000, not 0\n")) || !bytes.Contains(out, []byte("nvidia.com/gpu=1\n")) {
		t.Errorf("gpu-ctk cdi list: %v\n%s", err, out)
	}
}

// TestCDIHandOffTimeout: gpu-ctk cdi inject, to which gpu-runtime hands a create that names
// CDI devices, is killed at cdi.timeout, with the NVML query it started (here NVML hangs and
// discovery.timeout sets no limit), and the create fails naming the setting, config.json
// untouched.
func TestCDIHandOffTimeout(t *testing.T) {
	e, dir := newCDIEnv(t, "")
	opts := fakehost.Default(2)
	opts.NVMLInitDelay = 30 * time.Second
	e.host = privateHost(t, filepath.Join(e.dir, "hung"), opts)
	e.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\ntimeout = \"1s\"\n", dir))
	replaceInFile(t, e.config, "[discovery]\n", "[discovery]\ncache = false\ntimeout = \"0s\"\n")
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}, "echo should-not-run")
	before, _ := os.ReadFile(filepath.Join(b, "config.json"))
	start := time.Now()
	r := e.run(t, b)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the create took %s: cdi.timeout did not bound it", took)
	}
	want := "CDI hand-off timed out: " + filepath.Join(binDir, "gpu-ctk") + " cdi inject, which resolves the container's CDI devices, did not finish within 1s (setting cdi.timeout) and was killed"
	if r.code == 0 || strings.Contains(r.stdout, "should-not-run") || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	wantSpecUnchanged(t, b, before)
	// Nothing gpu-ctk started is left: neither it nor its NVML query.
	time.Sleep(100 * time.Millisecond)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(p)
		if bytes.Contains(cmdline, []byte(b)) || bytes.Contains(cmdline, []byte(e.host.DriverRoot)) {
			t.Errorf("left running: %s", bytes.ReplaceAll(cmdline, []byte{0}, []byte(" ")))
		}
	}
}

// TestCDIGenerateOutputLink: gpu-ctk cdi generate --output never writes through a symbolic
// link at the output path (one a user planted in a spec directory they can write to): the
// file it names — root's 0600 file, or one it would create elsewhere — is left as it was, the
// link is replaced by the spec (root's, 0644, which the spec directories' rule reads), and a
// warning names both once the spec is written; a write that fails leaves the link and warns
// of no replacement.
func TestCDIGenerateOutputLink(t *testing.T) {
	e := newMIGEnv(t)
	secret := filepath.Join(t.TempDir(), "secret")
	writeFileMode(t, secret, "root's own\n", 0o600)
	elsewhere := filepath.Join(t.TempDir(), "created-by-root")
	for _, tc := range []struct{ description, target string }{
		{"a link to root's 0600 file", secret},
		{"a link to a file that does not exist yet", elsewhere},
	} {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o1777); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "nvidia.yaml")
			if err := os.Symlink(tc.target, out); err != nil {
				t.Fatal(err)
			}
			gen := exec.Command(filepath.Join(binDir, "gpu-ctk"), "cdi", "generate", "--output", out)
			gen.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
			msg, err := gen.CombinedOutput()
			if err != nil {
				t.Fatalf("gpu-ctk cdi generate: %v\n%s", err, msg)
			}
			if want := "gpu-ctk: warning: " + out + " was a symbolic link (to " + tc.target + "): replaced by the spec; links are not read as CDI specs\n"; !strings.Contains(string(msg), want) {
				t.Errorf("output lacks %q:\n%s", want, msg)
			}
			if data, err := os.ReadFile(secret); err != nil || string(data) != "root's own\n" {
				t.Errorf("root's file now holds %q (%v)", data, err)
			}
			if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("root's file: %v, %v", fi.Mode(), err)
			}
			if _, err := os.Lstat(elsewhere); err == nil {
				t.Errorf("%s was created through the link", elsewhere)
			}
			fi, err := os.Lstat(out)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
				t.Fatalf("%s: %v, %v; want a regular file of mode 0644", out, fi.Mode(), err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
				t.Errorf("%s belongs to uid %d", out, st.Uid)
			}
			e.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", dir))
			if list, code := gpuCTK(t, e, "cdi", "list"); code != 0 || !strings.Contains(list, "nvidia.com/gpu=0:1\n") {
				t.Errorf("gpu-ctk cdi list: exit %d\n%s", code, list)
			}
		})
	}
	// A write that fails replaces nothing, and says nothing was replaced.
	t.Run("a link in a read-only directory", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "nvidia.yaml")
		if err := os.Symlink(secret, out); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			t.Fatal(err)
		}
		gen := exec.Command(filepath.Join(binDir, "gpu-ctk"), "cdi", "generate", "--output", out)
		gen.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
		msg, _ := gen.CombinedOutput()
		if code := gen.ProcessState.ExitCode(); code != 1 || !strings.HasPrefix(string(msg), "gpu-ctk: create temporary file for "+out+": ") || strings.Contains(string(msg), "warning") {
			t.Errorf("exit %d:\n%s", code, msg)
		}
		if target, err := os.Readlink(out); err != nil || target != secret {
			t.Errorf("%s: link to %q (%v)", out, target, err)
		}
	})
}

// TestCDIKinds: with the default policy a container's environment or cdi.k8s.io/ annotation
// cannot pick a CDI device of another kind than gpu-runtime serves (here root's own spec of a
// kind that bind-mounts a host directory): the create fails naming the device, the allowed
// kinds and cdi.allowed-kinds, config.json untouched. Once the kind is allowed it resolves.
func TestCDIKinds(t *testing.T) {
	e, dir := newCDIEnv(t, "")
	hostData := t.TempDir()
	writeFile(t, filepath.Join(hostData, "secret"), "host data\n")
	writeFile(t, filepath.Join(dir, "data.yaml"), fmt.Sprintf(`cdiVersion: 0.5.0
kind: example.com/data
devices:
- name: host
  containerEdits:
    mounts:
    - {hostPath: %s, containerPath: /host-data, options: [ro, bind]}
`, hostData))
	const refused = `CDI device kind not allowed: "example.com/data=host" (kind "example.com/data"): gpu-runtime resolves CDI devices of kinds nvidia.com/gpu, k8s.device-plugin.nvidia.com/gpu only; to allow a kind, add it to cdi.allowed-kinds in the gpu-runtime config`
	for _, tc := range []struct {
		description string
		env         []string
		annotations map[string]any
	}{
		{"NVIDIA_VISIBLE_DEVICES", []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1,example.com/data=host"}, nil},
		{"a cdi.k8s.io/ annotation", nil, map[string]any{"cdi.k8s.io/tenant": "example.com/data=host"}},
	} {
		t.Run(tc.description, func(t *testing.T) {
			b := e.bundle(t, tc.env, "cat /host-data/secret")
			if tc.annotations != nil {
				editSpec(t, b, func(s map[string]any) { s["annotations"] = tc.annotations })
			}
			before, _ := os.ReadFile(filepath.Join(b, "config.json"))
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if r.code == 0 || strings.Contains(r.stdout, "host data") {
				t.Fatalf("the container read the host's data: exit %d\n%s", r.code, r.stdout)
			}
			if msg := lastJSONError(t, logPath); !strings.Contains(r.stderr, refused) || !strings.Contains(msg, refused) {
				t.Errorf("stderr or --log lacks %q:\nstderr %s\nlog %s", refused, r.stderr, msg)
			}
			wantSpecUnchanged(t, b, before)
		})
	}
	t.Run("allowed", func(t *testing.T) {
		e.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\nallowed-kinds = [\"nvidia.com/gpu\", \"example.com/data\"]\n", dir))
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=example.com/data=host"}, "cat /host-data/secret")
		if r := e.run(t, b); r.code != 0 || !strings.Contains(r.stdout, "host data") {
			t.Errorf("an allowed kind: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	})
}

// TestCDIGenerateCheck: gpu-ctk cdi generate --check says nothing differs for a fresh spec
// and what changed after a MIG reconfiguration.
func TestCDIGenerateCheck(t *testing.T) {
	e, dir := newCDIEnv(t, "")
	check := func() (string, error) {
		cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), "cdi", "generate", "--check", filepath.Join(dir, "nvidia.yaml"))
		cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := check(); err != nil || !strings.Contains(out, "nvidia.yaml matches this host") {
		t.Fatalf("fresh spec: %v\n%s", err, out)
	}
	// The same spec checked against a host where GPU 0 has only one MIG device.
	opts := fakehost.Default(2)
	if err := opts.GPUs[0].AddMIGDevices("3g.40gb"); err != nil {
		t.Fatal(err)
	}
	e.host = privateHost(t, filepath.Join(e.dir, "reconfigured"), opts)
	e.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", dir))
	out, err := check()
	if err == nil || !strings.Contains(out, "nvidia.yaml no longer matches this host (regenerate it: gpu-ctk cdi generate --output ") ||
		!strings.Contains(out, "device 0:1 no longer exists on this host") || !strings.Contains(out, "device 0:2 no longer exists on this host") {
		t.Errorf("after the reconfiguration: %v\n%s", err, out)
	}
}

// TestCDIMixedLoaderCache: a CDI device named beside a plain index brings the spec's libraries
// of every capability, and gpu-runtime's one loader-cache hook (it replaces the spec's) covers
// them too: a video library in a directory ldconfig does not scan by itself is in the
// container's ld.so.cache, and a library only the CDI spec mounts has its development link.
func TestCDIMixedLoaderCache(t *testing.T) {
	e, _ := newCDIEnv(t, "")
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0:0,1"}, "true")
	r := e.run(t, b)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	entries, err := ldcache.Load(filepath.Join(b, "rootfs/etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, en := range entries {
		found[en.Name] = en.Path
	}
	for _, want := range []string{"libcuda.so.1", "libvdpau_nvidia.so.1"} {
		if found[want] == "" {
			t.Errorf("ld.so.cache lacks %s (has %d entries)", want, len(entries))
		}
	}
	if target, err := os.Readlink(filepath.Join(b, "rootfs/usr/lib/x86_64-linux-gnu/libnvidia-encode.so")); err != nil || target != "libnvidia-encode.so.550.54.15" {
		t.Errorf("development link of a CDI-only library: %q, %v", target, err)
	}
}

// TestCDIBootUnit: the packaged gpu-runtime-cdi.service runs gpu-ctk cdi generate with
// arguments this gpu-ctk accepts, into a directory that need not exist yet (/var/run/cdi is on
// a tmpfs), and the spec it writes resolves. The unit's ExecStart is run with the fake host's
// config and its output path moved under a temporary directory.
func TestCDIBootUnit(t *testing.T) {
	e := newMIGEnv(t)
	unit, err := os.ReadFile("../../packaging/systemd/gpu-runtime-cdi.service")
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	for _, line := range strings.Split(string(unit), "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			argv = strings.Fields(rest)
		}
	}
	if len(argv) < 2 || argv[0] != "/usr/bin/gpu-ctk" || argv[len(argv)-2] != "--output" || argv[len(argv)-1] != "/var/run/cdi/nvidia.yaml" {
		t.Fatalf("ExecStart = %q, want /usr/bin/gpu-ctk … --output /var/run/cdi/nvidia.yaml", argv)
	}
	dir := filepath.Join(t.TempDir(), "run", "cdi")
	argv[len(argv)-1] = filepath.Join(dir, "nvidia.yaml")
	cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), argv[1:]...)
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the unit's command: %v\n%s", err, out)
	}
	e.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", dir))
	out, code := gpuCTK(t, e, "cdi", "list")
	if code != 0 || !strings.Contains(out, "nvidia.com/gpu=0:1\n") || !strings.Contains(out, "nvidia.com/gpu=all\n") {
		t.Errorf("gpu-ctk cdi list: exit %d\n%s", code, out)
	}
}

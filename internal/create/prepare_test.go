package create

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// createEnv is the create path without root: a fake host's files (no device nodes), the
// device-node scan and the NVML query through Options' seams, and a JSON log to read back.
type createEnv struct {
	opts    Options
	host    *fakehost.Host
	queries int
	log     bytes.Buffer
	dir     string
}

func newCreateEnv(t *testing.T) *createEnv {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: the fake host's libraries need gcc (apt-get install gcc)")
	}
	e := &createEnv{host: fakehost.BuildFilesT(t, fakehost.Default(2)), dir: t.TempDir()}
	hook := exe(t, filepath.Join(e.dir, "bin", plan.HookName))
	cfg := config.Default()
	cfg.Driver.Root, cfg.Driver.DevRoot, cfg.Driver.ProcRoot = e.host.DriverRoot, e.host.DevRoot, e.host.ProcRoot
	cfg.Hook.Path = hook
	cfg.Discovery.CacheFile = filepath.Join(e.dir, "cache.csv")
	cfg.Health.File = filepath.Join(e.dir, "health.csv") // not the host's, which other tests may write
	logger := logrus.New()
	logger.SetOutput(&e.log)
	logger.SetFormatter(&logrus.JSONFormatter{})
	logger.SetLevel(logrus.DebugLevel)
	nodes := discover.DeviceNodes{Root: e.host.DevRoot, Nodes: map[string]discover.DeviceNode{}}
	for _, n := range e.host.DeviceNodes() {
		p := "/" + n.RelPath
		nodes.Nodes[p] = discover.DeviceNode{Path: p, HostPath: filepath.Join(e.host.DevRoot, n.RelPath), Type: "c",
			Major: int64(n.Major), Minor: int64(n.Minor), FileMode: os.FileMode(n.Mode)}
	}
	e.opts = Options{Config: cfg, Executable: filepath.Join(e.dir, "bin", "gpu-runtime"), Cwd: e.dir, Logger: logger,
		Rootless: func() string { return "" }, // the same plan as root or not (TestPrepareBundleNoCgroups)
		FindDeviceNodes: func(root string) (discover.DeviceNodes, error) {
			if root != e.host.DevRoot {
				return discover.DeviceNodes{}, fmt.Errorf("device root %s", root)
			}
			return nodes, nil
		},
		QueryNVML: func(context.Context, string) (discover.Driver, error) {
			e.queries++
			d := discover.Driver{Version: "550.54.15", CUDAVersion: "12.4", NVMLPath: e.host.NVMLPath()}
			for _, g := range e.host.Options.GPUs {
				d.GPUs = append(d.GPUs, discover.GPU{Index: g.Index, Minor: g.Minor, UUID: g.UUID, Name: g.Name,
					ComputeCapability: fmt.Sprintf("%d.%d", g.CCMajor, g.CCMinor)})
			}
			return d, nil
		}}
	return e
}

// bundle writes a bundle whose spec has env and, if hook, docker's --gpus hook.
func (e *createEnv) bundle(t *testing.T, env []string, dockerHook bool) (oci.Invocation, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := specs.Spec{Version: specs.Version, Root: &specs.Root{Path: "rootfs"},
		Process: &specs.Process{Args: []string{"sh"}, Cwd: "/", Env: append([]string{"PATH=/bin"}, env...)},
		Linux:   &specs.Linux{Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}}}
	if dockerHook {
		s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: "/usr/bin/" + request.DockerHookName, Args: []string{request.DockerHookName, "prestart"}}}} //nolint:staticcheck // docker writes prestart
	}
	data, err := json.MarshalIndent(&s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := oci.ParseArgs([]string{"create", "--bundle", dir, "c1"})
	if err != nil {
		t.Fatal(err)
	}
	return inv, dir
}

func readSpec(t *testing.T, bundle string) (specs.Spec, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s, data
}

// logLines returns the messages logged at level.
func (e *createEnv) logLines(t *testing.T, level string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(e.log.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}

// TestPrepareBundleInjects: the create path edits the spec with the plan's edits — GPU 1's
// node and rule, the control nodes, the driver files read-only, the loader cache — logs
// every edit at debug and the summary at info, and the next create is answered by the
// discovery cache, without NVML.
func TestPrepareBundleInjects(t *testing.T) {
	e := newCreateEnv(t)
	inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, false)
	if err := PrepareBundle(inv, e.opts); err != nil {
		t.Fatal(err)
	}
	s, _ := readSpec(t, b)
	var devs []string
	for _, d := range s.Linux.Devices {
		devs = append(devs, fmt.Sprintf("%s %d:%d", d.Path, d.Major, d.Minor))
	}
	if want := "/dev/nvidia1 195:1 /dev/nvidiactl 195:255 /dev/nvidia-uvm 235:0 /dev/nvidia-uvm-tools 235:1"; strings.Join(devs, " ") != want {
		t.Errorf("devices %q, want %q", strings.Join(devs, " "), want)
	}
	if n := len(s.Linux.Resources.Devices); n != 5 {
		t.Errorf("%d cgroup rules, want the default deny and 4 allows", n)
	}
	libcuda := false
	for _, m := range s.Mounts {
		if path.Base(m.Destination) == "libcuda.so.550.54.15" && m.Source == filepath.Join(e.host.LibDir, "libcuda.so.550.54.15") && strings.Join(m.Options, ",") == "ro,nosuid,nodev,bind" {
			libcuda = true
		}
	}
	if !libcuda {
		t.Errorf("no read-only libcuda mount: %+v", s.Mounts)
	}
	if s.Hooks != nil && len(s.Hooks.CreateContainer) != 0 {
		t.Errorf("hooks %+v, want none: the loader cache is updated at create (TestPrepareBundleLDCacheAtCreate)", s.Hooks)
	}
	info := e.logLines(t, "info")
	if len(info) != 1 || info[0]["msg"] != "injected NVIDIA GPUs" || info[0]["container_id"] != "c1" || fmt.Sprint(info[0]["gpus"]) != "["+e.host.Options.GPUs[1].UUID+"]" {
		t.Errorf("info lines %v", info)
	}
	debug := map[string]bool{}
	for _, l := range e.logLines(t, "debug") {
		debug[l["msg"].(string)] = true
	}
	if !debug["device /dev/nvidia1 c 195:1 mode 0666 uid 0 gid 0 (host "+filepath.Join(e.host.DevRoot, "dev/nvidia1")+") — GPU 1 ("+e.host.Options.GPUs[1].UUID+")"] {
		t.Errorf("the debug log lacks the device's reason: %v", debug)
	}

	inv, _ = e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, false)
	if err := PrepareBundle(inv, e.opts); err != nil {
		t.Fatal(err)
	}
	if e.queries != 1 {
		t.Errorf("%d NVML queries for two creates, want 1 (the cache answers the second)", e.queries)
	}
}

// TestPrepareBundleLeavesAlone: a container that asks for no GPU, and one whose GPUs the
// engine injected, keep their spec byte for byte, at no discovery cost.
func TestPrepareBundleLeavesAlone(t *testing.T) {
	e := newCreateEnv(t)
	e.opts.FindDeviceNodes = func(string) (discover.DeviceNodes, error) {
		t.Error("a container without GPUs scanned the device nodes")
		return discover.DeviceNodes{}, nil
	}
	for _, env := range [][]string{nil, {"NVIDIA_VISIBLE_DEVICES=void"}, {"NVIDIA_DRIVER_CAPABILITIES=all"}} {
		inv, b := e.bundle(t, env, false)
		_, before := readSpec(t, b)
		if err := PrepareBundle(inv, e.opts); err != nil {
			t.Fatal(err)
		}
		if _, after := readSpec(t, b); !bytes.Equal(before, after) {
			t.Errorf("%q: spec changed", env)
		}
	}
	// What podman or containerd 2.x leave after injecting through CDI.
	inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, false)
	editRaw(t, b, func(s *specs.Spec) {
		s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}
	})
	_, before := readSpec(t, b)
	if err := PrepareBundle(inv, e.opts); err != nil {
		t.Fatal(err)
	}
	if _, after := readSpec(t, b); !bytes.Equal(before, after) {
		t.Error("an engine-injected spec changed")
	}
	if info := e.logLines(t, "info"); len(info) != 1 || info[0]["msg"] != UnchangedEngineInjected {
		t.Errorf("info lines %v", info)
	}
	if e.queries != 0 {
		t.Errorf("%d NVML queries", e.queries)
	}
}

func editRaw(t *testing.T, b string, edit func(*specs.Spec)) {
	t.Helper()
	s, _ := readSpec(t, b)
	edit(&s)
	data, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPrepareBundleDockerHook: docker's --gpus hook is removed even when the request injects
// nothing, and honoured through the spec when it does.
func TestPrepareBundleDockerHook(t *testing.T) {
	e := newCreateEnv(t)
	for _, env := range [][]string{{"NVIDIA_VISIBLE_DEVICES=void"}, {"NVIDIA_VISIBLE_DEVICES=0"}} {
		inv, b := e.bundle(t, env, true)
		if err := PrepareBundle(inv, e.opts); err != nil {
			t.Fatal(err)
		}
		s, _ := readSpec(t, b)
		if s.Hooks != nil && len(s.Hooks.Prestart) != 0 { //nolint:staticcheck // docker writes prestart
			t.Errorf("%q: docker's hook kept: %+v", env, s.Hooks)
		}
		if got := s.Linux != nil && len(s.Linux.Devices) > 0; got != (env[0] == "NVIDIA_VISIBLE_DEVICES=0") {
			t.Errorf("%q: devices %+v", env, s.Linux.Devices)
		}
	}

	// Removing docker's hook writes no hook of ours: it needs no gpu-hook.
	saved := systemDirs
	systemDirs = nil
	t.Cleanup(func() { systemDirs = saved })
	t.Setenv("PATH", t.TempDir())
	e.opts.Config.Hook.Path = ""
	e.opts.Executable = filepath.Join(t.TempDir(), "gpu-runtime")
	inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=void"}, true)
	if err := PrepareBundle(inv, e.opts); err != nil {
		t.Fatalf("without gpu-hook: %v", err)
	}
	if s, _ := readSpec(t, b); s.Hooks != nil && len(s.Hooks.Prestart) != 0 { //nolint:staticcheck // docker writes prestart
		t.Errorf("without gpu-hook: docker's hook kept: %+v", s.Hooks)
	}
	inv, _ = e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, false)
	if err := PrepareBundle(inv, e.opts); err == nil || !strings.Contains(err.Error(), "find gpu-hook: not next to") {
		t.Errorf("a GPU container without gpu-hook: %v", err)
	}
}

// TestPrepareBundleErrors: each failure names its cause and leaves the spec as it was.
func TestPrepareBundleErrors(t *testing.T) {
	testCases := []struct {
		description string
		env         []string
		change      func(e *createEnv)
		want        string
		is          error
	}{
		{description: "an unknown device", env: []string{"NVIDIA_VISIBLE_DEVICES=7"},
			want: `plan GPU injection: unknown device "7" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-`, is: plan.ErrUnknownDevice},
		{description: "the device scan fails", env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			change: func(e *createEnv) {
				e.opts.FindDeviceNodes = func(string) (discover.DeviceNodes, error) { return discover.DeviceNodes{}, errors.New("scan failed") }
			},
			want: "scan failed"},
		{description: "NVML fails", env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			change: func(e *createEnv) {
				e.opts.QueryNVML = func(context.Context, string) (discover.Driver, error) {
					return discover.Driver{}, fmt.Errorf("%w: driver not loaded", discover.ErrNVML)
				}
			},
			want: "NVML query failed: driver not loaded", is: discover.ErrNVML},
		{description: "NVML hangs past discovery.timeout", env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			change: func(e *createEnv) {
				e.opts.Config.Discovery.Timeout = "10ms"
				e.opts.QueryNVML = func(ctx context.Context, _ string) (discover.Driver, error) {
					<-ctx.Done()
					return discover.Driver{}, ctx.Err()
				}
			},
			want: "GPU discovery timed out: NVML did not answer within 10ms", is: discover.ErrTimeout},
		{description: "no gpu-hook", env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			change: func(e *createEnv) { e.opts.Config.Hook.Path = "/nonexistent/gpu-hook" },
			want:   "hook.path /nonexistent/gpu-hook: stat /nonexistent/gpu-hook: no such file or directory"},
		{description: "a malformed requirement", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>>1"},
			want: `malformed requirement NVIDIA_REQUIRE_CUDA="cuda>>1"`},
		{description: "a CDI name without a resolver or hand-off", env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"},
			want: "CDI devices requested, but no CDI resolver is available", is: ErrNoCDI},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newCreateEnv(t)
			if tc.change != nil {
				tc.change(e)
			}
			inv, b := e.bundle(t, tc.env, false)
			_, before := readSpec(t, b)
			err := PrepareBundle(inv, e.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("error %v, want %q (is %v)", err, tc.want, tc.is)
			}
			if _, after := readSpec(t, b); !bytes.Equal(before, after) {
				t.Error("the spec changed although the create failed")
			}
		})
	}
}

// TestPrepareBundleHandsOffCDI: a create that names CDI devices goes to the hand-off (gpu-ctk)
// untouched, and the hand-off's error is the create's.
func TestPrepareBundleHandsOffCDI(t *testing.T) {
	e := newCreateEnv(t)
	called := 0
	e.opts.HandOff = func() error { called++; return ErrReported }
	inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,1"}, false)
	_, before := readSpec(t, b)
	if err := PrepareBundle(inv, e.opts); !errors.Is(err, ErrReported) || called != 1 {
		t.Errorf("error %v, hand-off called %d times", err, called)
	}
	if _, after := readSpec(t, b); !bytes.Equal(before, after) || e.queries != 0 {
		t.Errorf("gpu-runtime did work a hand-off does: spec changed %v, %d queries", !bytes.Equal(before, after), e.queries)
	}
}

// TestDecideAgreesWithApply: Decide plans without writing; Apply then makes exactly the
// edits Describe lists (one device node and rule per node line).
func TestDecideAgreesWithApply(t *testing.T) {
	e := newCreateEnv(t)
	_, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"}, false)
	p := filepath.Join(b, "config.json")
	raw, _ := os.ReadFile(p)
	in, err := Decide(p, raw, e.opts, e.opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(raw, after) {
		t.Fatal("Decide wrote the spec")
	}
	if _, err := in.Apply(); err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for _, l := range in.Plan.Edits.Describe() {
		if strings.HasPrefix(l, "device ") {
			nodes++
		}
	}
	if got := len(in.File.Spec.Linux.Devices); got != nodes || nodes != len(in.Plan.Edits.DeviceNodes) {
		t.Errorf("%d devices applied, %d described, %d planned", got, nodes, len(in.Plan.Edits.DeviceNodes))
	}
}

// TestPrepareBundleLDCacheAtCreate: the loader cache is updated at create, and the hook left
// out, where what gpu-runtime sees before the mounts is what the hook would see after them:
// the mounts engines add (/proc, /dev/shm, /etc/hosts…) do not stand in the way; a user
// namespace, a mount over what the update reads or writes, a spec without a usable root or
// hook.ldcache-at-create = false leave the hook in place, and the debug log says why.
func TestPrepareBundleLDCacheAtCreate(t *testing.T) {
	engineMounts := `[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev/shm","type":"tmpfs","source":"shm"},` +
		`{"destination":"/etc/hosts","type":"bind","source":"/etc/hosts","options":["rbind","ro"]},` +
		`{"destination":"/etc/resolv.conf","type":"bind","source":"/etc/resolv.conf","options":["rbind","ro"]}]`
	const left = "loader cache: left to the update-ldcache hook: "
	testCases := []struct {
		description string
		edit        func(s map[string]any)
		config      func(c *config.Config)
		line        string
	}{
		{description: "engine mounts", edit: func(s map[string]any) { s["mounts"] = json.RawMessage(engineMounts) },
			line: "loader cache: written at create, in-process (12 libraries); no update-ldcache hook"},
		{description: "hook.ldcache-at-create = false", config: func(c *config.Config) { c.Hook.LDCacheAtCreate = false },
			line: left + "hook.ldcache-at-create is false"},
		{description: "user namespace", edit: func(s map[string]any) {
			s["linux"].(map[string]any)["namespaces"] = json.RawMessage(`[{"type":"mount"},{"type":"user"}]`)
		}, line: left + "the container has a user namespace (files the hook writes are its root's)"},
		{description: "a volume at /usr", edit: func(s map[string]any) {
			s["mounts"] = json.RawMessage(`[{"destination":"/usr","type":"bind","source":"/tmp","options":["rbind"]}]`)
		}, line: left + `something is mounted at "/usr", and the update reads or writes "/usr/local/cuda/compat": the hook sees the mount`},
		{description: "a volume at /", edit: func(s map[string]any) {
			s["mounts"] = json.RawMessage(`[{"destination":"/","type":"bind","source":"/tmp","options":["rbind"]}]`)
		}, line: left + `something is mounted at "/", and the update reads or writes "/etc/ld.so.cache": the hook sees the mount`},
		{description: "no root", edit: func(s map[string]any) { delete(s, "root") }, line: left + "the spec has no root.path"},
		{description: "two roots", edit: func(s map[string]any) { s["ROOT"] = map[string]any{"path": "/"} },
			line: left + `root: ambiguous members: more than one member named "root" in any case`},
		{description: "a root that is not a directory", edit: func(s map[string]any) { s["root"] = map[string]any{"path": "/dev/null"} },
			line: left + "open container root /dev/null: open /dev/null: not a directory"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newCreateEnv(t)
			if tc.config != nil {
				tc.config(&e.opts.Config)
			}
			inv, b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, false)
			if tc.edit != nil {
				p := filepath.Join(b, "config.json")
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				var s map[string]any
				if err := json.Unmarshal(data, &s); err != nil {
					t.Fatal(err)
				}
				tc.edit(s)
				if data, err = json.Marshal(s); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := PrepareBundle(inv, e.opts); err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range e.logLines(t, "debug") {
				if msg, _ := l["msg"].(string); strings.HasPrefix(msg, "loader cache: ") {
					lines = append(lines, msg)
				}
			}
			if len(lines) != 1 || lines[0] != tc.line {
				t.Errorf("debug lines %q, want %q", lines, tc.line)
			}
			s, _ := readSpec(t, b)
			hook := s.Hooks != nil && len(s.Hooks.CreateContainer) == 1 && s.Hooks.CreateContainer[0].Args[1] == "update-ldcache"
			atCreate := strings.HasPrefix(tc.line, "loader cache: written at create")
			if hook == atCreate {
				t.Errorf("update-ldcache hook in the spec: %v, want %v (%+v)", hook, !atCreate, s.Hooks)
			}
			cache := filepath.Join(b, "rootfs/etc/ld.so.cache")
			if _, err := os.Stat(cache); (err == nil) != atCreate {
				t.Errorf("the root's /etc/ld.so.cache: %v, want it written: %v", err, atCreate)
			}
			if !atCreate {
				return
			}
			entries, err := ldcache.Load(cache)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(entries, func(en ldcache.Entry) bool {
				return en.Name == "libcuda.so.1" && en.Path == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
			}) {
				t.Errorf("no libcuda.so.1 in the cache written at create: %+v", entries)
			}
			if link, err := os.Readlink(filepath.Join(b, "rootfs/usr/lib/x86_64-linux-gnu/libcuda.so.1")); err != nil || link != "libcuda.so.550.54.15" {
				t.Errorf("SONAME link libcuda.so.1 -> %q (%v)", link, err)
			}
		})
	}
}

// TestAsksForGPU: what the broken-config fallback judges by (the default policy, device-plugin
// mounts accepted): a container that asks for nothing passes through, one that asks — or
// whose spec or request cannot be read — is kept to fail with the real error.
func TestAsksForGPU(t *testing.T) {
	e := newCreateEnv(t)
	for _, tc := range []struct {
		description string
		env         []string
		dockerHook  bool
		want        bool
	}{
		{"no GPU variable", nil, false, false},
		{"void", []string{"NVIDIA_VISIBLE_DEVICES=void"}, false, false},
		{"a GPU", []string{"NVIDIA_VISIBLE_DEVICES=0"}, false, true},
		{"docker's --gpus hook", nil, true, true},
		{"a request that does not parse", []string{"NVIDIA_VISIBLE_DEVICES=0,0"}, false, true},
	} {
		inv, _ := e.bundle(t, tc.env, tc.dockerHook)
		if got := AsksForGPU(inv, e.dir); got != tc.want {
			t.Errorf("%s: AsksForGPU = %v, want %v", tc.description, got, tc.want)
		}
	}
	inv, b := e.bundle(t, nil, false)
	if err := os.Remove(filepath.Join(b, "config.json")); err != nil {
		t.Fatal(err)
	}
	if !AsksForGPU(inv, e.dir) {
		t.Error("a bundle without a spec: AsksForGPU = false, want true")
	}
}

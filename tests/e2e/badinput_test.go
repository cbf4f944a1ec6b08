package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// badCase is one piece of bad input. Exactly one of the setup hooks usually applies.
type badCase struct {
	description string
	env         []string                                        // container env
	config      string                                          // extra config.toml lines (sections)
	rawConfig   *string                                         // replaces config.toml entirely
	spec        func(t *testing.T, e *env, bundle string)       // edits the bundle
	host        func(t *testing.T, e *env) (driver, dev string) // replaces the roots
	wantMsg     []string
}

// devRootWith makes a device root holding the fake host's nodes, with name replaced by
// what make creates (nil = leave it out).
func devRootWith(t *testing.T, e *env, name string, make func(path string) error) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range e.host.DeviceNodes() {
		p := filepath.Join(root, n.RelPath)
		if filepath.Base(p) == name {
			if make != nil {
				if err := make(p); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n.Major, n.Minor))); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// allowTestKind lets gpu-runtime resolve names of the kind gpu-runtime.test/none, which no
// spec defines; testKindRefused is what it says of one without.
const (
	allowTestKind   = "[cdi]\nallowed-kinds = [\"nvidia.com/gpu\", \"gpu-runtime.test/none\"]\n"
	testKindRefused = `CDI device kind not allowed: "gpu-runtime.test/none=0" (kind "gpu-runtime.test/none"): gpu-runtime resolves CDI devices of kinds nvidia.com/gpu, k8s.device-plugin.nvidia.com/gpu only; to allow a kind, add it to cdi.allowed-kinds in the gpu-runtime config`
)

// maxMessage bounds what a create that fails says, whatever the container sent: messages quote
// a few values of at most 256 bytes each (internal/quote).
const maxMessage = 16 << 10

func TestBadInput(t *testing.T) {
	str := func(s string) *string { return &s }
	gpu0 := []string{"NVIDIA_VISIBLE_DEVICES=0"}
	testCases := []badCase{
		{description: "malformed config.json", env: gpu0, spec: func(t *testing.T, _ *env, b string) {
			writeFile(t, filepath.Join(b, "config.json"), `{"ociVersion": "1.0.2", "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"`)
		}, wantMsg: []string{"decode spec " + "", "config.json: unexpected end of JSON input"}},
		{description: "config.json with a field of the wrong type", env: gpu0, spec: func(t *testing.T, _ *env, b string) {
			writeFile(t, filepath.Join(b, "config.json"), `{"ociVersion": "1.0.2", "process": {"env": "NVIDIA_VISIBLE_DEVICES=0"}}`)
		}, wantMsg: []string{"config.json: process.env: json: cannot unmarshal string into Go value of type []string"}},
		{description: "garbage device token", env: []string{"NVIDIA_VISIBLE_DEVICES=abc"}, wantMsg: []string{`unknown device "abc" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-`}},
		{description: "negative index", env: []string{"NVIDIA_VISIBLE_DEVICES=-1"}, wantMsg: []string{`unknown device "-1"`}},
		{description: "huge index", env: []string{"NVIDIA_VISIBLE_DEVICES=99999999999999999999999"}, wantMsg: []string{`unknown device "99999999999999999999999"`}},
		{description: "control characters", env: []string{"NVIDIA_VISIBLE_DEVICES=0\x01\x7f"}, wantMsg: []string{`unknown device "0\x01\x7f"`}},
		{description: "duplicate", env: []string{"NVIDIA_VISIBLE_DEVICES=1, 1"}, wantMsg: []string{`device "1" is listed twice in NVIDIA_VISIBLE_DEVICES="1, 1"`}},
		{description: "index and UUID of one GPU", env: nil, spec: func(t *testing.T, e *env, b string) {
			setEnv(t, b, "NVIDIA_VISIBLE_DEVICES=0,"+e.host.Options.GPUs[0].UUID)
		}, wantMsg: []string{`"0" and "GPU-`, `in NVIDIA_VISIBLE_DEVICES both name GPU 0`}},
		{description: "MIG device on a host without MIG", env: []string{"NVIDIA_VISIBLE_DEVICES=0:1"}, wantMsg: []string{`unknown device: MIG device "0:1" in NVIDIA_VISIBLE_DEVICES: this host has no MIG devices`}},
		{description: "MIG UUID", env: []string{"NVIDIA_VISIBLE_DEVICES=MIG-8f3a"}, wantMsg: []string{`MIG device "MIG-8f3a"`}},
		{description: "CDI name in the env var, no spec offers it", env: []string{"NVIDIA_VISIBLE_DEVICES=gpu-runtime.test/none=0"}, config: allowTestKind,
			wantMsg: []string{`unresolvable CDI devices "gpu-runtime.test/none=0": the CDI specs in /etc/cdi, /var/run/cdi offer `}},
		{description: "CDI name of a kind not allowed in the env var", env: []string{"NVIDIA_VISIBLE_DEVICES=gpu-runtime.test/none=0"}, wantMsg: []string{testKindRefused}},
		{description: "capability with wrong separator", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute;utility"},
			wantMsg: []string{`unknown driver capability "compute;utility"`, "allowed are all, compute, compat32, display, graphics, ngx, utility, video"}},
		{description: "capability in upper case", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=COMPUTE"}, wantMsg: []string{`unknown driver capability "COMPUTE"`}},
		{description: "config.toml syntax error", env: gpu0, rawConfig: str("[driver]\nroot = /x\n"), wantMsg: []string{"parse config ", "config.toml: line 2, column 8"}},
		{description: "config.toml bad value", env: gpu0, config: "", rawConfig: str("[runtime]\nlog-level = \"loud\"\n"),
			wantMsg: []string{`config.toml: invalid runtime.log-level "loud": want one of panic, fatal, error, warn, warning, info, debug, trace`}},
		{description: "config.toml wrong type", env: gpu0, rawConfig: str("[runtime]\nruntimes = \"runc\"\n"),
			wantMsg: []string{"runtime.runtimes must be an array of strings, not a string"}},
		{description: "missing low-level runtime", env: gpu0, config: "", rawConfig: nil, spec: nil, host: nil,
			wantMsg: []string{"low-level runtime not found: tried [/nonexistent/runc"}},
		{description: "non-executable low-level runtime", env: gpu0, wantMsg: []string{"runtime.runtimes ", ": not an executable file"}},
		{description: "driver root without NVML", env: gpu0, host: func(t *testing.T, e *env) (string, string) { return t.TempDir(), e.host.DevRoot },
			wantMsg: []string{"NVML library not found: load libnvidia-ml.so.1 from driver root", "set driver.root in the gpu-runtime config"}},
		{description: "NVML that is not a library", env: gpu0, host: func(t *testing.T, e *env) (string, string) {
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"), "#!/bin/sh\n")
			return root, e.host.DevRoot
		}, wantMsg: []string{"NVML library not found: load ", "libnvidia-ml.so.1: ", "set driver.root"}},
		{description: "GPU device node is a regular file", env: gpu0, host: func(t *testing.T, e *env) (string, string) {
			return e.host.DriverRoot, devRootWith(t, e, "nvidia0", func(p string) error { return os.WriteFile(p, nil, 0o666) })
		}, wantMsg: []string{"bad device node: ", "/dev/nvidia0 is not a device node (mode 0100000)"}},
		{description: "GPU device node is a symlink", env: gpu0, host: func(t *testing.T, e *env) (string, string) {
			return e.host.DriverRoot, devRootWith(t, e, "nvidia0", func(p string) error { return os.Symlink("/dev/null", p) })
		}, wantMsg: []string{"bad device node: ", "/dev/nvidia0 is a symlink, not a device node"}},
		{description: "control node missing", env: gpu0, host: func(t *testing.T, e *env) (string, string) {
			return e.host.DriverRoot, devRootWith(t, e, "nvidiactl", nil)
		}, wantMsg: []string{"missing device node: /dev/nvidiactl not found under device root", "check that the NVIDIA driver is loaded, or set driver.dev-root"}},
		{description: "hook path that does not exist", env: gpu0, wantMsg: []string{"hook.path /nonexistent/gpu-hook: stat /nonexistent/gpu-hook: no such file or directory"}},
		{description: "CDI device by volume mount", env: gpu0, config: "[request]\naccept-device-list-as-volume-mounts = true\n" + allowTestKind,
			spec: func(t *testing.T, _ *env, b string) {
				addMountRaw(t, b, "/dev/null", "/var/run/nvidia-container-devices/cdi/gpu-runtime.test/none=0")
			}, wantMsg: []string{`unresolvable CDI devices "gpu-runtime.test/none=0": the CDI specs in /etc/cdi, /var/run/cdi offer `}},
		{description: "CDI device of a kind not allowed by volume mount", env: gpu0, config: "[request]\naccept-device-list-as-volume-mounts = true\n",
			spec: func(t *testing.T, _ *env, b string) {
				addMountRaw(t, b, "/dev/null", "/var/run/nvidia-container-devices/cdi/gpu-runtime.test/none=0")
			}, wantMsg: []string{testKindRefused}},
		{description: "crun --config", env: gpu0, wantMsg: []string{`unsupported runtime arguments: create --config "other.json": gpu-runtime only reads <bundle>/config.json`}},
		// Round two (issue: security and reliability).
		{description: "none with a device", env: []string{"NVIDIA_VISIBLE_DEVICES=0,none"},
			wantMsg: []string{`NVIDIA_VISIBLE_DEVICES="0,none": "none" cannot be combined with other devices (all, none and void each stand alone)`}},
		{description: "all with void", env: []string{"NVIDIA_VISIBLE_DEVICES=all,void"},
			wantMsg: []string{`"all" cannot be combined with other devices`}},
		{description: "100,000 unknown tokens: bounded message", env: []string{"NVIDIA_VISIBLE_DEVICES=" + manyTokens(100000)},
			wantMsg: []string{`unknown device "t0", "t1", "t2", "t3", "t4" and 99995 more in NVIDIA_VISIBLE_DEVICES`}},
		// Issue 23: every value a message quotes is cut (internal/quote); no message is long.
		{description: "a 2 MB NVIDIA_IMEX_CHANNELS: bounded message", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=0," + strings.Repeat("x", 2<<20)},
			wantMsg: []string{`IMEX channel "` + strings.Repeat("x", 256) + `"… (2097152 bytes) in NVIDIA_IMEX_CHANNELS="0,` + strings.Repeat("x", 254) + `"… (2097154 bytes): want a number from 0 to 2047, or all`}},
		{description: "a 1 MB NVIDIA_MIG_MONITOR_DEVICES: bounded message", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=" + strings.Repeat("0", 1<<20)},
			wantMsg: []string{`NVIDIA_MIG_MONITOR_DEVICES="` + strings.Repeat("0", 256) + `"… (1048576 bytes): only "all" is supported`}},
		{description: "a 1 MB CDI annotation: bounded message", env: gpu0, spec: func(t *testing.T, _ *env, b string) {
			editSpec(t, b, func(s map[string]any) {
				s["annotations"] = map[string]any{"cdi.k8s.io/big": strings.Repeat("y", 1<<20)}
			})
		}, wantMsg: []string{`CDI annotation "cdi.k8s.io/big": "` + strings.Repeat("y", 256) + `"… (1048576 bytes) is not a CDI device name (vendor.com/class=name)`}},
		{description: "case-variant key in a mount", env: gpu0, spec: func(t *testing.T, _ *env, b string) {
			data, err := os.ReadFile(filepath.Join(b, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(b, "config.json"), strings.Replace(string(data), `"destination": "/proc",`, `"destination": "/proc", "Destination": "/etc",`, 1))
		}, wantMsg: []string{`mounts[0]: ambiguous members: "destination" and "Destination" name the same field`}},
		{description: "duplicate key in hooks", env: gpu0, spec: func(t *testing.T, _ *env, b string) {
			data, err := os.ReadFile(filepath.Join(b, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(b, "config.json"), strings.Replace(string(data), `"mounts": [`, `"hooks": {"prestart": [], "prestart": [{"path": "/bin/true"}]}, "mounts": [`, 1))
		}, wantMsg: []string{`hooks: ambiguous members: "prestart" appears twice`}},
		{description: "GPU_RUNTIME_CONFIG names a FIFO", env: gpu0, wantMsg: []string{"read config ", "fifo.toml is a FIFO, not a regular file"}},
		{description: "GPU_RUNTIME_CONFIG names /dev/zero", env: gpu0, wantMsg: []string{"read config /dev/zero: /dev/zero is a character device, not a regular file"}},
	}
	// Per-case setup not expressible as data.
	special := map[string]func(t *testing.T, e *env) []string{
		"missing low-level runtime": func(t *testing.T, e *env) []string {
			e.writeConfig(t, "")
			replaceInFile(t, e.config, `runtimes = ["runc"]`, `runtimes = ["/nonexistent/runc"]`)
			return nil
		},
		"non-executable low-level runtime": func(t *testing.T, e *env) []string {
			p := filepath.Join(t.TempDir(), "runc")
			writeFile(t, p, "not executable")
			e.writeConfig(t, "")
			replaceInFile(t, e.config, `runtimes = ["runc"]`, fmt.Sprintf("runtimes = [%q]", p))
			return nil
		},
		"hook path that does not exist": func(t *testing.T, e *env) []string {
			e.writeConfig(t, "")
			replaceInFile(t, e.config, filepath.Join(binDir, "gpu-hook"), "/nonexistent/gpu-hook")
			return nil
		},
		"crun --config": func(t *testing.T, e *env) []string { return []string{"--config", "other.json"} },
		"GPU_RUNTIME_CONFIG names a FIFO": func(t *testing.T, e *env) []string {
			e.config = filepath.Join(t.TempDir(), "fifo.toml")
			if err := syscall.Mkfifo(e.config, 0o644); err != nil {
				t.Fatal(err)
			}
			return nil
		},
		"GPU_RUNTIME_CONFIG names /dev/zero": func(t *testing.T, e *env) []string { e.config = "/dev/zero"; return nil },
	}
	if len(testCases) < 25 {
		t.Fatalf("the issue asks for at least 25 bad inputs, have %d", len(testCases))
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			if tc.host != nil {
				driver, dev := tc.host(t, e)
				c := *e.host
				c.DriverRoot, c.DevRoot = driver, dev
				e.host = &c
			}
			e.writeConfig(t, tc.config)
			if tc.rawConfig != nil {
				writeFile(t, e.config, *tc.rawConfig)
			}
			var createArgs []string
			if f := special[tc.description]; f != nil {
				createArgs = f(t, e)
			}

			b := e.bundle(t, tc.env, "echo should-not-run")
			if tc.spec != nil {
				tc.spec(t, e, b)
			}
			cfgPath := filepath.Join(b, "config.json")
			before, _ := os.ReadFile(cfgPath)
			logPath := filepath.Join(t.TempDir(), "log.json")
			id := containerID(t)
			args := append([]string{"--log", logPath, "--log-format", "json", "create", "--bundle", b}, createArgs...)
			r := e.runtime(t, nil, append(args, id)...)
			defer e.runtime(t, nil, "delete", "--force", id)
			if r.code == 0 {
				t.Fatalf("create succeeded; stderr:\n%s", r.stderr)
			}
			msg := lastJSONError(t, logPath)
			if len(msg) > maxMessage || len(r.stderr) > maxMessage {
				t.Errorf("a message of %d bytes (stderr %d bytes): %.300q…", len(msg), len(r.stderr), msg)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(r.stderr, m) {
					t.Errorf("stderr lacks %q:\n%s", m, r.stderr)
				}
				if !strings.Contains(msg, m) {
					t.Errorf("--log error lacks %q: %q", m, msg)
				}
			}
			wantSpecUnchanged(t, b, before)
		})
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func replaceInFile(t *testing.T, p, old, new string) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil || !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s lacks %q (%v)", p, old, err)
	}
	writeFile(t, p, strings.Replace(string(data), old, new, 1))
}

func setEnv(t *testing.T, bundle string, kv string) {
	t.Helper()
	editSpec(t, bundle, func(s map[string]any) {
		p := s["process"].(map[string]any)
		p["env"] = append(p["env"].([]any), kv)
	})
}

func addMountRaw(t *testing.T, bundle, src, dst string) {
	t.Helper()
	editSpec(t, bundle, func(s map[string]any) {
		s["mounts"] = append(s["mounts"].([]any), map[string]any{"source": src, "destination": dst, "type": "bind", "options": []any{"bind"}})
	})
}

func manyTokens(n int) string {
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = "t" + strconv.Itoa(i)
	}
	return strings.Join(tokens, ",")
}

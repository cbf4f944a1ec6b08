package ctk

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeHost has no gpu-runtime next to the executable, nothing on PATH, and containerd 1.7.
func fakeHost(dir string) host {
	return host{
		executable: func() (string, error) { return filepath.Join(dir, "bin", "gpu-ctk"), nil },
		lookPath:   func(string) (string, error) { return "", errors.New("not found") },
		containerdVersion: func() (string, error) {
			return "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", nil
		},
		now: func() time.Time { return time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC) },
	}
}

func TestTopLevel(t *testing.T) {
	testCases := []struct {
		description string
		args        []string
		wantCode    int
		wantStdout  string
		wantErr     string
	}{
		{description: "no arguments", args: nil, wantCode: 2, wantErr: "no command given"},
		{description: "version", args: []string{"--version"}, wantCode: 0, wantStdout: "gpu-ctk version "},
		{description: "help lists runtime", args: []string{"--help"}, wantCode: 0, wantStdout: "runtime      register gpu-runtime"},
		{description: "unknown command", args: []string{"frobnicate"}, wantCode: 2, wantErr: `unknown command "frobnicate"`},
		{description: "runtime without a subcommand", args: []string{"runtime"}, wantCode: 2, wantErr: "needs configure or unconfigure"},
		{description: "cdi inject without its separator", args: []string{"cdi", "inject", "create", "c1"}, wantCode: 2,
			wantErr: "usage: cdi inject is run by gpu-runtime: gpu-ctk cdi inject -- <runtime arguments>"},
		{description: "cdi inject of a command that writes no spec", args: []string{"cdi", "inject", "--", "start", "c1"}, wantCode: 2,
			wantErr: `usage: cdi inject: not a create, run or restore command line: ["start" "c1"]`},
		{description: "runtime help", args: []string{"runtime", "--help"}, wantCode: 0, wantStdout: "-set-as-default"},
		{description: "configure help", args: []string{"runtime", "configure", "-h"}, wantCode: 0, wantStdout: "gpu-ctk runtime unconfigure --runtime="},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Run(tc.args, &stdout, &stderr)
			if code := ExitCode(err); code != tc.wantCode {
				t.Errorf("exit code %d (err %v), want %d", code, err, tc.wantCode)
			}
			if !strings.Contains(stdout.String(), tc.wantStdout) {
				t.Errorf("stdout %q lacks %q", stdout.String(), tc.wantStdout)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRuntimeCommand(t *testing.T) {
	testCases := []struct {
		description string
		args        []string
		files       map[string]string // written under the test dir before running
		setup       func(t *testing.T, dir string)
		containerd2 bool // the host's containerd is 2.x
		wantCode    int
		wantStdout  []string
		wantStderr  []string
		wantErr     []string
		wantFiles   map[string]string // file -> a substring it must hold; "" : must not exist
	}{
		{
			description: "missing --runtime",
			args:        []string{"configure"},
			wantCode:    2,
			wantErr:     []string{"--runtime is required"},
		},
		{
			description: "unknown engine",
			args:        []string{"configure", "--runtime=lxd"},
			wantCode:    2,
			wantErr:     []string{`unknown container engine "lxd"`},
		},
		{
			description: "podman: what it needs, nothing written",
			args:        []string{"configure", "--runtime=podman", "--runtime-path=/opt/gpu/gpu-runtime"},
			wantStdout: []string{"podman: nothing written: podman takes its runtime per container or from containers.conf, and needs no restart.\n",
				"  per container:  podman run --runtime /opt/gpu/gpu-runtime -e NVIDIA_VISIBLE_DEVICES=0 IMAGE\n",
				"    [engine]\n    runtime = \"gpu\"\n    [engine.runtimes]\n    gpu = [\"/opt/gpu/gpu-runtime\"]\n",
				"    podman run --device nvidia.com/gpu=0 IMAGE\n"},
		},
		{
			description: "podman unconfigure",
			args:        []string{"unconfigure", "--runtime=podman"},
			wantStdout:  []string{"podman: nothing to unconfigure: gpu-ctk never edits podman's configuration"},
		},
		{
			description: "unknown flag",
			args:        []string{"configure", "--runtime=docker", "--colour"},
			wantCode:    2,
			wantErr:     []string{"flag provided but not defined: -colour"},
		},
		{
			description: "positional argument",
			args:        []string{"configure", "--runtime=docker", "extra"},
			wantCode:    2,
			wantErr:     []string{`unexpected argument "extra"`},
		},
		{
			description: "--drop-in is containerd's",
			args:        []string{"configure", "--runtime=crio", "--drop-in=/x"},
			wantCode:    2,
			wantErr:     []string{"--drop-in applies to containerd"},
		},
		{
			description: "--set-as-default is configure's",
			args:        []string{"unconfigure", "--runtime=docker", "--set-as-default"},
			wantCode:    2,
			wantErr:     []string{"--set-as-default applies to configure"},
		},
		{
			description: "docker dry run writes nothing",
			args:        []string{"configure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-path=/opt/gpu/gpu-runtime", "--dry-run"},
			wantStdout:  []string{"--- DIR/daemon.json: would be written (mode 0644)\n{\n", `"path": "/opt/gpu/gpu-runtime"`},
			wantStderr:  []string{"dry run: nothing written", "warning: stat /opt/gpu/gpu-runtime"},
			wantFiles:   map[string]string{"daemon.json": ""},
		},
		{
			description: "docker configure",
			args:        []string{"configure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-path=/opt/gpu/gpu-runtime", "--set-as-default"},
			files:       map[string]string{"daemon.json": `{"default-runtime": "runc"}`},
			wantStdout: []string{
				`configured docker: runtime "gpu" -> /opt/gpu/gpu-runtime`,
				"wrote DIR/daemon.json (previous content: DIR/daemon.json.bak.20250304T050607Z)",
				`note: docker default-runtime was "runc"; now "gpu"`,
				"next: restart dockerd: systemctl restart docker",
				"nvidia-container-runtime-hook is not on PATH",
				"link it to gpu-hook with: ln -s gpu-hook /opt/gpu/nvidia-container-runtime-hook, then restart dockerd",
			},
			wantFiles: map[string]string{
				"daemon.json":                      `"default-runtime": "gpu"`,
				"daemon.json.bak.20250304T050607Z": `"default-runtime": "runc"`,
			},
		},
		{
			description: "docker already configured",
			args:        []string{"configure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-path=/opt/gpu/gpu-runtime"},
			files:       map[string]string{"daemon.json": `{"runtimes": {"gpu": {"path": "/opt/gpu/gpu-runtime"}}}`},
			wantStdout:  []string{`docker: runtime "gpu" already configured in DIR/daemon.json; nothing written`},
			wantFiles:   map[string]string{"daemon.json.bak.20250304T050607Z": ""},
		},
		{
			description: "docker malformed",
			args:        []string{"configure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-path=/opt/gpu/gpu-runtime"},
			files:       map[string]string{"daemon.json": "{\n\"debug\": yes\n}"},
			wantCode:    1,
			wantErr:     []string{"configure docker: parse DIR/daemon.json at line 2, column 10"},
			wantFiles:   map[string]string{"daemon.json": `"debug": yes`},
		},
		{
			description: "containerd 1.x, no config: a version 2 main config and a drop-in",
			args:        []string{"configure", "--runtime=containerd", "--config=DIR/config.toml", "--drop-in=DIR/conf.d/99-gpu-runtime.toml"},
			wantStdout:  []string{"wrote DIR/conf.d/99-gpu-runtime.toml\n", "wrote DIR/config.toml\n", "systemctl restart containerd", `handler "gpu"`},
			wantFiles: map[string]string{
				"config.toml":                "version = 2\nimports = [\"DIR/conf.d/99-gpu-runtime.toml\"]\n",
				"conf.d/99-gpu-runtime.toml": "BinaryName = '/usr/local/bin/gpu-runtime'",
			},
		},
		{
			description: "containerd 2.x, no config: a version 3 main config",
			args:        []string{"configure", "--runtime=containerd", "--config=DIR/config.toml", "--drop-in=DIR/conf.d/99-gpu-runtime.toml"},
			containerd2: true,
			wantFiles: map[string]string{
				"config.toml":                "version = 3\nimports = [\"DIR/conf.d/99-gpu-runtime.toml\"]\n",
				"conf.d/99-gpu-runtime.toml": "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpu]",
			},
		},
		{
			description: "the runtime next to gpu-ctk is found",
			args:        []string{"configure", "--runtime=crio", "--config=DIR/crio.conf.d/99-gpu-runtime.conf", "--runtime-name=nvidia-gpu"},
			files:       map[string]string{"bin/gpu-runtime": "#!/bin/sh\n"},
			wantStdout:  []string{`configured crio: runtime "nvidia-gpu" -> DIR/bin/gpu-runtime`, "systemctl restart crio"},
			wantFiles:   map[string]string{"crio.conf.d/99-gpu-runtime.conf": "[crio.runtime.runtimes.nvidia-gpu]"},
		},
		{
			description: "crio on a host without cri-o: refused, nothing created",
			args:        []string{"configure", "--runtime=crio", "--config=DIR/etc/crio/crio.conf.d/99-gpu-runtime.conf"},
			wantCode:    1,
			wantErr: []string{"configure crio: container engine not installed: DIR/etc/crio does not exist, so cri-o is not installed here and nothing was written: " +
				"install cri-o first (or, to write the drop-in for a cri-o installed later, create DIR/etc/crio/crio.conf.d and run gpu-ctk again)"},
		},
		{
			description: "docker: the engine's own runtime name is refused",
			args:        []string{"configure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-name=runc"},
			wantCode:    1,
			wantErr:     []string{`configure docker: invalid options: runtime name "runc" is docker's own runtime: choose another name (gpu, or nvidia for what was NVIDIA's runtime), and --set-as-default to make it the default`},
		},
		{
			description: "docker: unconfigure gives NVIDIA's default back and says so",
			args:        []string{"unconfigure", "--runtime=docker", "--config=DIR/daemon.json"},
			files: map[string]string{
				"daemon.json":                      "{\"default-runtime\": \"gpu\", \"runtimes\": {\"gpu\": {\"path\": \"/x/gpu-runtime\"}}, \"debug\": true}\n",
				"daemon.json.bak.20250101T000000Z": "{\"default-runtime\": \"nvidia\"}\n",
			},
			wantStdout: []string{`unconfigured docker: runtime "gpu" removed`, "  wrote DIR/daemon.json\n", `note: docker default-runtime is again "nvidia", as before configure`},
			wantFiles:  map[string]string{"daemon.json": "{\n    \"default-runtime\": \"nvidia\",\n    \"debug\": true\n}\n", "daemon.json.bak.20250101T000000Z": ""},
		},
		{
			description: "docker: unconfigure without a name removes nvidia of ours, NVIDIA's entry and default back",
			args:        []string{"unconfigure", "--runtime=docker", "--config=DIR/daemon.json"},
			files: map[string]string{
				"daemon.json":                      "{\"default-runtime\": \"nvidia\", \"runtimes\": {\"nvidia\": {\"path\": \"/usr/bin/gpu-runtime\"}}}\n",
				"daemon.json.bak.20250101T000000Z": "{\"default-runtime\": \"nvidia\", \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}}}\n",
			},
			wantStdout: []string{`unconfigured docker: runtime "nvidia" removed`,
				`note: docker runtime "nvidia" is again what it was before configure: {"path":"nvidia-container-runtime"}`},
			wantFiles: map[string]string{"daemon.json": "\"nvidia\": {\"path\": \"nvidia-container-runtime\"}", "daemon.json.bak.20250101T000000Z": ""},
		},
		{
			description: "docker: unconfigure --runtime-name nvidia leaves NVIDIA's own runtime and says so",
			args:        []string{"unconfigure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-name=nvidia"},
			files:       map[string]string{"daemon.json": "{\"default-runtime\": \"nvidia\", \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}}}\n"},
			wantStdout: []string{`docker: runtime "nvidia" not configured in DIR/daemon.json; nothing written`,
				`note: docker runtime "nvidia" is not gpu-runtime's (its path is "nvidia-container-runtime"); left as it is`},
			wantFiles: map[string]string{"daemon.json": "{\"default-runtime\": \"nvidia\", \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}}}\n"},
		},
		{
			description: "docker: unconfigure without a name removes two runtimes of ours",
			args:        []string{"unconfigure", "--runtime=docker", "--config=DIR/daemon.json"},
			files:       map[string]string{"daemon.json": "{\"runtimes\": {\"gpu\": {\"path\": \"/usr/bin/gpu-runtime\"}, \"nvidia\": {\"path\": \"/usr/local/bin/gpu-runtime\"}}, \"debug\": true}\n"},
			wantStdout:  []string{`unconfigured docker: runtimes "gpu", "nvidia" removed`},
			wantFiles:   map[string]string{"daemon.json": "{\n    \"debug\": true\n}\n"},
		},
		{
			description: "containerd: unconfigure without a name removes a drop-in registering nvidia",
			args:        []string{"unconfigure", "--runtime=containerd", "--config=DIR/config.toml", "--drop-in=DIR/conf.d/99-gpu-runtime.toml"},
			files: map[string]string{
				"config.toml": "version = 2\nimports = [\"DIR/conf.d/99-gpu-runtime.toml\"]\n",
				"conf.d/99-gpu-runtime.toml": "# Generated by gpu-ctk runtime configure\nversion = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n" +
					"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/gpu-runtime\"\n",
			},
			wantStdout: []string{`unconfigured containerd: runtime "nvidia" removed`, "  removed DIR/conf.d/99-gpu-runtime.toml\n"},
			wantFiles:  map[string]string{"conf.d/99-gpu-runtime.toml": ""},
		},
		{
			description: "containerd v1 config: a clear error, exit 1",
			args:        []string{"configure", "--runtime=containerd", "--config=DIR/config.toml", "--drop-in=DIR/conf.d/99-gpu-runtime.toml"},
			files:       map[string]string{"config.toml": "disabled_plugins = [\"cri\"]\n"},
			wantCode:    1,
			wantErr:     []string{"configure containerd: DIR/config.toml: unsupported containerd config version", "--runtime=docker"},
			wantFiles:   map[string]string{"conf.d/99-gpu-runtime.toml": ""},
		},
		{
			description: "docker: daemon.json a link to nothing is refused; nothing is created where it points",
			args:        []string{"configure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-path=/opt/gpu/gpu-runtime"},
			setup: func(t *testing.T, dir string) {
				if err := os.MkdirAll(filepath.Join(dir, "elsewhere"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(dir, "elsewhere", "daemon.json"), filepath.Join(dir, "daemon.json")); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: 1,
			wantErr: []string{"configure docker: invalid options: DIR/daemon.json is a symbolic link to DIR/elsewhere/daemon.json, which does not exist: " +
				"gpu-ctk does not create a file where a link points; create that file (an empty one will do), point the link at the engine's configuration file, or remove the link, then run gpu-ctk again"},
			wantFiles: map[string]string{"elsewhere/daemon.json": ""},
		},
		{
			description: "docker: daemon.json a FIFO is refused without blocking",
			args:        []string{"configure", "--runtime=docker", "--config=DIR/daemon.json", "--runtime-path=/opt/gpu/gpu-runtime"},
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "daemon.json"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: 1,
			wantErr:  []string{"configure docker: invalid options: DIR/daemon.json is a FIFO, not a regular file: gpu-ctk edits regular files only; remove it, or name the engine's configuration file"},
		},
		{
			description: "containerd: a FIFO among the imports is skipped with a warning",
			args:        []string{"configure", "--runtime=containerd", "--config=DIR/config.toml", "--drop-in=DIR/conf.d/99-gpu-runtime.toml"},
			files:       map[string]string{"config.toml": "version = 2\nimports = [\"DIR/extra/*.toml\"]\n", "extra/a.toml": "version = 2\n"},
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "extra", "b.toml"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantStdout: []string{"wrote DIR/conf.d/99-gpu-runtime.toml\n", "wrote DIR/config.toml"},
			wantStderr: []string{"warning: containerd import DIR/extra/b.toml is a FIFO, not a regular file: skipped; containerd cannot load it either: remove it, or take it out of imports\n"},
		},
		{
			description: "unconfigure when not configured",
			args:        []string{"unconfigure", "--runtime=crio", "--config=DIR/99-gpu-runtime.conf"},
			wantStdout:  []string{`crio: runtime "gpu" not configured in DIR/99-gpu-runtime.conf; nothing written`},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			subst := func(s string) string { return strings.ReplaceAll(s, "DIR", dir) }
			for name, content := range tc.files {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(subst(content)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = subst(a)
			}
			var stdout, stderr bytes.Buffer
			h := fakeHost(dir)
			if tc.containerd2 {
				h.containerdVersion = func() (string, error) {
					return "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n", nil
				}
			}
			err := runtimeCommand(args, &stdout, &stderr, h)
			if code := ExitCode(err); code != tc.wantCode {
				t.Errorf("exit code %d (err %v), want %d", code, err, tc.wantCode)
			}
			for _, s := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), subst(s)) {
					t.Errorf("error %v lacks %q", err, subst(s))
				}
			}
			for _, s := range tc.wantStdout {
				if !strings.Contains(stdout.String(), subst(s)) {
					t.Errorf("stdout lacks %q:\n%s", subst(s), stdout.String())
				}
			}
			for _, s := range tc.wantStderr {
				if !strings.Contains(stderr.String(), subst(s)) {
					t.Errorf("stderr lacks %q:\n%s", subst(s), stderr.String())
				}
			}
			for name, want := range tc.wantFiles {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if want == "" {
					if !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s exists (err %v)", name, err)
					}
					continue
				}
				if err != nil || !strings.Contains(string(got), subst(want)) {
					t.Errorf("%s (err %v) lacks %q:\n%s", name, err, subst(want), got)
				}
			}
		})
	}
}

func TestRuntimePath(t *testing.T) {
	dir := t.TempDir()
	next := filepath.Join(dir, "bin", "gpu-runtime")
	if err := os.MkdirAll(filepath.Dir(next), 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := filepath.Join(dir, "path", "gpu-runtime")
	testCases := []struct {
		description string
		flag        string
		nextExists  bool
		onPath      bool
		want        string
	}{
		{description: "the flag wins", flag: "/opt/x/gpu-runtime", nextExists: true, want: "/opt/x/gpu-runtime"},
		{description: "next to gpu-ctk", nextExists: true, onPath: true, want: next},
		{description: "on PATH", onPath: true, want: onPath},
		{description: "the default", want: "/usr/local/bin/gpu-runtime"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_ = os.Remove(next)
			if tc.nextExists {
				if err := os.WriteFile(next, nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			h := fakeHost(dir)
			if tc.onPath {
				h.lookPath = func(string) (string, error) { return onPath, nil }
			}
			got, err := runtimePath(tc.flag, h)
			if err != nil || got != tc.want {
				t.Errorf("got %q (err %v), want %q", got, err, tc.want)
			}
		})
	}
	t.Run("a relative flag becomes absolute", func(t *testing.T) {
		got, err := runtimePath("bin/gpu-runtime", fakeHost(dir))
		if err != nil || !filepath.IsAbs(got) {
			t.Errorf("got %q (err %v)", got, err)
		}
	})
}

// TestDockerHookNote: what configure --runtime=docker says about --gpus for each kind of
// nvidia-container-runtime-hook on PATH: none, gpu-runtime's link, or another (NVIDIA's).
func TestDockerHookNote(t *testing.T) {
	dir := t.TempDir()
	gpuHook := filepath.Join(dir, "bin", "gpu-hook")
	ours := filepath.Join(dir, "bin", "nvidia-container-runtime-hook")
	nvidia := filepath.Join(dir, "usr", "bin", "nvidia-container-runtime-hook")
	for _, f := range []string{gpuHook, nvidia} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("gpu-hook", ours); err != nil {
		t.Fatal(err)
	}
	const always = "note: docker --gpus works only when an executable named nvidia-container-runtime-hook is on dockerd's PATH when dockerd starts; gpu-runtime drops that hook from the spec and injects the GPUs itself\n"
	testCases := []struct {
		description string
		onPath      string // "" for none
		want        string
	}{
		{
			description: "none on PATH: how to link it",
			want: always + "warning: nvidia-container-runtime-hook is not on PATH: docker run --gpus fails with 'could not select device driver \"\" with capabilities: [[gpu]]'; " +
				"link it to gpu-hook with: ln -s gpu-hook " + filepath.Join(dir, "bin", "nvidia-container-runtime-hook") + ", then restart dockerd\n",
		},
		{description: "gpu-runtime's link: nothing more to say", onPath: ours, want: always},
		{
			description: "another executable (NVIDIA's): left alone, and how the two work together",
			onPath:      nvidia,
			want: always + "note: " + nvidia + " is not gpu-hook (NVIDIA Container Toolkit's?); leave it: dockerd accepts --gpus with it, " +
				"containers of the gpu runtime get their GPUs from gpu-runtime, and containers of runc keep NVIDIA's hook\n",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := fakeHost(dir)
			if tc.onPath != "" {
				h.lookPath = func(string) (string, error) { return tc.onPath, nil }
			}
			var out bytes.Buffer
			dockerHookNote(&out, filepath.Join(dir, "bin", "gpu-runtime"), h)
			if out.String() != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", out.String(), tc.want)
			}
		})
	}
}

// TestUnconfigureRestores: unconfigure after configure says that daemon.json is back as it was,
// from which backup, or that it was removed because configure created it.
func TestUnconfigureRestores(t *testing.T) {
	testCases := []struct {
		description string
		before      string // daemon.json before configure; "" for none
		wantStdout  []string
	}{
		{
			description: "restored from the backup",
			before:      `{"debug":true}`,
			wantStdout: []string{
				`unconfigured docker: runtime "gpu" removed`,
				"  restored DIR/daemon.json as it was before configure, from DIR/daemon.json.bak.20250304T050607Z (removed)\n",
				"next: restart dockerd: systemctl restart docker",
			},
		},
		{
			description: "created by configure: removed",
			wantStdout: []string{
				"  removed DIR/daemon.json\n",
				"note: DIR/daemon.json held only what configure wrote (configure created it): removed\n",
			},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "daemon.json")
			if tc.before != "" {
				if err := os.WriteFile(path, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			h := fakeHost(dir)
			var stdout, stderr bytes.Buffer
			if err := runtimeCommand([]string{"configure", "--runtime=docker", "--config", path, "--runtime-path=/opt/gpu/gpu-runtime"}, &stdout, &stderr, h); err != nil {
				t.Fatal(err)
			}
			stdout.Reset()
			if err := runtimeCommand([]string{"unconfigure", "--runtime=docker", "--config", path}, &stdout, &stderr, h); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.wantStdout {
				if s = strings.ReplaceAll(s, "DIR", dir); !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			got, err := os.ReadFile(path)
			if tc.before == "" && !errors.Is(err, fs.ErrNotExist) || tc.before != "" && string(got) != tc.before {
				t.Errorf("daemon.json after unconfigure: %q (err %v), want %q", got, err, tc.before)
			}
			if names, _ := filepath.Glob(path + ".bak.*"); len(names) != 0 {
				t.Errorf("backups left: %v", names)
			}
		})
	}
}

// TestEveryHelp: gpu-ctk --help lists every command, and every command's and subcommand's
// --help prints its usage to stdout and succeeds.
func TestEveryHelp(t *testing.T) {
	var top strings.Builder
	if err := Run([]string{"--help"}, &top, io.Discard); err != nil {
		t.Fatal(err)
	}
	var all [][]string
	for name := range commands {
		if !strings.Contains(top.String(), "\n  "+name+" ") {
			t.Errorf("gpu-ctk --help does not list %s:\n%s", name, top.String())
		}
		all = append(all, []string{name})
	}
	all = append(all, []string{"runtime", "configure"}, []string{"runtime", "unconfigure"}, []string{"cdi", "generate"}, []string{"cdi", "list"}, []string{"system", "create-dev-char-symlinks"})
	for _, args := range all {
		var out, errb strings.Builder
		err := Run(append(append([]string(nil), args...), "--help"), &out, &errb)
		if err != nil || !strings.HasPrefix(out.String(), "usage:") || errb.Len() > 0 {
			t.Errorf("gpu-ctk %s --help: %v, stdout %q, stderr %q", strings.Join(args, " "), err, out.String(), errb.String())
		}
	}
}

// TestNoArguments: a command that takes flags only refuses an argument, naming itself and its
// --help, before it reads any configuration.
func TestNoArguments(t *testing.T) {
	for _, cmd := range [][]string{{"cdi", "generate"}, {"cdi", "list"}, {"config"}, {"doctor"}, {"health", "watch"}, {"info"}, {"system", "create-dev-char-symlinks"}} {
		name := strings.Join(cmd, " ")
		err := Run(append(append([]string(nil), cmd...), "stray"), io.Discard, io.Discard)
		want := "usage: " + name + ` takes no arguments, got ["stray"] (gpu-ctk ` + name + " --help)"
		if err == nil || err.Error() != want || ExitCode(err) != 2 {
			t.Errorf("gpu-ctk %s stray: %v, want %q", name, err, want)
		}
	}
}

// TestCheckSpecBroken: cdi generate --check on a file that is no CDI spec names the file.
func TestCheckSpecBroken(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nvidia.yaml")
	if err := os.WriteFile(p, []byte("cdiVersion: 0.5.0\nkind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := checkSpec(p, nil, io.Discard)
	if want := p + ": not a CDI spec: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want prefix %q", err, want)
	}
}

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestFailures: each case must fail create, leave config.json byte-identical, print the
// message on stderr, and write it as the last error line of runc's JSON --log.
func TestFailures(t *testing.T) {
	testCases := []struct {
		description string
		env         []string
		brokenRoot  bool
		wantMsg     []string
		// whole, when set, is the entire message ({uuid0}, {uuid1}: the fake GPUs' UUIDs).
		whole string
	}{
		{description: "unknown index", env: []string{"NVIDIA_VISIBLE_DEVICES=0,7"},
			wantMsg: []string{`unknown device "7" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-`, `), 1 (GPU-`},
			whole:   `plan GPU injection: unknown device "7" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 ({uuid0}), 1 ({uuid1})`},
		{description: "unknown UUID", env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000"},
			wantMsg: []string{`unknown device "GPU-00000000-0000-0000-0000-000000000000" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 (GPU-`},
			whole:   `plan GPU injection: unknown device "GPU-00000000-0000-0000-0000-000000000000" in NVIDIA_VISIBLE_DEVICES: this host has GPUs 0 ({uuid0}), 1 ({uuid1})`},
		{description: "duplicate entry", env: []string{"NVIDIA_VISIBLE_DEVICES=1,1"},
			wantMsg: []string{`device "1" is listed twice in NVIDIA_VISIBLE_DEVICES="1,1"`}},
		{description: "unknown capability", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,gaming"},
			wantMsg: []string{`unknown driver capability "gaming" in NVIDIA_DRIVER_CAPABILITIES="compute,gaming": allowed are all, compute, compat32, display, graphics, ngx, utility, video`}},
		{description: "driver root without NVML", env: []string{"NVIDIA_VISIBLE_DEVICES=0"}, brokenRoot: true,
			wantMsg: []string{"NVML library not found: load libnvidia-ml.so.1 from driver root", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 (not found)", "set driver.root in the gpu-runtime config"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 2)
			if tc.brokenRoot {
				e.host = withDriverRoot(e.host, t.TempDir())
				e.writeConfig(t, "")
			}
			b := e.bundle(t, tc.env, "echo should-not-run")
			cfgPath := filepath.Join(b, "config.json")
			before, _ := os.ReadFile(cfgPath)
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if r.code == 0 || strings.Contains(r.stdout, "should-not-run") {
				t.Fatalf("container started: exit %d\n%s", r.code, r.stdout)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(r.stderr, m) {
					t.Errorf("stderr lacks %q:\n%s", m, r.stderr)
				}
			}
			msg := lastJSONError(t, logPath)
			for _, m := range tc.wantMsg {
				if !strings.Contains(msg, m) {
					t.Errorf("last error in --log lacks %q: %q", m, msg)
				}
			}
			if !strings.HasPrefix(msg, "gpu-runtime: ") {
				t.Errorf("log message should name gpu-runtime: %q", msg)
			}
			if tc.whole != "" {
				gpus := e.host.Options.GPUs
				want := "gpu-runtime: " + strings.NewReplacer("{uuid0}", gpus[0].UUID, "{uuid1}", gpus[1].UUID).Replace(tc.whole)
				if msg != want {
					t.Errorf("last error in --log:\n%s\nwant\n%s", msg, want)
				}
			}
			wantSpecUnchanged(t, b, before)
		})
	}
}

func TestFailureTextLog(t *testing.T) {
	e := newEnv(t, 1)
	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=3"}, "true")
	logPath := filepath.Join(t.TempDir(), "log.txt")
	r := e.run(t, b, "--log", logPath)
	if r.code == 0 {
		t.Fatal("want failure")
	}
	data, _ := os.ReadFile(logPath)
	if !strings.Contains(string(data), `level=error msg="gpu-runtime: `) || !strings.Contains(string(data), `unknown device \"3\" in NVIDIA_VISIBLE_DEVICES`) {
		t.Errorf("text log lacks the error in runc's format:\n%s", data)
	}
}

func TestPassThrough(t *testing.T) {
	e := newEnv(t, 1)
	// runc's own error and exit code come back unchanged for other subcommands.
	r := e.runtime(t, nil, "state", "no-such-container")
	if r.code != 1 || !strings.Contains(r.stderr, "container does not exist") {
		t.Errorf("state of a missing container: exit %d, stderr %q", r.code, r.stderr)
	}
	// --version: ours, then runc's lines, so that docker info (which reads the last "version"
	// and "commit:" lines) shows runc's version and commit.
	runcVersion, err := exec.Command("runc", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	r = e.runtime(t, nil, "--version")
	ours, theirs, _ := strings.Cut(r.stdout, "\n\n")
	if r.code != 0 || !strings.HasPrefix(ours, "gpu-runtime version ") || !strings.Contains(ours, "\nspec: 1.") || theirs != string(runcVersion) {
		t.Errorf("--version: exit %d: %q", r.code, r.stdout)
	}
	var lastVersion, lastCommit string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, "version") {
			lastVersion = l
		}
		if strings.HasPrefix(l, "commit:") {
			lastCommit = l
		}
	}
	if !strings.HasPrefix(lastVersion, "runc version ") || lastCommit == "" || !strings.Contains(string(runcVersion), lastCommit) {
		t.Errorf("--version: docker info would read %q and %q", lastVersion, lastCommit)
	}
	// A broken config does not stop non-create commands (containers must stay deletable).
	if err := os.WriteFile(e.config, []byte("[runtime\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = e.runtime(t, nil, "list")
	if r.code != 0 || !strings.Contains(r.stdout, "ID") || !strings.Contains(r.stderr, "config unusable; using default runtimes for list") {
		t.Errorf("list with broken config: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	// A container that asks for no GPU runs, with a warning in the runtime's log: a broken
	// config must not take down every container of the host.
	b := e.bundle(t, nil, "echo plain-ran")
	logPath := filepath.Join(t.TempDir(), "log.json")
	r = e.run(t, b, "--log", logPath, "--log-format", "json")
	found := false
	for _, l := range jsonLines(t, logPath) {
		msg, _ := l["msg"].(string)
		errText, _ := l["error"].(string)
		if l["level"] == "warning" && strings.HasPrefix(msg, "config unusable; the container asks for no GPU, so it runs unchanged through ") &&
			strings.Contains(errText, "parse config "+e.config) && l["container_id"] != nil {
			found = true
		}
	}
	if r.code != 0 || !strings.Contains(r.stdout, "plain-ran") || !found {
		t.Errorf("a non-GPU create with a broken config: exit %d %q %q; warning logged: %v", r.code, r.stdout, r.stderr, found)
	}
	b = e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "true")
	r = e.run(t, b)
	if r.code == 0 || !strings.Contains(r.stderr, "gpu-runtime: parse config "+e.config+": line 1, column 9: expected ']' to close table name") {
		t.Errorf("create with broken config must fail naming the file and place: exit %d %q", r.code, r.stderr)
	}

	// A bad value outside [runtime] fails create, but start/delete/state still reach the
	// configured runtime: a delete must go where the create went.
	marker := filepath.Join(e.dir, "runtime-calls")
	wrapper := filepath.Join(e.dir, "recording-runc")
	script := "#!/bin/sh\necho \"$@\" >> " + marker + "\nexec runc \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.config, []byte(fmt.Sprintf("[runtime]\nruntimes = [%q]\n[driver]\nroot = \"relative\"\n", wrapper)), 0o644); err != nil {
		t.Fatal(err)
	}
	r = e.runtime(t, nil, "state", "no-such-container")
	if calls, _ := os.ReadFile(marker); r.code != 1 || !strings.Contains(string(calls), "state no-such-container") || strings.Contains(r.stderr, "config unusable") {
		t.Errorf("state with a bad [driver]: exit %d, stderr %q, runtime calls %q", r.code, r.stderr, calls)
	}
	r = e.run(t, b)
	if r.code == 0 || !strings.Contains(r.stderr, `invalid driver.root \"relative\": want an absolute path`) {
		t.Errorf("create with a bad [driver] must fail naming it: exit %d %q", r.code, r.stderr)
	}
}

// TestMultiTenantPolicy: with accept-envvar-when-unprivileged=false an unprivileged
// container's NVIDIA_VISIBLE_DEVICES=all gets nothing (and a warning); a device plugin's
// /dev/null volume mount still allocates a GPU.
func TestMultiTenantPolicy(t *testing.T) {
	e := newEnv(t, 2)
	e.writeConfig(t, "[request]\naccept-envvar-when-unprivileged = false\naccept-device-list-as-volume-mounts = true\n")

	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, probe)
	before, _ := os.ReadFile(filepath.Join(b, "config.json"))
	logPath := filepath.Join(t.TempDir(), "log.json")
	r := e.run(t, b, "--log", logPath, "--log-format", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if f := facts(lines(r.stdout)); len(f.devs()) != 0 || f["ldcache-libcuda"] {
		t.Errorf("unprivileged env request was honoured:\n%s", r.stdout)
	}
	after, _ := os.ReadFile(filepath.Join(b, "config.json"))
	if !bytes.Equal(before, after) {
		t.Errorf("spec changed although no GPU was injected")
	}
	logData, _ := os.ReadFile(logPath)
	if !strings.Contains(string(logData), `"level":"warning"`) || !strings.Contains(string(logData), `request.accept-envvar-when-unprivileged is false`) {
		t.Errorf("no warning in the log:\n%s", logData)
	}

	// The device plugin's way: a /dev/null mount naming GPU 1.
	b = e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, probe)
	addMount(t, b, specs.Mount{Source: "/dev/null", Destination: "/var/run/nvidia-container-devices/1", Type: "bind", Options: []string{"bind", "ro"}})
	r = e.run(t, b)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	f := facts(lines(r.stdout))
	if !f["dev /dev/nvidia1 c3 1"] || f["dev /dev/nvidia0 c3 0"] || !f["ldcache-libcuda"] {
		t.Errorf("volume-mount request not honoured:\n%s", r.stdout)
	}
}

func addMount(t *testing.T, bundle string, m specs.Mount) {
	t.Helper()
	p := filepath.Join(bundle, "config.json")
	var spec specs.Spec
	data, _ := os.ReadFile(p)
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Mounts = append(spec.Mounts, m)
	data, _ = json.Marshal(&spec)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

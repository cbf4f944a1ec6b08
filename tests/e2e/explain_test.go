package e2e

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/ctk"
)

// The create passes its own --log and --log-format on to the loader-cache hook; explain has no
// create's command line. The comparisons leave them out.
var runcLogArgs = regexp.MustCompile(` --log \S+ --log-format \S+`)

func withoutRuncLog(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if (args[i] == "--log" || args[i] == "--log-format") && i+1 < len(args) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// explainBundle runs gpu-ctk explain on a bundle, as JSON and as text.
func explainBundle(t *testing.T, e *env, b string) (ctk.Explanation, string, int) {
	t.Helper()
	var ex ctk.Explanation
	out, code := gpuCTK(t, e, "explain", "--bundle", b, "--json")
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("explain --json: %v\n%s", err, out)
	}
	text, textCode := gpuCTK(t, e, "explain", "--bundle", b)
	if textCode != code {
		t.Errorf("explain exits %d as text, %d as JSON", textCode, code)
	}
	return ex, text, code
}

func gpuCTK(t *testing.T, e *env, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...)
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if stderr.Len() > 0 {
		t.Logf("gpu-ctk %s: stderr: %s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), code
}

// ctk runs gpu-ctk with e's config and returns its stdout; another exit code than wantCode
// fails the test.
func (e *env) ctk(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	out, code := gpuCTK(t, e, args...)
	if code != wantCode {
		t.Fatalf("gpu-ctk %s: exit %d, want %d\n%s", strings.Join(args, " "), code, wantCode, out)
	}
	return out
}

// added returns the elements of after (as keys) that before lacks, sorted.
func added[T any](before, after []T, key func(T) string) []string {
	have := map[string]int{}
	for _, x := range before {
		have[key(x)]++
	}
	var out []string
	for _, x := range after {
		k := key(x)
		if have[k] > 0 {
			have[k]--
			continue
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(xs []string) []string {
	sort.Strings(xs)
	return xs
}

// TestExplain: gpu-ctk explain is the create. For whole GPUs, MIG devices, CDI names and the
// loader-cache choice (at create, or the hook), every device node (numbers, mode, owner),
// cgroup rule, mount (source, options), hook (argv, env, timeout) and variable explain lists
// is what the create wrote into config.json, and nothing else was; where explain says the
// loader cache is updated is what the create's debug log says; the runtime's debug log
// carries explain's lines; a failing create's error is the one explain prints.
func TestExplain(t *testing.T) {
	e, _ := newCDIEnv(t, "")
	testCases := []struct {
		description string
		env         []string
		image       func(t *testing.T, rootfs string)
		hook        bool // the loader cache is the hook's
	}{
		{description: "whole GPU and MIG device, with a requirement", env: []string{"NVIDIA_VISIBLE_DEVICES=0:1,1", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"}},
		{description: "all devices, all capabilities", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"}},
		{description: "driver files only", env: []string{"NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=utility"}},
		{description: "a CDI device and an index", env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0:0,1"}},
		{description: "CDI devices alone", env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1,nvidia.com/gpu=0:1"}},
		{description: "an image whose loader cache the hook must rebuild", env: []string{"NVIDIA_VISIBLE_DEVICES=1"}, hook: true,
			image: func(t *testing.T, rootfs string) {
				buildLib(t, filepath.Join(rootfs, "usr/lib/libimage.so.1"), "libimage.so.1")
			}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			b := e.bundle(t, tc.env, "true")
			if tc.image != nil {
				tc.image(t, filepath.Join(b, "rootfs"))
			}
			ex, text, code := explainBundle(t, e, b)
			if code != 0 || ex.Decision != "inject" {
				t.Fatalf("explain: exit %d, decision %q, error %q", code, ex.Decision, ex.Error)
			}
			for _, l := range ex.Lines {
				if !strings.Contains(text, "  "+l+"\n") {
					t.Errorf("text output lacks the line %q", l)
				}
			}
			all := *ex.Edits // every edit of the one plan, CDI devices' included
			if want := "loader cache: left to the update-ldcache hook"; strings.HasPrefix(ex.LoaderCache, want) != tc.hook {
				t.Errorf("explain's loader cache: %q, want the hook: %v", ex.LoaderCache, tc.hook)
			}

			before := readSpec(t, b)
			logPath := filepath.Join(t.TempDir(), "log.json")
			id := containerID(t)
			r := e.runtime(t, nil, "--log", logPath, "--log-format", "json", "create", "--bundle", b, id)
			defer e.runtime(t, nil, "delete", "--force", id)
			if r.code != 0 {
				t.Fatalf("create: exit %d: %s", r.code, r.stderr)
			}
			after := readSpec(t, b)
			if got := after.Annotations[create.InjectedAnnotation]; got != strings.Join(deviceUUIDs(ex.Devices), ",") && !(got == "none" && len(ex.Devices) == 0) {
				t.Errorf("the create's %s annotation = %q, explain's devices %+v", create.InjectedAnnotation, got, ex.Devices)
			}
			// Explained again, the spec gpu-runtime wrote says it is gpu-runtime's.
			if again, _, _ := explainBundle(t, e, b); again.Decision != "unchanged" || again.Reason != create.UnchangedInjected {
				t.Errorf("explain of the injected spec: %s, %q; want unchanged, %q", again.Decision, again.Reason, create.UnchangedInjected)
			}

			nodeKey := func(d specs.LinuxDevice) string {
				return fmt.Sprintf("%s %s %d:%d %v %d:%d", d.Path, d.Type, d.Major, d.Minor, *d.FileMode, *d.UID, *d.GID)
			}
			var wantNodes, wantRules, wantMounts, wantHooks []string
			for _, n := range all.DeviceNodes {
				wantNodes = append(wantNodes, fmt.Sprintf("%s %s %d:%d %v %d:%d", n.Path, n.Type, n.Major, n.Minor, n.FileMode, n.UID, n.GID))
				wantRules = append(wantRules, fmt.Sprintf("allow %s %d:%d %s", n.Type, n.Major, n.Minor, cmp.Or(n.Access, "rwm")))
			}
			for _, m := range all.Mounts {
				wantMounts = append(wantMounts, fmt.Sprintf("%s <- %s %v", m.ContainerPath, m.HostPath, m.Options))
			}
			// Where the create updated the loader cache is where explain said it would.
			line := ""
			for _, l := range jsonLines(t, logPath) {
				if msg, _ := l["msg"].(string); strings.HasPrefix(msg, "loader cache: ") {
					line = msg
				}
			}
			if line != ex.LoaderCache {
				t.Errorf("the create's loader cache: %q\nexplain's: %q", line, ex.LoaderCache)
			}
			for _, h := range all.Hooks {
				wantHooks = append(wantHooks, fmt.Sprintf("%s %s %q %q %d", h.Stage, h.Path, withoutRuncLog(h.Args), h.Env, h.Timeout))
			}
			var beforeDevs, afterDevs []specs.LinuxDevice
			if before.Linux != nil {
				beforeDevs = before.Linux.Devices
			}
			afterDevs = after.Linux.Devices
			if got := added(beforeDevs, afterDevs, nodeKey); !reflect.DeepEqual(got, sorted(wantNodes)) {
				t.Errorf("device nodes the create added:\n%q\nexplain:\n%q", got, wantNodes)
			}
			ruleKey := func(r specs.LinuxDeviceCgroup) string {
				if !r.Allow || r.Major == nil || r.Minor == nil {
					return fmt.Sprintf("%+v", r) // runc's default deny-all rule
				}
				return fmt.Sprintf("allow %s %d:%d %s", r.Type, *r.Major, *r.Minor, r.Access)
			}
			if got := added(before.Linux.Resources.Devices, after.Linux.Resources.Devices, ruleKey); !reflect.DeepEqual(got, sorted(wantRules)) {
				t.Errorf("cgroup rules the create added:\n%q\nexplain:\n%q", got, wantRules)
			}
			mountKey := func(m specs.Mount) string { return fmt.Sprintf("%s <- %s %v", m.Destination, m.Source, m.Options) }
			if got := added(before.Mounts, after.Mounts, mountKey); !reflect.DeepEqual(got, sorted(wantMounts)) {
				t.Errorf("mounts the create added:\n%q\nexplain:\n%q", got, wantMounts)
			}
			hookKeys := func(s specs.Spec) []string {
				var out []string
				if s.Hooks == nil {
					return nil
				}
				for _, st := range []struct {
					name  string
					hooks []specs.Hook
				}{{"prestart", s.Hooks.Prestart}, //nolint:staticcheck // no hook of gpu-runtime's runs there: a hook of it would show
					{"createRuntime", s.Hooks.CreateRuntime}, {"createContainer", s.Hooks.CreateContainer}, {"startContainer", s.Hooks.StartContainer}} {
					for _, h := range st.hooks {
						timeout := 0
						if h.Timeout != nil {
							timeout = *h.Timeout
						}
						out = append(out, fmt.Sprintf("%s %s %q %q %d", st.name, h.Path, withoutRuncLog(h.Args), h.Env, timeout))
					}
				}
				return out
			}
			if got := added(hookKeys(before), hookKeys(after), func(s string) string { return s }); !reflect.DeepEqual(got, sorted(wantHooks)) {
				t.Errorf("hooks the create added:\n%q\nexplain:\n%q", got, wantHooks)
			}
			if got := added(before.Process.Env, after.Process.Env, func(s string) string { return s }); !reflect.DeepEqual(got, sorted(append([]string(nil), all.Env...))) {
				t.Errorf("env the create added: %q, explain: %q", got, all.Env)
			}
			// The runtime's debug log has explain's lines, CDI devices' edits included.
			logged := map[string]bool{}
			for _, l := range jsonLines(t, logPath) {
				if msg, ok := l["msg"].(string); ok && l["level"] == "debug" {
					logged[runcLogArgs.ReplaceAllString(msg, "")] = true
				}
			}
			for _, l := range ex.Edits.Describe() {
				if !logged[runcLogArgs.ReplaceAllString(l, "")] {
					t.Errorf("the runtime's debug log lacks %q", l)
				}
			}
		})
	}

	t.Run("requirement outcomes", func(t *testing.T) {
		b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_REQUIRE_DRIVER=driver>=500"}, "true")
		ex, text, code := explainBundle(t, e, b)
		if code != 1 || ex.Decision != "error" {
			t.Errorf("explain of an unsatisfied requirement: exit %d, decision %q; want exit 1 (its --help says so), decision \"error\"", code, ex.Decision)
		}
		want := []ctk.ExplainedCondition{
			{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>=99.0", Detail: "unsatisfied condition: cuda>=99.0, please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)"},
			{Name: "NVIDIA_REQUIRE_DRIVER", Expression: "driver>=500", Satisfied: true},
		}
		if !reflect.DeepEqual(ex.Requirements, want) {
			t.Errorf("requirements = %+v\nwant %+v", ex.Requirements, want)
		}
		for _, l := range []string{
			`  NVIDIA_REQUIRE_CUDA="cuda>=99.0": NOT satisfied, the container would not start: unsatisfied condition: cuda>=99.0`,
			`  NVIDIA_REQUIRE_DRIVER="driver>=500": satisfied on this host`,
		} {
			if !strings.Contains(text, l) {
				t.Errorf("text lacks %q:\n%s", l, text)
			}
		}
	})

	t.Run("a failing create", func(t *testing.T) {
		for _, env := range [][]string{{"NVIDIA_VISIBLE_DEVICES=7"}, {"NVIDIA_VISIBLE_DEVICES=0"}, {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9"}, {"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>>1"}} {
			b := e.bundle(t, env, "true")
			ex, text, code := explainBundle(t, e, b)
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			msg := lastJSONError(t, logPath)
			if code != 1 || ex.Decision != "error" || r.code == 0 || ex.Error != msg {
				t.Errorf("%q: explain exit %d, error %q; the create's: exit %d, %q", env, code, ex.Error, r.code, msg)
			}
			if !strings.HasPrefix(text, "the create would fail ("+b+"/config.json):\n  "+msg+"\n") {
				t.Errorf("%q: text =\n%s", env, text)
			}
		}
	})

	// Issue 25 item 8: a container that asks for no GPU is an image check (README: "check an
	// image first with gpu-ctk explain --env NVIDIA_REQUIRE_CUDA=…"): a requirement this host
	// does not satisfy exits 1 as the help says, a satisfied one 0; NVIDIA_DISABLE_REQUIRE skips.
	t.Run("an image's requirement without a GPU", func(t *testing.T) {
		out := e.ctk(t, 1, "explain", "--env", "NVIDIA_REQUIRE_CUDA=cuda>=99.0", "--env", "NVIDIA_REQUIRE_DRIVER=driver>=500")
		want := "the create would leave the spec unchanged (--env): no GPU requested\n" +
			"requirements (not checked for a container without GPUs; the image's, on this host's driver):\n" +
			`  NVIDIA_REQUIRE_CUDA="cuda>=99.0": NOT satisfied, the image would not start with a GPU here: unsatisfied condition: cuda>=99.0, please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)` + "\n" +
			`  NVIDIA_REQUIRE_DRIVER="driver>=500": satisfied on this host` + "\n"
		if out != want {
			t.Errorf("explain =\n%s\nwant\n%s", out, want)
		}
		e.ctk(t, 0, "explain", "--env", "NVIDIA_REQUIRE_CUDA=cuda>=12.0")
		e.ctk(t, 0, "explain", "--env", "NVIDIA_REQUIRE_CUDA=cuda>=99.0", "--env", "NVIDIA_DISABLE_REQUIRE=true")
		e.ctk(t, 1, "explain", "--json", "--env", "CUDA_VERSION=99.1")
	})

	t.Run("no GPU", func(t *testing.T) {
		out, code := gpuCTK(t, e, "explain", "--env", "PATH=/bin")
		if code != 0 || out != "the create would leave the spec unchanged (--env): no GPU requested\n" {
			t.Errorf("exit %d: %q", code, out)
		}
	})
}

// TestExplainUsage: every usage error names the fix; --help exits 0.
func TestExplainUsage(t *testing.T) {
	e := newEnv(t, 1)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"explain"}, 2, "explain needs --bundle DIR or at least one --env VAR=VALUE"},
		{[]string{"explain", "--bundle", "/x", "--env", "A=1"}, 2, "explain takes --bundle or --env, not both"},
		{[]string{"explain", "--env", "A"}, 2, `--env "A": want VAR=VALUE`},
		{[]string{"explain", "--env", "A=1", "--annotation", "k"}, 2, `--annotation "k": want KEY=VALUE`},
		{[]string{"explain", "--bundle", "/nonexistent"}, 1, "read spec: open /nonexistent/config.json: no such file or directory"},
	} {
		cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), tc.args...)
		cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: exit %d, want %d with %q:\n%s", tc.args, cmd.ProcessState.ExitCode(), tc.code, tc.want, out)
		}
	}
	out, code := gpuCTK(t, e, "explain", "--help")
	if code != 0 || !strings.HasPrefix(out, "usage:\n  gpu-ctk explain --bundle DIR") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}

// deviceUUIDs are the UUIDs of explained devices.
func deviceUUIDs(ds []ctk.ExplainedDevice) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.UUID
	}
	return out
}

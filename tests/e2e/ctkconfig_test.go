package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

// TestCTKConfig: gpu-ctk config prints what gpu-runtime reads; --set edits the file in place,
// keeping its comments and mode, validates before writing, and refuses to edit a broken file.
func TestCTKConfig(t *testing.T) {
	e := newEnv(t, 1)
	out, code := gpuCTK(t, e, "config")
	if code != 0 || !strings.HasPrefix(out, "# The configuration gpu-runtime uses: "+e.config+" over the defaults.\n[runtime]\n") ||
		!strings.Contains(out, "root = '"+e.host.DriverRoot+"'") || !strings.Contains(out, "spec-dirs = ['/etc/cdi', '/var/run/cdi']") {
		t.Errorf("config: exit %d\n%s", code, out)
	}

	shipped, err := os.ReadFile("../../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(file, shipped, 0o640); err != nil {
		t.Fatal(err)
	}
	out, code = gpuCTK(t, e, "config", "--config", file, "--set", "driver.root=/run/nvidia/driver", "--set", "runtime.runtimes=crun,runc")
	got, _ := os.ReadFile(file)
	want := strings.Replace(strings.Replace(string(shipped), "root = \"/\"\n", "root = \"/run/nvidia/driver\"\n", 1),
		`runtimes = ["runc", "crun"]`, `runtimes = ["crun", "runc"]`, 1)
	if code != 0 || out != file+": set driver.root=/run/nvidia/driver, runtime.runtimes=crun,runc\n" || string(got) != want {
		t.Errorf("--set: exit %d %q; file:\n%s", code, out, got)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 kept", fi.Mode().Perm())
	}

	run := func(args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...)
		cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
		b, _ := cmd.CombinedOutput()
		return string(b), cmd.ProcessState.ExitCode()
	}
	before, _ := os.ReadFile(file)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"config", "--config", file, "--set", "driver.root=relative"}, 1,
			`gpu-ctk: --set driver.root=relative: driver.root = "relative": config ` + file + `: invalid driver.root "relative": want an absolute path; ` + file + " not changed"},
		{[]string{"config", "--config", file, "--set", "driver.rot=/x"}, 1, `unknown key "driver.rot" (did you mean "driver.root"?): the keys are runtime.runtimes, runtime.log-file`},
		{[]string{"config", "--config", file, "--set", "mps.shares.small.active-thread-percentage=20"}, 1,
			`mps.shares.small.active-thread-percentage = 20: config ` + file + `: invalid mps.shares.small.devices []: want the share's GPUs, by index or UUID`},
		{[]string{"config", "--config", file, "--set", "driver.root"}, 2, `--set "driver.root": want KEY=VALUE, e.g. driver.root=/run/nvidia/driver`},
		{[]string{"config", "--config", filepath.Join(t.TempDir(), "none.toml")}, 1, "no such file or directory"},
	} {
		out, code := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%q: exit %d, want %d with %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Error("a refused --set changed the file")
	}
	// Issue 25 item 11: --set adds an MPS share, its keys in any order, validated together.
	if out, code := run("config", "--config", file, "--set", "mps.shares.small.active-thread-percentage=20", "--set", "mps.shares.small.devices=0,1", "--set", "mps.shares.small.uid=1000"); code != 0 {
		t.Errorf("--set an MPS share: exit %d\n%s", code, out)
	}
	cfg, _, err := config.Load(file)
	if small := cfg.MPS.Shares["small"]; err != nil || strings.Join(small.Devices, ",") != "0,1" || small.ActiveThreadPercentage != 20 || small.UID != 1000 {
		t.Errorf("the share: %+v, %v", cfg.MPS.Shares, err)
	}
	if got, _ := os.ReadFile(file); !strings.HasSuffix(string(got), "\n[mps.shares.small]\nactive-thread-percentage = 20\ndevices = [\"0\", \"1\"]\nuid = 1000\n") {
		t.Errorf("file:\n%s", got)
	}
	if err := os.WriteFile(file, []byte("[driver\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run("config", "--config", file, "--set", "driver.root=/x"); code != 1 || !strings.Contains(out, "fix the file first (gpu-ctk config --set edits only a valid file)") {
		t.Errorf("a broken file: exit %d\n%s", code, out)
	}
	if out, code := gpuCTK(t, e, "config", "--help"); code != 0 || !strings.Contains(out, "  driver.proc-root\n") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}

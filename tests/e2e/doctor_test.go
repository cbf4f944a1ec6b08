package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/ctk"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// doctorEnv is a healthy fake host (a MIG GPU and a whole one) with everything doctor looks
// at in place: a fresh discovery cache, a CDI spec, and under an engine root of its own a
// docker with the runtime gpu registered and docker's hook name linked to gpu-hook.
type doctorEnv struct {
	*env
	engineRoot, cdiDir string
}

func newDoctorEnv(t *testing.T, opts fakehost.Options) *doctorEnv {
	t.Helper()
	e := newEnv(t, 1)
	e.host = privateHost(t, filepath.Join(e.dir, "host"), opts)
	d := &doctorEnv{env: e, engineRoot: filepath.Join(e.dir, "engines"), cdiDir: filepath.Join(e.dir, "cdi")}
	d.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", d.cdiDir))
	for _, dir := range []string{"usr/bin", "etc/docker"} {
		if err := os.MkdirAll(filepath.Join(d.engineRoot, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d.engineRoot, "usr/bin/dockerd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(binDir, "gpu-hook"), filepath.Join(d.engineRoot, "usr/bin/nvidia-container-runtime-hook")); err != nil {
		t.Fatal(err)
	}
	d.ctk(t, 0, "runtime", "configure", "--runtime=docker", "--config", filepath.Join(d.engineRoot, "etc/docker/daemon.json"))
	d.ctk(t, 0, "cdi", "generate", "--output", filepath.Join(d.cdiDir, "nvidia.yaml"))
	d.ctk(t, 0, "info") // writes nothing; the cache comes from a create
	b := d.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=1"}, "true")
	if r := d.run(t, b); r.code != 0 {
		t.Fatalf("a GPU container (to write the discovery cache): %s", r.stderr)
	}
	return d
}

// doctor runs gpu-ctk doctor --json and its text form, which must agree.
func (d *doctorEnv) doctor(t *testing.T) (map[string]ctk.Check, int) {
	t.Helper()
	out, code := gpuCTK(t, d.env, "doctor", "--json", "--engine-root", d.engineRoot)
	var checks []ctk.Check
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	text, textCode := gpuCTK(t, d.env, "doctor", "--engine-root", d.engineRoot)
	if textCode != code {
		t.Errorf("doctor exits %d as text, %d as JSON", textCode, code)
	}
	byName := map[string]ctk.Check{}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != len(checks) {
		t.Errorf("%d text lines, %d JSON checks:\n%s", len(lines), len(checks), text)
	}
	for i, c := range checks {
		if c.Status != "ok" && c.Status != "warn" && c.Status != "fail" && c.Status != "skip" {
			t.Errorf("check %q: status %q", c.Check, c.Status)
		}
		if (c.Status == "ok") != (c.Fix == "") {
			t.Errorf("check %q: status %s with fix %q (a fix is what warn and fail lines end with)", c.Check, c.Status, c.Fix)
		}
		if i < len(lines) {
			want := fmt.Sprintf("%-4s %s: %s", c.Status, c.Check, c.Detail)
			if c.Fix != "" {
				want += " — fix: " + c.Fix
			}
			if timing.ReplaceAllString(lines[i], "") != timing.ReplaceAllString(want, "") { // two runs: NVML's time differs
				t.Errorf("text line %d = %q\nwant %q", i, lines[i], want)
			}
		}
		if _, dup := byName[c.Check]; !dup {
			byName[c.Check] = c
		}
	}
	return byName, code
}

var timing = regexp.MustCompile(` answered in [^:]+:`)

func healthyOptions() fakehost.Options {
	opts := fakehost.Default(2)
	if err := opts.GPUs[0].AddMIGDevices("3g.40gb", "1g.10gb"); err != nil {
		panic(err)
	}
	return opts
}

// TestDoctor: every check of a healthy fake host is ok, and each broken thing gives the
// right verdict and fix.
func TestDoctor(t *testing.T) {
	d := newDoctorEnv(t, healthyOptions())
	checks, code := d.doctor(t)
	for _, name := range []string{"config", "driver", "NVML", "device nodes", "persistence mode", "MIG", "hook", "low-level runtime", "discovery cache", "engine docker", "docker --gpus", "cgroups", "CDI"} {
		c, ok := checks[name]
		if !ok || c.Status != "ok" {
			t.Errorf("healthy host: check %q = %+v (present %v), want ok", name, c, ok)
		}
	}
	if code != 0 {
		t.Errorf("healthy host: exit %d", code)
	}
	if c := checks["discovery cache"]; !strings.HasPrefix(c.Detail, "fresh: ") {
		t.Errorf("discovery cache: %q", c.Detail)
	}
	if c := checks["MIG"]; c.Detail != "GPU 0: 2 MIG device(s); capability nodes /dev/nvidia-caps (major 237) in place for all 2" {
		t.Errorf("MIG: %q", c.Detail)
	}
	if c := checks["engine docker"]; !strings.HasSuffix(c.Detail, `runtime "gpu" registered: `+filepath.Join(binDir, "gpu-runtime")) {
		t.Errorf("engine docker: %q", c.Detail)
	}
	// The suite sets GPU_RUNTIME_CONFIG, which no engine sees.
	if c := checks["config for engines"]; c.Status != "warn" ||
		c.Detail != "GPU_RUNTIME_CONFIG="+d.config+" is set in this shell, so gpu-ctk reads "+d.config+"; docker, containerd and cri-o start gpu-runtime with their own environment, without it: their containers read /etc/gpu-runtime/config.toml, and may fail where these checks pass" ||
		c.Fix != "put these settings in /etc/gpu-runtime/config.toml (or set GPU_RUNTIME_CONFIG in the engine's service environment: systemctl edit docker), then restart the engine" {
		t.Errorf("config for engines: %+v", c)
	}

	type verdict struct{ check, status, detail, fix string }
	cases := []struct {
		description string
		breakIt     func(t *testing.T, d *doctorEnv)
		want        func(d *doctorEnv) []verdict
		code        int
	}{
		{description: "a GPU's device node missing", code: 1,
			breakIt: func(t *testing.T, d *doctorEnv) { mustRemove(t, filepath.Join(d.host.DevRoot, "dev/nvidia1")) },
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"device nodes", "fail", `/dev/nvidia1 (GPU 1, ` + d.host.Options.GPUs[1].UUID + `) under dev root "` + d.host.DevRoot + `": missing`,
					"create it: nvidia-modprobe -c 1 (or check driver.dev-root)"}}
			}},
		{description: "the UVM nodes missing", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) { mustRemove(t, filepath.Join(d.host.DevRoot, "dev/nvidia-uvm")) },
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"device nodes", "warn", `/dev/nvidia-uvm (CUDA needs it) under dev root "` + d.host.DevRoot + `": missing`, "load the nvidia-uvm module: nvidia-modprobe -u -c=0"}}
			}},
		{description: "a broken config", code: 1,
			breakIt: func(t *testing.T, d *doctorEnv) {
				if err := os.WriteFile(d.config, []byte("[driver\nroot = 1\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: func(d *doctorEnv) []verdict {
				skipped := func(check string) verdict {
					return verdict{check, "skip", "not checked: it reads the configuration, which does not parse", "correct the configuration (the config check above), then run gpu-ctk doctor again"}
				}
				// Nothing of the host is blamed: the checks that read the config are skipped,
				// the engines are still checked.
				return []verdict{{"config", "fail", "parse config " + d.config + ": ", "correct " + d.config + " (gpu-ctk config prints what gpu-runtime reads): until then every GPU container fails to start"},
					skipped("driver"), skipped("NVML"), skipped("device nodes"), skipped("hook"), skipped("CDI"),
					{"engine docker", "ok", `runtime "gpu" registered`, ""}}
			}},
		{description: "no NVML", code: 1,
			breakIt: func(t *testing.T, d *doctorEnv) {
				libs, _ := filepath.Glob(filepath.Join(d.host.DriverRoot, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so*"))
				for _, l := range libs {
					mustRemove(t, l)
				}
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"NVML", "fail", "NVML library not found", "install the driver's user-space libraries, or set driver.root to where they are (the GPU operator's: /run/nvidia/driver)"}}
			}},
		{description: "a stale discovery cache", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) {
				if err := os.WriteFile(filepath.Join(d.host.DriverRoot, "usr/lib/x86_64-linux-gnu/libnew.so.1"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"discovery cache", "ok", "stale: the host changed since ", ""}}
			}},
		{description: "an untrusted discovery cache", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) {
				if err := os.Chmod(filepath.Join(d.dir, "discovery-cache.csv"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"discovery cache", "warn", "unusable: discovery cache " + filepath.Join(d.dir, "discovery-cache.csv") + " ignored: mode 0644, not 0600",
					"remove " + filepath.Join(d.dir, "discovery-cache.csv") + "; gpu-runtime rewrites it, root-owned with mode 0600"}}
			}},
		{description: "docker without the runtime registered", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) { mustRemove(t, filepath.Join(d.engineRoot, "etc/docker/daemon.json")) },
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"engine docker", "warn", `installed (` + filepath.Join(d.engineRoot, "usr/bin/dockerd") + `); runtime "gpu" not registered`,
					"gpu-ctk runtime configure --runtime=docker && systemctl restart docker"}}
			}},
		{description: "docker's daemon.json does not parse", code: 1,
			breakIt: func(t *testing.T, d *doctorEnv) {
				if err := os.WriteFile(filepath.Join(d.engineRoot, "etc/docker/daemon.json"), []byte("{"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"engine docker", "fail", "installed (" + filepath.Join(d.engineRoot, "usr/bin/dockerd") + "); its configuration cannot be read: ", "correct the file named; the engine itself fails on it too"}}
			}},
		{description: "no hook for docker --gpus", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) {
				mustRemove(t, filepath.Join(d.engineRoot, "usr/bin/nvidia-container-runtime-hook"))
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"docker --gpus", "warn", "nvidia-container-runtime-hook is not on dockerd's PATH", "install the package, or link it: ln -s gpu-hook /usr/bin/nvidia-container-runtime-hook; then restart docker"}}
			}},
		{description: "a stale CDI spec after a MIG reconfiguration", code: 1,
			breakIt: func(t *testing.T, d *doctorEnv) {
				opts := fakehost.Default(2)
				if err := opts.GPUs[0].AddMIGDevices("7g.80gb"); err != nil {
					t.Fatal(err)
				}
				d.host = privateHost(t, filepath.Join(d.dir, "host2"), opts)
				d.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", d.cdiDir))
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"CDI", "fail", filepath.Join(d.cdiDir, "nvidia.yaml") + ": device 0:1: this host has no such device now", "regenerate it: gpu-ctk cdi generate --output /var/run/cdi/nvidia.yaml (or enable gpu-runtime-cdi.service)"}}
			}},
		{description: "a CDI spec that names files a driver upgrade removed", code: 1,
			breakIt: func(t *testing.T, d *doctorEnv) {
				mustRemove(t, filepath.Join(d.host.DriverRoot, "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"))
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"CDI", "fail", filepath.Join(d.cdiDir, "nvidia.yaml") + ": names host files that no longer exist (a driver upgrade?): " + filepath.Join(d.host.DriverRoot, "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"),
					"regenerate it: gpu-ctk cdi generate --output /var/run/cdi/nvidia.yaml (or enable gpu-runtime-cdi.service)"}}
			}},
		{description: "a dynamic ldconfig with a static ldconfig.real beside it: the hook runs .real", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) { useLDConfig(t, d, "/bin/true", "/sbin/ldconfig") },
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"hook", "ok", "; ldconfig " + filepath.Join(d.dir, "ld", "ldconfig.real") + " (static)", ""}}
			}},
		{description: "a dynamic ldconfig", code: 1,
			breakIt: func(t *testing.T, d *doctorEnv) { useLDConfig(t, d, "/bin/true", "") },
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"hook", "fail", "; hook.ldconfig " + filepath.Join(d.dir, "ld", "ldconfig") + " is dynamically linked: ldconfig runs inside the container root, where a dynamic executable would run the image's loader; set hook.ldconfig to glibc's static ldconfig",
					"set hook.ldconfig to a static ldconfig (glibc's is)"}}
			}},
		{description: "a CDI spec others may write to", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) {
				if err := os.Chmod(filepath.Join(d.cdiDir, "nvidia.yaml"), 0o666); err != nil {
					t.Fatal(err)
				}
			},
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"CDI", "warn", "no spec of kind nvidia.com/gpu in " + d.cdiDir + ": podman --device, containerd 2.x, cri-o and CDI names in NVIDIA_VISIBLE_DEVICES cannot find the GPUs (gpu-runtime's own NVIDIA_VISIBLE_DEVICES path needs none); specs not loaded: " + filepath.Join(d.cdiDir, "nvidia.yaml") + ": mode 0666, writable by its group or others",
					"gpu-ctk cdi generate --output /var/run/cdi/nvidia.yaml (or enable gpu-runtime-cdi.service)"}}
			}},
		{description: "no CDI spec", code: 0,
			breakIt: func(t *testing.T, d *doctorEnv) { mustRemove(t, filepath.Join(d.cdiDir, "nvidia.yaml")) },
			want: func(d *doctorEnv) []verdict {
				return []verdict{{"CDI", "warn", "no spec of kind nvidia.com/gpu in " + d.cdiDir, "gpu-ctk cdi generate --output /var/run/cdi/nvidia.yaml (or enable gpu-runtime-cdi.service)"}}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.description, func(t *testing.T) {
			d := newDoctorEnv(t, healthyOptions())
			tc.breakIt(t, d)
			checks, code := d.doctor(t)
			if code != tc.code {
				t.Errorf("exit %d, want %d: %+v", code, tc.code, checks)
			}
			for _, w := range tc.want(d) {
				c := checks[w.check]
				if c.Status != w.status || !strings.Contains(c.Detail, w.detail) || c.Fix != w.fix {
					t.Errorf("check %q = %+v\nwant status %s, detail with %q, fix %q", w.check, c, w.status, w.detail, w.fix)
				}
			}
		})
	}

	t.Run("persistence mode off", func(t *testing.T) {
		opts := healthyOptions()
		opts.GPUs[1].PersistenceDisabled = true
		d := newDoctorEnv(t, opts)
		checks, code := d.doctor(t)
		c := checks["persistence mode"]
		want := "off on GPU 1 (" + opts.GPUs[1].UUID + "): the driver tears down and re-initialises the GPU between users"
		if code != 0 || c.Status != "warn" || !strings.HasPrefix(c.Detail, want) || c.Fix != "run nvidia-persistenced (the driver's service), or nvidia-smi -pm 1" {
			t.Errorf("exit %d, %+v", code, c)
		}
	})
}

// useLDConfig makes d's hook.ldconfig a copy of bin, with a copy of real beside it as
// ldconfig.real unless real is "".
func useLDConfig(t *testing.T, d *doctorEnv, bin, real string) {
	t.Helper()
	dir := filepath.Join(d.dir, "ld")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{bin: "ldconfig", real: "ldconfig.real"} {
		if src == "" {
			continue
		}
		if out, err := exec.Command("cp", src, filepath.Join(dir, dst)).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v: %s", src, err, out)
		}
	}
	replaceInFile(t, d.config, "[hook]\n", "[hook]\nldconfig = \""+filepath.Join(dir, "ldconfig")+"\"\n")
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// TestDoctorUsage: --help exits 0, a stray argument is a usage error.
func TestDoctorUsage(t *testing.T) {
	e := newEnv(t, 1)
	out, code := gpuCTK(t, e, "doctor", "--help")
	if code != 0 || !strings.HasPrefix(out, "usage:\n  gpu-ctk doctor [--json]") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
	cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), "doctor", "now")
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	msg, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(msg), `doctor takes no arguments, got ["now"] (gpu-ctk doctor --help)`) {
		t.Errorf("exit %d: %s", cmd.ProcessState.ExitCode(), msg)
	}
}

// TestDoctorMPS: a configured MPS share that does not run is a warning with the fix; once
// started, the check is ok.
func TestDoctorMPS(t *testing.T) {
	d := newDoctorEnv(t, healthyOptions())
	root := filepath.Join(d.dir, "mps")
	d.writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n[mps]\nroot = %q\n[mps.shares.large]\ndevices = [\"1\"]\n", d.cdiDir, root))
	checks, code := d.doctor(t)
	if c := checks["MPS"]; code != 0 || c.Status != "warn" || c.Detail != "shares not running: large (not started); their containers fail to start" ||
		c.Fix != "gpu-ctk mps start (or systemctl enable --now gpu-runtime-mps@<share>)" {
		t.Errorf("exit %d, %+v", code, c)
	}
	t.Cleanup(func() { gpuCTK(t, d.env, "mps", "stop") })
	if out, code := gpuCTK(t, d.env, "mps", "start"); code != 0 {
		t.Fatalf("mps start: %s", out)
	}
	checks, _ = d.doctor(t)
	if c := checks["MPS"]; c.Status != "ok" || !strings.HasPrefix(c.Detail, "shares running: large (pid ") {
		t.Errorf("%+v", c)
	}
}

// TestNVMLTimeoutInCTK: a hung driver bounds gpu-ctk as it bounds a create — doctor says the
// NVML check got no answer within discovery.timeout, and cdi generate (run by the boot unit
// before the engines start) fails with discovery's timeout error instead of hanging.
func TestNVMLTimeoutInCTK(t *testing.T) {
	e := newEnv(t, 1)
	opts := fakehost.Default(1)
	opts.NVMLInitDelay = 5 * time.Second
	e.host = privateHost(t, filepath.Join(e.dir, "slow"), opts)
	e.writeConfig(t, "")
	replaceInFile(t, e.config, "[discovery]\n", "[discovery]\ntimeout = \"300ms\"\n")

	start := time.Now()
	out, code := gpuCTK(t, e, "doctor", "--json")
	var checks []ctk.Check
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	i := slices.IndexFunc(checks, func(c ctk.Check) bool { return c.Check == "NVML" })
	if want := "no answer within discovery.timeout (300ms): the driver is hung or still initialising"; code == 0 || i < 0 || checks[i].Status != "fail" || checks[i].Detail != want {
		t.Errorf("doctor: exit %d, NVML check %+v; want fail with %q", code, checks, want)
	}
	cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), "cdi", "generate", "--output", filepath.Join(t.TempDir(), "nvidia.yaml"))
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
	stderr, err := cmd.CombinedOutput()
	if want := "gpu-ctk: GPU discovery timed out: NVML did not answer within 300ms (setting discovery.timeout)"; err == nil || !strings.HasPrefix(string(stderr), want) {
		t.Errorf("cdi generate: %v, output lacks %q:\n%s", err, want, stderr)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("doctor and cdi generate took %s: the timeout did not bound them", took)
	}
}

// TestDoctorContainerdCRIDrift: a CRI setting of containerd's config.toml changed after
// configure, which containerd 1.x ignores for the drop-in's copy, is named by doctor with the
// fix; configuring again clears it.
func TestDoctorContainerdCRIDrift(t *testing.T) {
	d := newDoctorEnv(t, healthyOptions())
	main := filepath.Join(d.engineRoot, "etc/containerd/config.toml")
	if err := os.MkdirAll(filepath.Dir(main), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.engineRoot, "usr/bin/containerd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(main, []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.9\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	configure := []string{"runtime", "configure", "--runtime=containerd", "--config", main, "--drop-in", filepath.Join(d.engineRoot, "etc/containerd/conf.d/99-gpu-runtime.toml")}
	d.ctk(t, 0, configure...)
	if checks, _ := d.doctor(t); checks["engine containerd"].Status != "ok" {
		t.Fatalf("after configure: %+v", checks["engine containerd"])
	}
	replaceInFile(t, main, "pause:3.9", "pause:3.10")
	checks, _ := d.doctor(t)
	c := checks["engine containerd"]
	want := `runtime "gpu" registered, but ` + main + "'s CRI section changed since configure, and containerd 1.x reads the copy in " +
		filepath.Join(d.engineRoot, "etc/containerd/conf.d/99-gpu-runtime.toml") + " instead (it replaces the whole section with the last file's): " +
		"the change has no effect until gpu-ctk runtime configure --runtime=containerd runs again"
	if c.Status != "warn" || !strings.HasSuffix(c.Detail, want) || c.Fix != "gpu-ctk runtime configure --runtime=containerd && systemctl restart containerd" {
		t.Errorf("engine containerd = %+v\nwant warn, a detail ending %q", c, want)
	}
	d.ctk(t, 0, configure...)
	if checks, _ := d.doctor(t); checks["engine containerd"].Status != "ok" {
		t.Errorf("after configuring again: %+v", checks["engine containerd"])
	}
}

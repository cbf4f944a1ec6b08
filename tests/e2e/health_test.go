package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/ctk"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// healthEnv is a private fake host, which the test may change (its /proc, its driver), with a
// health file of its own.
type healthEnv struct {
	*env
	file string
}

func newHealthEnv(t *testing.T, opts fakehost.Options) *healthEnv {
	t.Helper()
	e := newEnv(t, 1)
	e.host = privateHost(t, filepath.Join(e.dir, "host"), opts)
	h := &healthEnv{env: e, file: filepath.Join(e.dir, "run", "health.csv")}
	h.health(t, "")
	return h
}

// health writes the config with the [health] table: the file and extra keys.
func (h *healthEnv) health(t *testing.T, extra string) {
	t.Helper()
	h.writeConfig(t, fmt.Sprintf("[health]\nfile = %q\n%s", h.file, extra))
}

// nodeProbe lists the container's GPU and MIG capability nodes.
const nodeProbe = `for f in /dev/nvidia[0-9]* /dev/nvidia-caps/*; do [ -c "$f" ] && echo "dev $f"; done; echo probe-done`

// create runs a container with the probe and returns its result, its GPU nodes and the
// warnings and last error of runc's JSON log.
func (h *healthEnv) create(t *testing.T, env ...string) (r result, nodes []string, warnings []string, lastErr string) {
	t.Helper()
	b := h.bundle(t, env, nodeProbe)
	before, _ := os.ReadFile(filepath.Join(b, "config.json"))
	logPath := filepath.Join(t.TempDir(), "log.json")
	r = h.run(t, b, "--log", logPath, "--log-format", "json")
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "dev ") {
			nodes = append(nodes, strings.TrimPrefix(l, "dev "))
		}
	}
	sort.Strings(nodes)
	for _, l := range jsonLines(t, logPath) {
		msg, _ := l["msg"].(string)
		switch l["level"] {
		case "warning":
			warnings = append(warnings, msg)
		case "error":
			lastErr = msg
		}
	}
	if r.code != 0 {
		wantSpecUnchanged(t, b, before)
		if strings.Contains(r.stdout, "probe-done") {
			t.Error("a refused container ran")
		}
	}
	return r, nodes, warnings, lastErr
}

// record is the health file's record of uuid.
func (h *healthEnv) record(t *testing.T, uuid string) discover.HealthRecord {
	t.Helper()
	records, err := discover.ReadHealthFile(h.file)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if r.UUID == uuid {
			return r
		}
	}
	t.Fatalf("no record of %s in %+v", uuid, records)
	return discover.HealthRecord{}
}

const (
	healthClear = "; ask for another device, or when it is repaired, or the record was a false alarm, return it to service: gpu-ctk health clear "
	goneFix     = "; ask for another device, or check the kernel log (dmesg) for Xid errors, reset or re-seat the GPU, or reload the driver"
	excludedFix = "; ask for another device, or remove it from the driver's NVreg_ExcludedGpus and reload the driver to use it"
)

// TestHealthCreate: a GPU held back by each signal — the health file (gpu-ctk health mark),
// "GPU Excluded: Yes", its /proc entry gone — is refused by name, left out of all with a
// warning, fails all with health.all = "fail", and is given again once the signal is gone.
func TestHealthCreate(t *testing.T) {
	h := newHealthEnv(t, fakehost.Default(2))
	gpu0, gpu1 := h.host.Options.GPUs[0].UUID, h.host.Options.GPUs[1].UUID
	procDir, err := h.host.ProcGPUDir(1)
	if err != nil {
		t.Fatal(err)
	}
	bus1 := filepath.Base(procDir)
	both := []string{"/dev/nvidia0", "/dev/nvidia1"}
	if r, nodes, _, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=all"); r.code != 0 || strings.Join(nodes, " ") != strings.Join(both, " ") {
		t.Fatalf("healthy host: exit %d, nodes %q\n%s", r.code, nodes, r.stderr)
	}

	signals := []struct {
		description string
		set, unset  func(t *testing.T)
		why         func(t *testing.T) string // GPU 1's reason, as the messages give it
		fix         string
	}{
		{description: "recorded with gpu-ctk health mark",
			set: func(t *testing.T) {
				out := h.ctk(t, 0, "health", "mark", gpu1, "--reason", "fan failure reported by the BMC")
				if want := "recorded " + gpu1 + " as unhealthy: fan failure reported by the BMC (in " + h.file + "); gpu-runtime gives it to no container until gpu-ctk health clear " + gpu1 + "\n"; out != want {
					t.Errorf("mark: %q\nwant %q", out, want)
				}
			},
			unset: func(t *testing.T) {
				if out := h.ctk(t, 0, "health", "clear", gpu1); out != "cleared "+gpu1+": gpu-runtime gives it to containers again\n" {
					t.Errorf("clear: %q", out)
				}
			},
			why: func(t *testing.T) string {
				return "fan failure reported by the BMC since " + h.record(t, gpu1).Since.UTC().Format(time.RFC3339) + " (recorded in " + h.file + ")"
			},
			fix: healthClear + gpu1},
		{description: "GPU Excluded: Yes",
			set:   func(t *testing.T) { must(t, h.host.SetGPUExcluded(1, true)) },
			unset: func(t *testing.T) { must(t, h.host.SetGPUExcluded(1, false)) },
			why: func(*testing.T) string {
				return `excluded by the administrator: /proc/driver/nvidia/gpus/` + bus1 + `/information says "GPU Excluded: Yes" (NVreg_ExcludedGpus)`
			},
			fix: excludedFix},
		{description: "its /proc entry gone",
			set:   func(t *testing.T) { must(t, os.RemoveAll(procDir)) },
			unset: func(t *testing.T) { must(t, h.host.SetGPUExcluded(1, false)) },
			why: func(*testing.T) string {
				return "gone: the driver has no /proc/driver/nvidia/gpus/" + bus1 + " (the GPU fell off the bus, or was removed)"
			},
			fix: goneFix},
	}
	for _, s := range signals {
		t.Run(s.description, func(t *testing.T) {
			s.set(t)
			why := s.why(t)
			fix := strings.TrimPrefix(s.fix, "; ask for another device, or ")

			want := `gpu-runtime: plan GPU injection: unhealthy device: "1" in NVIDIA_VISIBLE_DEVICES names GPU 1 (` + gpu1 + `): ` + why + s.fix
			r, _, _, lastErr := h.create(t, "NVIDIA_VISIBLE_DEVICES=1")
			if r.code == 0 || lastErr != want || !strings.Contains(r.stderr, want) {
				t.Errorf("NVIDIA_VISIBLE_DEVICES=1: exit %d\nlog:  %s\nwant: %s\nstderr: %s", r.code, lastErr, want, r.stderr)
			}
			r, _, _, lastErr = h.create(t, "NVIDIA_VISIBLE_DEVICES="+gpu1)
			if want := `gpu-runtime: plan GPU injection: unhealthy device: "` + gpu1 + `" in NVIDIA_VISIBLE_DEVICES names GPU 1 (` + gpu1 + `): ` + why + s.fix; r.code == 0 || lastErr != want {
				t.Errorf("by UUID: exit %d\nlog:  %s\nwant: %s", r.code, lastErr, want)
			}

			r, nodes, warnings, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=all")
			wantWarning := "NVIDIA_VISIBLE_DEVICES=all: unhealthy GPU 1 (" + gpu1 + "): " + why + " left out (" + fix + ")"
			if r.code != 0 || strings.Join(nodes, " ") != "/dev/nvidia0" || !contains(warnings, wantWarning) {
				t.Errorf("all: exit %d, nodes %q, warnings %q\nwant the warning %q\n%s", r.code, nodes, warnings, wantWarning, r.stderr)
			}
			if r, nodes, _, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=0"); r.code != 0 || strings.Join(nodes, " ") != "/dev/nvidia0" {
				t.Errorf("the healthy GPU 0: exit %d, nodes %q\n%s", r.code, nodes, r.stderr)
			}

			h.health(t, "all = \"fail\"\n")
			r, _, _, lastErr = h.create(t, "NVIDIA_VISIBLE_DEVICES=all")
			want = "gpu-runtime: plan GPU injection: unhealthy device: NVIDIA_VISIBLE_DEVICES=all includes GPU 1 (" + gpu1 + "): " + why +
				`; with health.all = "fail" such a container does not start: fix or clear the device (gpu-ctk health), or set health.all = "skip"`
			if r.code == 0 || lastErr != want {
				t.Errorf(`health.all = "fail": exit %d\nlog:  %s\nwant: %s`, r.code, lastErr, want)
			}
			h.health(t, "")

			s.unset(t)
			if r, nodes, warnings, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=all"); r.code != 0 || strings.Join(nodes, " ") != strings.Join(both, " ") || len(warnings) != 0 {
				t.Errorf("after the signal is gone: exit %d, nodes %q, warnings %q\n%s", r.code, nodes, warnings, r.stderr)
			}
		})
	}

	t.Run("untrusted health files are ignored with a warning", func(t *testing.T) {
		if len(gpu0) == 0 {
			t.Fatal("no GPU 0")
		}
		valid := "uuid,reason,xid,since\n" + gpu1 + ",Xid 79,79,2026-11-25T10:00:00Z\n"
		untrusted := []struct {
			description string
			write       func(t *testing.T)
			warning     string
		}{
			{"corrupt", func(t *testing.T) { writeFileMode(t, h.file, valid+gpu1+",Xid 79\n", 0o600) },
				"health file " + h.file + " ignored: not a health file: line 3: 2 fields, want 4 (uuid, reason, xid, since)"},
			{"not root's", func(t *testing.T) {
				writeFileMode(t, h.file, valid, 0o600)
				must(t, os.Chown(h.file, 1000, 1000))
			}, "health file " + h.file + " ignored: owned by uid 1000, not 0"},
			{"readable by others", func(t *testing.T) { writeFileMode(t, h.file, valid, 0o644) },
				"health file " + h.file + " ignored: mode 0644, not 0600"},
			{"a symbolic link", func(t *testing.T) {
				writeFileMode(t, h.file+".real", valid, 0o600)
				must(t, os.Symlink(h.file+".real", h.file))
			}, "health file " + h.file + " ignored: it is a symbolic link"},
		}
		for _, u := range untrusted {
			t.Run(u.description, func(t *testing.T) {
				_ = os.Remove(h.file)
				u.write(t)
				defer os.Remove(h.file)
				r, nodes, warnings, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=1")
				want := u.warning + "; no device is held back by it until it is fixed (gpu-ctk health clear all rewrites it)"
				if r.code != 0 || strings.Join(nodes, " ") != "/dev/nvidia1" || !contains(warnings, want) {
					t.Errorf("exit %d, nodes %q, warnings %q\nwant the warning %q\n%s", r.code, nodes, warnings, want, r.stderr)
				}
			})
		}
		// gpu-ctk health clear all replaces such a file with a trusted one.
		writeFileMode(t, h.file, valid, 0o644)
		h.ctk(t, 0, "health", "clear", "all")
		if fi, err := os.Stat(h.file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("after clear all: %v %v", fi, err)
		}
		if records, err := discover.ReadHealthFile(h.file); err != nil || len(records) != 0 {
			t.Errorf("after clear all: %+v %v", records, err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func writeFileMode(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o700))
	must(t, os.WriteFile(p, []byte(content), mode))
	must(t, os.Chmod(p, mode))
}

// watchProcess is a running gpu-ctk health watch.
type watchProcess struct {
	cmd *exec.Cmd
	log string
}

func (h *healthEnv) startWatch(t *testing.T) *watchProcess {
	t.Helper()
	w := &watchProcess{log: filepath.Join(t.TempDir(), "watch.log")}
	f, err := os.OpenFile(w.log, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w.cmd = exec.Command(filepath.Join(binDir, "gpu-ctk"), "health", "watch")
	w.cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+h.config)
	w.cmd.Stdout, w.cmd.Stderr = f, f
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})
	return w
}

// waitLog waits for the watcher to log a line containing each of parts, after the n-th such
// line: it returns the count of such lines.
func (w *watchProcess) waitLog(t *testing.T, n int, parts ...string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, _ := os.ReadFile(w.log)
		count := 0
		for _, l := range strings.Split(string(data), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(l, p)
			}
			if all {
				count++
			}
		}
		if count > n {
			return count
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher did not log %q (%d times so far):\n%s", parts, count, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthWatch: gpu-ctk health watch, on a host with GPU 0 in MIG mode (two MIG devices)
// and GPU 1 whole, records an Xid 79 of GPU 1, ignores an Xid 13, and marks only the MIG
// device a MIG-scoped Xid names; gpu-runtime then leaves exactly those out; the watcher
// survives the driver being unloaded and loaded again; info, doctor and gpu-ctk health show
// it all; SIGTERM stops it.
func TestHealthWatch(t *testing.T) {
	opts := fakehost.Default(2)
	must(t, opts.GPUs[0].AddMIGDevices("3g.40gb", "3g.40gb"))
	h := newHealthEnv(t, opts)
	gpu0, gpu1 := h.host.Options.GPUs[0].UUID, h.host.Options.GPUs[1].UUID
	mig := h.host.MIGDevices()
	w := h.startWatch(t)
	w.waitLog(t, 0, "watching 2 GPU(s) for Xid and double-bit ECC errors")

	must(t, h.host.AppendXid(gpu1, 13))
	w.waitLog(t, 0, "Xid 13 ignored: an application's error, not the GPU's (health.ignore-xids)", "gpu="+gpu1)
	if _, err := os.Stat(h.file); err == nil {
		t.Errorf("an ignored Xid wrote the health file")
	}
	must(t, h.host.AppendXid(gpu1, 79))
	w.waitLog(t, 0, "Xid 79: GPU has fallen off the bus: recorded "+gpu1+" as unhealthy")
	must(t, h.host.AppendXid(mig[1].UUID, 94))
	w.waitLog(t, 0, "Xid 94: contained ECC error: recorded "+mig[1].UUID+" as unhealthy", fmt.Sprintf("gpu_instance=%d", mig[1].GI))

	records, err := discover.ReadHealthFile(h.file)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range records {
		got = append(got, fmt.Sprintf("%s %s %d", r.UUID, r.Reason, r.Xid))
		if time.Since(r.Since) > time.Minute || time.Since(r.Since) < -time.Second {
			t.Errorf("record %+v: since is not now", r)
		}
	}
	want := []string{gpu1 + " Xid 79: GPU has fallen off the bus 79", mig[1].UUID + " Xid 94: contained ECC error 94"}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// gpu-runtime: all is MIG device 0:0 only; 0:1 and GPU 1 by name are refused.
	r, nodes, warnings, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=all")
	wantNodes := []string{"/dev/nvidia-caps/nvidia-cap" + fmt.Sprint(mig[0].CICapMinor), "/dev/nvidia-caps/nvidia-cap" + fmt.Sprint(mig[0].GICapMinor), "/dev/nvidia0"}
	sort.Strings(wantNodes)
	if r.code != 0 || strings.Join(nodes, " ") != strings.Join(wantNodes, " ") || len(warnings) != 2 {
		t.Errorf("all: exit %d, nodes %q (want %q), warnings %q\n%s", r.code, nodes, wantNodes, warnings, r.stderr)
	}
	since := func(uuid string) string { return h.record(t, uuid).Since.UTC().Format(time.RFC3339) }
	r, _, _, lastErr := h.create(t, "NVIDIA_VISIBLE_DEVICES=0:1")
	wantErr := fmt.Sprintf(`gpu-runtime: plan GPU injection: unhealthy device: "0:1" in NVIDIA_VISIBLE_DEVICES names MIG device 0:1 (%s, 3g.40gb): Xid 94: contained ECC error since %s (recorded in %s)%s%s`,
		mig[1].UUID, since(mig[1].UUID), h.file, healthClear, mig[1].UUID)
	if r.code == 0 || lastErr != wantErr {
		t.Errorf("0:1: exit %d\nlog:  %s\nwant: %s", r.code, lastErr, wantErr)
	}
	if r, nodes, _, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=0:0"); r.code != 0 || len(nodes) != 3 {
		t.Errorf("its sibling 0:0: exit %d, nodes %q\n%s", r.code, nodes, r.stderr)
	}

	// gpu-ctk health, info and doctor say so.
	out := h.ctk(t, 0, "health")
	for _, line := range []string{
		"INDEX  UUID",
		"0      " + gpu0 + "  healthy    -",
		fmt.Sprintf("  0:0  %s  healthy    -", mig[0].UUID),
		fmt.Sprintf("  0:1  %s  unhealthy  %s  94   Xid 94: contained ECC error", mig[1].UUID, since(mig[1].UUID)),
		fmt.Sprintf("1      %s  unhealthy  %s  79   Xid 79: GPU has fallen off the bus", gpu1, since(gpu1)),
	} {
		if !strings.Contains(out, line) {
			t.Errorf("gpu-ctk health lacks %q:\n%s", line, out)
		}
	}
	var devices []ctk.DeviceHealth
	must(t, json.Unmarshal([]byte(h.ctk(t, 0, "health", "--json")), &devices))
	if len(devices) != 4 || devices[3].UUID != gpu1 || devices[3].State != "unhealthy" || devices[3].Health.Xid != 79 || devices[3].Health.Signal != "recorded" || devices[1].State != "healthy" {
		t.Errorf("health --json: %+v", devices)
	}
	info := h.ctk(t, 0, "info")
	wantInfo := fmt.Sprintf("\nUnhealthy (given to no container; gpu-ctk health):\n  MIG device 0:1 (%s, 3g.40gb): Xid 94: contained ECC error since %s (recorded in %s)\n  GPU 1 (%s): Xid 79: GPU has fallen off the bus since %s (recorded in %s)\n",
		mig[1].UUID, since(mig[1].UUID), h.file, gpu1, since(gpu1), h.file)
	if !strings.HasSuffix(info, wantInfo) {
		t.Errorf("info:\n%s\nwant it to end with\n%s", info, wantInfo)
	}
	doctorOut, _ := gpuCTK(t, h.env, "doctor", "--json")
	var checks []ctk.Check
	must(t, json.Unmarshal([]byte(doctorOut), &checks))
	var health *ctk.Check
	for i := range checks {
		if checks[i].Check == "health" {
			health = &checks[i]
		}
	}
	wantDetail := fmt.Sprintf("2 of 3 device(s) given to no container: MIG device 0:1 (%s, 3g.40gb): Xid 94: contained ECC error since %s (recorded in %s); GPU 1 (%s): Xid 79: GPU has fallen off the bus since %s (recorded in %s)",
		mig[1].UUID, since(mig[1].UUID), h.file, gpu1, since(gpu1), h.file)
	if health == nil || health.Status != "warn" || health.Detail != wantDetail ||
		health.Fix != "repair or replace them (gpu-ctk health says why each is held back); gpu-ctk health clear UUID returns a recorded one to service" {
		t.Errorf("doctor's health check: %+v\nwant detail %s", health, wantDetail)
	}

	// The driver goes away and comes back: the watcher lets NVML go, waits, and watches again.
	must(t, h.host.UnloadDriver())
	w.waitLog(t, 0, "NVML stopped answering (the driver or a GPU went away?); releasing it and initialising it again")
	w.waitLog(t, 0, "NVML cannot be initialised; trying again in 1s", "Driver Not Loaded")
	must(t, h.host.LoadDriver())
	w.waitLog(t, 1, "watching 2 GPU(s) for Xid and double-bit ECC errors")
	must(t, h.host.AppendNVMLEvent(gpu0+" dbe"))
	w.waitLog(t, 0, "double-bit ECC error: recorded "+gpu0+" as unhealthy")
	if r, _, _, lastErr := h.create(t, "NVIDIA_VISIBLE_DEVICES=0:0"); r.code == 0 || !strings.Contains(lastErr, fmt.Sprintf(`names MIG device 0:0 (%s, 3g.40gb): its GPU 0 (%s): double-bit ECC error since `, mig[0].UUID, gpu0)) {
		t.Errorf("a MIG device of a GPU recorded whole: exit %d: %s", r.code, lastErr)
	}

	must(t, w.cmd.Process.Signal(syscall.SIGTERM))
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
	w.waitLog(t, 0, "health watch: stopped")
}

// TestHealthBootUnit: the packaged gpu-runtime-health.service runs gpu-ctk health watch,
// which, run as the unit says, watches a fake host and stops cleanly on SIGTERM (what
// systemctl stop sends), reloading on SIGHUP (systemctl reload).
func TestHealthBootUnit(t *testing.T) {
	h := newHealthEnv(t, fakehost.Default(2))
	unit, err := os.ReadFile("../../packaging/systemd/gpu-runtime-health.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	argv := strings.Fields(keys["ExecStart"])
	if strings.Join(argv, " ") != "/usr/bin/gpu-ctk health watch" || keys["ExecReload"] != "/bin/kill -HUP $MAINPID" || keys["Type"] != "simple" || keys["WantedBy"] != "multi-user.target" {
		t.Fatalf("unit: %q", keys)
	}
	w := &watchProcess{log: filepath.Join(t.TempDir(), "watch.log")}
	f, err := os.OpenFile(w.log, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w.cmd = exec.Command(filepath.Join(binDir, "gpu-ctk"), argv[1:]...)
	w.cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+h.config)
	w.cmd.Stdout, w.cmd.Stderr = f, f
	must(t, w.cmd.Start())
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})
	w.waitLog(t, 0, "watching 2 GPU(s)")
	must(t, w.cmd.Process.Signal(syscall.SIGHUP))
	w.waitLog(t, 0, "SIGHUP: re-initialising NVML")
	w.waitLog(t, 1, "watching 2 GPU(s)")
	must(t, h.host.AppendXid(h.host.Options.GPUs[0].UUID, 79))
	w.waitLog(t, 0, "recorded "+h.host.Options.GPUs[0].UUID+" as unhealthy")
	must(t, w.cmd.Process.Signal(syscall.SIGTERM))
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("systemctl stop (SIGTERM): %v", err)
	}
}

// TestHealthCDI: CDI names resolved by gpu-runtime (containerd 1.6, docker 20.10) are held to
// the same rule; a CDI device cannot leave a device out, so nvidia.com/gpu=all fails too.
func TestHealthCDI(t *testing.T) {
	h := newHealthEnv(t, fakehost.Default(2))
	dir := t.TempDir()
	h.health(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", dir))
	h.ctk(t, 0, "cdi", "generate", "--output", filepath.Join(dir, "nvidia.yaml"))
	gpu1 := h.host.Options.GPUs[1].UUID
	h.ctk(t, 0, "health", "mark", gpu1, "--reason", "maintenance")
	why := "maintenance since " + h.record(t, gpu1).Since.UTC().Format(time.RFC3339) + " (recorded in " + h.file + ")"
	for _, name := range []string{"nvidia.com/gpu=1", "nvidia.com/gpu=all"} {
		r, _, _, lastErr := h.create(t, "NVIDIA_VISIBLE_DEVICES="+name)
		want := `gpu-runtime: plan GPU injection: unhealthy device: CDI devices "` + name + `" give GPU 1 (` + gpu1 + `): ` + why + ` (when it is repaired, or the record was a false alarm, return it to service: gpu-ctk health clear ` + gpu1 + `); ask for other devices`
		if r.code == 0 || lastErr != want {
			t.Errorf("%s: exit %d\nlog:  %s\nwant: %s", name, r.code, lastErr, want)
		}
	}
	if r, nodes, _, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"); r.code != 0 || strings.Join(nodes, " ") != "/dev/nvidia0" {
		t.Errorf("nvidia.com/gpu=0: exit %d, nodes %q\n%s", r.code, nodes, r.stderr)
	}
	// CDI devices need no discovery: where it fails, health is not checked, and they still work.
	broken := t.TempDir()
	h.host = withDriverRoot(h.host, broken)
	h.health(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n", dir))
	r, nodes, warnings, _ := h.create(t, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1")
	// NVML is asked in gpu-ctk's own process (cdi inject), not through a gpu-ctk child.
	want := `the health of the GPUs of CDI devices "nvidia.com/gpu=1" is not checked: NVML library not found: load libnvidia-ml.so.1 from driver root "` + broken + `": tried `
	if r.code != 0 || strings.Join(nodes, " ") != "/dev/nvidia1" || len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
		t.Errorf("without discovery: exit %d, nodes %q, warnings %q\nwant a warning starting %q\n%s", r.code, nodes, warnings, want, r.stderr)
	}
}

// TestHealthByIndex (issue 25 item 11): health mark and clear take the indices gpu-ctk health
// prints (a GPU's, a MIG device's "0:1"), the table shows the Xid stored with a record, and
// clearing a device that is not marked exits 1 saying so.
func TestHealthByIndex(t *testing.T) {
	opts := fakehost.Default(2)
	must(t, opts.GPUs[0].AddMIGDevices("3g.40gb", "3g.40gb"))
	h := newHealthEnv(t, opts)
	gpu1 := h.host.Options.GPUs[1].UUID
	mig := h.host.MIGDevices()

	out := h.ctk(t, 0, "health", "mark", "1", "--reason", "fan failure reported by the BMC", "--xid", "79")
	if want := "recorded " + gpu1 + " as unhealthy: fan failure reported by the BMC (in " + h.file + "); gpu-runtime gives it to no container until gpu-ctk health clear " + gpu1 + "\n"; out != want {
		t.Errorf("mark 1: %q\nwant %q", out, want)
	}
	h.ctk(t, 0, "health", "mark", "0:1", "--reason", "maintenance")
	if r := h.record(t, mig[1].UUID); r.Reason != "maintenance" || r.Xid != 0 {
		t.Errorf("0:1's record: %+v", r)
	}
	since := h.record(t, gpu1).Since.UTC().Format(time.RFC3339)
	out = h.ctk(t, 0, "health")
	for _, line := range []string{
		"INDEX  UUID                                      STATE      SINCE                 XID  REASON\n",
		fmt.Sprintf("1      %s  unhealthy  %s  79   fan failure reported by the BMC\n", gpu1, since),
		fmt.Sprintf("  0:0  %s  healthy    -                     -    -\n", mig[0].UUID),
		fmt.Sprintf("  0:1  %s  unhealthy  %s  -    maintenance\n", mig[1].UUID, h.record(t, mig[1].UUID).Since.UTC().Format(time.RFC3339)),
	} {
		if !strings.Contains(out, line) {
			t.Errorf("gpu-ctk health lacks %q:\n%s", line, out)
		}
	}

	// An index this host does not have names what it has; nothing is recorded.
	stderr := func(args ...string) (string, int) { // gpu-ctk's error, and its exit status
		cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...)
		cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+h.config)
		var b strings.Builder
		cmd.Stderr = &b
		_ = cmd.Run()
		return b.String(), cmd.ProcessState.ExitCode()
	}
	out, code := stderr("health", "mark", "0:7", "--reason", "x")
	if want := "gpu-ctk: no GPU or MIG device 0:7 on this host: it has 0, 0:0, 0:1, 1 (gpu-ctk health lists them)\n"; code != 1 || out != want {
		t.Errorf("mark 0:7: exit %d %q\nwant %q", code, out, want)
	}

	if out := h.ctk(t, 0, "health", "clear", "0:1"); out != "cleared "+mig[1].UUID+": gpu-runtime gives it to containers again\n" {
		t.Errorf("clear 0:1: %q", out)
	}
	out, code = stderr("health", "clear", "0:1")
	if want := "gpu-ctk: no health record: 0:1 (" + mig[1].UUID + ") is not marked unhealthy: the health file " + h.file + " has no record of it, so there is nothing to clear; gpu-ctk health shows why a device is held back (the driver's /proc may say so: that clears when the driver does)\n"; code != 1 || out != want {
		t.Errorf("clear 0:1 again: exit %d %q\nwant %q", code, out, want)
	}
	h.ctk(t, 0, "health", "clear", "1")
	if records, err := discover.ReadHealthFile(h.file); err != nil || len(records) != 0 {
		t.Errorf("after clearing both: %+v %v", records, err)
	}
}

// TestHealthLeftOutEnv (issue 25 item 9): NVIDIA_VISIBLE_DEVICES=all with an unhealthy GPU runs
// with the others and the container sees which device was left out and why in
// GPU_RUNTIME_DEVICES_LEFT_OUT (runc's log, where the warning also goes, is deleted with a
// docker container); a container that lost nothing has no such variable.
func TestHealthLeftOutEnv(t *testing.T) {
	h := newHealthEnv(t, fakehost.Default(2))
	gpu1 := h.host.Options.GPUs[1].UUID
	probe := `echo "left=${GPU_RUNTIME_DEVICES_LEFT_OUT-unset}"; ` + nodeProbe
	left := func(t *testing.T) (string, []string) {
		t.Helper()
		b := h.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, probe)
		r := h.run(t, b)
		if r.code != 0 {
			t.Fatalf("all: exit %d\n%s", r.code, r.stderr)
		}
		var value string
		var nodes []string
		for _, l := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "left="); ok {
				value = v
			}
			if n, ok := strings.CutPrefix(l, "dev "); ok {
				nodes = append(nodes, n)
			}
		}
		return value, nodes
	}
	if value, nodes := left(t); value != "unset" || len(nodes) != 2 {
		t.Errorf("healthy host: left=%q, nodes %q", value, nodes)
	}
	h.ctk(t, 0, "health", "mark", gpu1, "--reason", "fan failure reported by the BMC", "--xid", "79")
	if value, nodes := left(t); value != "1 "+gpu1+" fan failure reported by the BMC" || strings.Join(nodes, " ") != "/dev/nvidia0" {
		t.Errorf("GPU 1 marked: left=%q, nodes %q", value, nodes)
	}
}

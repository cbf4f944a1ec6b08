package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// These tests hand what gpu-ctk writes to the real engines. They skip, loudly, when an engine
// is not installed (apt-get install -y containerd docker.io).

// installedContainerdConfigVersion returns the config version the installed containerd reads.
func installedContainerdConfigVersion(t *testing.T) int {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("SKIPPED: containerd is not installed (apt-get install -y containerd): the generated config is not checked by containerd itself")
	}
	out, err := exec.Command("containerd", "--version").Output()
	if err != nil {
		t.Fatalf("containerd --version: %v", err)
	}
	version, err := ContainerdConfigVersionFor(string(out))
	if err != nil {
		t.Fatal(err)
	}
	return version
}

// containerdDump returns `containerd --config main config dump`, parsed.
func containerdDump(t *testing.T, main string) map[string]any {
	t.Helper()
	cmd := exec.Command("containerd", "--config", main, "config", "dump")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, stderr.String())
	}
	doc, err := parseTOML(out)
	if err != nil {
		t.Fatalf("parse the dump: %v\n%s", err, out)
	}
	return doc
}

func TestRealContainerdConfigDump(t *testing.T) {
	version := installedContainerdConfigVersion(t)
	plugin := criPlugin(version)
	withCRI := map[int]string{2: mainV2, 3: mainV3}[version]
	testCases := []struct {
		description  string
		main         string // "" for no main config
		setAsDefault bool
		wantDefault  string
		wantKept     map[string]any // CRI keys that must survive
	}{
		{
			description: "no main config",
			wantDefault: "runc",
		},
		{
			description:  "main config with CRI settings, set as default",
			main:         withCRI,
			setAsDefault: true,
			wantDefault:  "gpu",
			wantKept:     map[string]any{"sandbox_image": "registry.k8s.io/pause:3.9"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions()
			opts.ConfigPath = filepath.Join(dir, "config.toml")
			opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
			opts.ContainerdConfigVersion = version
			opts.SetAsDefault = tc.setAsDefault
			if tc.main != "" {
				writeFile(t, opts.ConfigPath, tc.main, 0o644)
			}
			mustApply(t, mustPlan(t, true, Containerd, opts), testNow)

			dump := containerdDump(t, opts.ConfigPath)
			section, ok, err := subTable(dump, "plugins", plugin)
			if err != nil || !ok {
				t.Fatalf("no %s section in the dump (%v)", plugin, err)
			}
			gpu, ok, _ := subTable(section, "containerd", "runtimes", "gpu")
			if !ok {
				t.Fatalf("containerd does not see runtime gpu; runtimes: %v", section["containerd"])
			}
			if gpu["runtime_type"] != runcShim {
				t.Errorf("runtime_type = %v", gpu["runtime_type"])
			}
			if bin, _ := stringAt(gpu, "options", "BinaryName"); bin != testRuntimePath {
				t.Errorf("BinaryName = %q, want %q", bin, testRuntimePath)
			}
			// The CRI hands the gpu runtime a container's CDI annotations only when it lists them.
			if got := gpu["container_annotations"]; !reflect.DeepEqual(got, []any{"cdi.k8s.io/*"}) {
				t.Errorf("container_annotations = %#v, want [cdi.k8s.io/*]", got)
			}
			runc, ok, _ := subTable(section, "containerd", "runtimes", "runc")
			if !ok {
				t.Errorf("containerd lost runtime runc")
			}
			if tc.main != "" {
				for _, rt := range []map[string]any{runc, gpu} {
					if systemd, _, _ := subTable(rt, "options"); systemd["SystemdCgroup"] != true {
						t.Errorf("SystemdCgroup lost: %v", rt["options"])
					}
				}
			}
			if def, _ := stringAt(section, "containerd", "default_runtime_name"); def != tc.wantDefault {
				t.Errorf("default_runtime_name = %q, want %q", def, tc.wantDefault)
			}
			if version == 2 { // containerd 2.x moves these to other plugins; mainV3 has none
				for k, v := range tc.wantKept {
					if section[k] != v {
						t.Errorf("CRI %s = %v, want %v: the main config's setting was lost", k, section[k], v)
					}
				}
				if tc.main != "" {
					if binDir, _ := stringAt(section, "cni", "bin_dir"); binDir != "/usr/lib/cni" {
						t.Errorf("CRI cni.bin_dir = %q: the main config's setting was lost", binDir)
					}
				}
			}

			// Unconfigured, containerd sees no gpu runtime and still loads; a config configure
			// created is gone again.
			mustApply(t, mustPlan(t, false, Containerd, opts), testNow.Add(time.Second))
			if tc.main == "" {
				if _, err := os.Stat(opts.ConfigPath); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the config configure created is still there after unconfigure: %v", err)
				}
				return
			}
			dump = containerdDump(t, opts.ConfigPath)
			if _, ok, _ := subTable(dump, "plugins", plugin, "containerd", "runtimes", "gpu"); ok {
				t.Errorf("runtime gpu still configured after unconfigure")
			}
		})
	}
}

// TestRealContainerdKeepsImportedSettings: CRI settings that come from another imported file
// survive, because the version 2 drop-in carries them.
func TestRealContainerdKeepsImportedSettings(t *testing.T) {
	if installedContainerdConfigVersion(t) != 2 {
		t.Skip("SKIPPED: containerd 2.x merges imported plugin sections key by key; covered by TestRealContainerdConfigDump")
	}
	dir := t.TempDir()
	opts := testOptions()
	opts.ConfigPath = filepath.Join(dir, "config.toml")
	opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	writeFile(t, opts.ConfigPath, "version = 2\nimports = ['other/*.toml']\n", 0o644)
	writeFile(t, filepath.Join(dir, "other", "10-registry.toml"), `version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
`, 0o644)
	mustApply(t, mustPlan(t, true, Containerd, opts), testNow)
	dump := containerdDump(t, opts.ConfigPath)
	if got, _ := stringAt(dump, "plugins", containerdV2Plugin, "registry", "config_path"); got != "/etc/containerd/certs.d" {
		t.Errorf("registry.config_path = %q: the imported setting was lost", got)
	}
	if bin, _ := stringAt(dump, "plugins", containerdV2Plugin, "containerd", "runtimes", "gpu", "options", "BinaryName"); bin != testRuntimePath {
		t.Errorf("BinaryName = %q", bin)
	}
}

// TestRealContainerdCRIDrift: with containerd 1.x, a CRI setting of config.toml changed after
// configure does not take effect (the drop-in's copy of the section wins), which is why
// configure's plan reports it as stale; configuring again makes containerd read the change.
func TestRealContainerdCRIDrift(t *testing.T) {
	if installedContainerdConfigVersion(t) != 2 {
		t.Skip("SKIPPED: containerd 2.x merges imported plugin sections key by key: no copy to go stale")
	}
	dir := t.TempDir()
	opts := testOptions()
	opts.ConfigPath = filepath.Join(dir, "config.toml")
	opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	writeFile(t, opts.ConfigPath, mainV2, 0o644)
	mustApply(t, mustPlan(t, true, Containerd, opts), testNow)
	writeFile(t, opts.ConfigPath, strings.Replace(readFileString(t, opts.ConfigPath), "pause:3.9", "pause:3.10", 1), 0o644)
	if got, _ := stringAt(containerdDump(t, opts.ConfigPath), "plugins", containerdV2Plugin, "sandbox_image"); got != "registry.k8s.io/pause:3.9" {
		t.Errorf("containerd reads sandbox_image %q after the edit: containerd no longer lets the drop-in shadow config.toml; the stale check may be unnecessary", got)
	}
	p := mustPlan(t, true, Containerd, opts)
	if len(p.Stale) != 1 {
		t.Fatalf("stale %q, want the CRI section named", p.Stale)
	}
	mustApply(t, p, testNow)
	if got, _ := stringAt(containerdDump(t, opts.ConfigPath), "plugins", containerdV2Plugin, "sandbox_image"); got != "registry.k8s.io/pause:3.10" {
		t.Errorf("containerd reads sandbox_image %q after configuring again, want registry.k8s.io/pause:3.10", got)
	}
}

// TestRealContainerdMigrationFromNVIDIA: containerd 1.x itself reads gpu-runtime as the CRI
// handler "nvidia", the default, after configure --runtime-name nvidia --set-as-default on a
// config.toml NVIDIA's toolkit configured; and NVIDIA's runtime again after unconfigure.
func TestRealContainerdMigrationFromNVIDIA(t *testing.T) {
	if installedContainerdConfigVersion(t) != 2 {
		t.Skip("SKIPPED: nvidiaCTKContainerdConfig is containerd 1.x's layout")
	}
	dir := t.TempDir()
	opts := testOptions()
	opts.RuntimeName = "nvidia"
	opts.SetAsDefault = true
	opts.ConfigPath = filepath.Join(dir, "config.toml")
	opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	writeFile(t, opts.ConfigPath, nvidiaCTKContainerdConfig, 0o644)
	cri := []string{"plugins", containerdV2Plugin, "containerd"}
	check := func(when, wantBinary string) {
		t.Helper()
		dump := containerdDump(t, opts.ConfigPath)
		def, _ := stringAt(dump, append(cri, "default_runtime_name")...)
		bin, _ := stringAt(dump, append(cri, "runtimes", "nvidia", "options", "BinaryName")...)
		if def != "nvidia" || bin != wantBinary {
			t.Errorf("%s: containerd reads default_runtime_name %q and runtime nvidia's BinaryName %q; want nvidia and %q", when, def, bin, wantBinary)
		}
	}
	mustApply(t, mustPlan(t, true, Containerd, opts), testNow)
	check("after configure", testRuntimePath)
	mustApply(t, mustPlan(t, false, Containerd, opts), testNow)
	check("after unconfigure", "/usr/bin/nvidia-container-runtime")
}

// TestRealContainerdMinimalDropInLosesSettings documents why the version 2 drop-in carries
// the CRI section: containerd 1.x replaces the section whole. When containerd stops doing
// that, the copy becomes unnecessary and this test says so.
func TestRealContainerdMinimalDropInLosesSettings(t *testing.T) {
	if installedContainerdConfigVersion(t) != 2 {
		t.Skip("SKIPPED: containerd 2.x merges imported plugin sections key by key")
	}
	dir := t.TempDir()
	main := filepath.Join(dir, "config.toml")
	drop := filepath.Join(dir, "minimal.toml")
	writeFile(t, main, fmt.Sprintf("version = 2\nimports = [%s]\n", quote.TOMLString(drop))+mainV2[strings.Index(mainV2, "[plugins]"):], 0o644)
	writeFile(t, drop, "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu]\n  runtime_type = \"io.containerd.runc.v2\"\n", 0o644)
	dump := containerdDump(t, main)
	if _, ok, _ := subTable(dump, "plugins", containerdV2Plugin, "containerd", "runtimes", "runc"); ok {
		t.Errorf("containerd kept runc next to a minimal drop-in: the copied CRI section may no longer be needed")
	}
}

// TestRealContainerdCRIPluginLoads starts an isolated containerd on the configured files and
// checks that its CRI plugin accepted them. (With a drop-in naming only our runtime,
// containerd 1.x fails the CRI plugin: "no corresponding runtime configured in
// containerd.runtimes for default_runtime_name = runc".)
func TestRealContainerdCRIPluginLoads(t *testing.T) {
	version := installedContainerdConfigVersion(t)
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("SKIPPED: ctr is not installed (it comes with the containerd package)")
	}
	if os.Getenv("GPU_RUNTIME_E2E") == "" {
		t.Skip("SKIPPED: starting a real containerd needs GPU_RUNTIME_E2E=1 (make test / make e2e)")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: starting a real containerd needs root")
	}
	dir, err := os.MkdirTemp("/tmp", "gpuctk-ctrd-") // short: the socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	opts := testOptions()
	opts.ConfigPath = filepath.Join(dir, "config.toml")
	opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	// runc stays the default: the CRI plugin then fails unless the drop-in keeps runc.
	writeFile(t, opts.ConfigPath, fmt.Sprintf(`version = %d
root = %s
state = %s
[grpc]
  address = %s
[ttrpc]
  address = %s
[plugins.%s.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.%s.containerd.runtimes.runc.options]
  SystemdCgroup = false
`, version, quote.TOMLString(filepath.Join(dir, "root")), quote.TOMLString(filepath.Join(dir, "state")),
		quote.TOMLString(sock), quote.TOMLString(sock+".ttrpc"), quote.TOMLString(criPlugin(version)), quote.TOMLString(criPlugin(version))), 0o644)
	mustApply(t, mustPlan(t, true, Containerd, opts), testNow)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var log bytes.Buffer
	daemon := exec.CommandContext(ctx, "containerd", "--config", opts.ConfigPath)
	daemon.Stdout, daemon.Stderr = &log, &log
	daemon.Cancel = func() error { return daemon.Process.Signal(syscall.SIGTERM) }
	daemon.WaitDelay = 20 * time.Second
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	t.Cleanup(func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = daemon.Process.Kill()
		}
	})
	var plugins string
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("containerd exited (%v):\n%s", err, log.String())
		default:
		}
		out, err := exec.Command("ctr", "--address", sock, "plugins", "ls").Output()
		if err == nil {
			plugins = string(out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer: %v\n%s", err, log.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	cri := 0
	for _, line := range strings.Split(plugins, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 || !strings.Contains(fields[0], "cri") && fields[1] != "cri" {
			continue
		}
		cri++
		t.Logf("%s", line)
		if status := fields[len(fields)-1]; status != "ok" {
			t.Errorf("CRI plugin %s/%s: %s\n%s\n%s", fields[0], fields[1], status, readFile(t, opts.DropInPath), log.String())
		}
	}
	if cri == 0 {
		t.Errorf("no CRI plugin listed:\n%s", plugins)
	}
}

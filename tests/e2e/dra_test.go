package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/dra"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// TestKubeletPluginBinary runs the real gpu-kubelet-plugin (built as make build does) on a
// fake 2-GPU host, against an API server that is not there: its kubelet sockets appear, it
// builds its host view (NVML asked through the real gpu-ctk: its discovery cache appears in
// the state directory) and waits for the API server to publish, and SIGTERM makes it remove
// its sockets and exit 0, having written nothing but its state directory. (Publishing is
// tested against client-go's fake API in internal/dra.)
func TestKubeletPluginBinary(t *testing.T) {
	e := newEnv(t, 2)
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(binDir, "gpu-kubelet-plugin") // next to gpu-ctk, which it asks about NVML
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", plugin, "./cmd/gpu-kubelet-plugin")
	build.Dir, build.Env = strings.TrimSpace(string(root)), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gpu-kubelet-plugin: %v\n%s", err, out)
	}
	dir, err := os.MkdirTemp("", "dra") // short: socket paths hold at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: x}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("[driver]\nroot = %q\ndev-root = %q\nproc-root = %q\nsys-root = %q\n[hook]\npath = %q\n[health]\nfile = %q\n",
		e.host.DriverRoot, e.host.DevRoot, e.host.ProcRoot, e.host.SysRoot, filepath.Join(binDir, "gpu-hook"), filepath.Join(dir, "health.csv"))), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet, cdiDir, state := filepath.Join(dir, "kubelet"), filepath.Join(dir, "cdi"), filepath.Join(dir, "state")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plugin, "--kubeconfig", kubeconfig, "--node-name", "node-a", "--kubelet-dir", kubelet, "--cdi-dir", cdiDir, "--state-dir", state)
	cmd.Env = []string{"GPU_RUNTIME_CONFIG=" + config, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sockets := []string{filepath.Join(kubelet, "plugins_registry", "gpu.gpu-runtime.dev-reg.sock"), filepath.Join(kubelet, "plugins", "gpu.gpu-runtime.dev", "dra.sock")}
	deadline := time.Now().Add(60 * time.Second)
	for {
		up := true
		for _, s := range sockets {
			if fi, err := os.Stat(s); err != nil || fi.Mode()&os.ModeSocket == 0 {
				up = false
			}
		}
		if _, err := os.Stat(filepath.Join(state, "discovery-cache.csv")); up && err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no sockets or no host view within 60s; stderr:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || strings.Contains(stderr.String(), "level=error") {
		t.Errorf("after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	for _, s := range sockets {
		if _, err := os.Lstat(s); err == nil {
			t.Errorf("%s left after SIGTERM", s)
		}
	}
	if entries, _ := os.ReadDir(cdiDir); len(entries) != 0 {
		t.Errorf("CDI dir holds %v with no claim prepared", entries)
	}
	entries, _ := os.ReadDir(state)
	if len(entries) != 1 || entries[0].Name() != "discovery-cache.csv" {
		t.Errorf("state dir holds %v, want only its discovery cache", entries)
	}
}

// TestDRAClaimThroughCDI is the node side of a DRA pod without a cluster: the driver prepares
// a claim for GPU 1 (NVML through the real gpu-ctk), the CDI library injects the claim's CDI
// device into a bundle as containerd does, and plain runc — no gpu-runtime, no RuntimeClass —
// runs it: the container sees GPU 1 and not GPU 0, the control and UVM nodes with their cgroup
// rules, the utility and compute files (not graphics), libcuda in its ld.so.cache (gpu-hook's
// hook, which the spec names) and a working nvidia-smi; unprepare leaves no spec.
func TestDRAClaimThroughCDI(t *testing.T) {
	e := newEnv(t, 2)
	cfg, _, err := config.Load(e.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Health.File = ""
	dir := t.TempDir()
	cdiDir := filepath.Join(dir, "cdi")
	log := logrus.New()
	log.SetOutput(io.Discard)
	d, err := dra.New(dra.Options{Config: cfg, NodeName: "node-a", CDIDir: cdiDir, StateDir: filepath.Join(dir, "state"), Log: log,
		Render: plan.Render{HookPath: filepath.Join(binDir, "gpu-hook"), LDConfig: cfg.Hook.LDConfig, HookTimeout: 30},
		Host: func() (gpuhost.Result, error) {
			return gpuhost.Build(cfg, gpuhost.Options{Query: create.NVMLQuery(filepath.Join(binDir, "gpu-ctk")), Health: true})
		}})
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-gpu", UID: "0b4e8f1a-0000-4000-8000-00000000e2e1"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: dra.DeviceName(e.host.Options.GPUs[1].UUID)}}}}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err != nil || len(res[claim.UID].Devices) != 1 {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	ids := res[claim.UID].Devices[0].CDIDeviceIDs

	// What containerd does with the CDI ids the kubelet passes on.
	b := e.bundle(t, nil, probe)
	injectCDI(t, b, cdiDir, ids)
	id := containerID(t)
	run := exec.Command("runc", "--root", e.stateRoot, "run", "--bundle", b, id)
	outFile, err := os.OpenFile(filepath.Join(dir, "stdout"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	run.Stdout, run.Stderr = outFile, outFile
	runErr := run.Run()
	_ = exec.Command("runc", "--root", e.stateRoot, "delete", "--force", id).Run()
	out, _ := os.ReadFile(outFile.Name())
	if runErr != nil || !strings.Contains(string(out), "probe-done") {
		t.Fatalf("runc run: %v\n%s", runErr, out)
	}
	f := facts(lines(string(out)))
	for _, want := range []string{"dev /dev/nvidia1 c3 1", "dev /dev/nvidiactl c3 ff", "dev /dev/nvidia-uvm eb 0", "cgroup c 195:1 rwm", "cgroup c 195:255 rwm",
		"ldcache-libcuda", "soname-libcuda", "nvidia-smi-runs", "libcuda-readonly"} {
		if !f.has(want) {
			t.Errorf("container lacks %q:\n%s", want, out)
		}
	}
	for _, absent := range []string{"dev /dev/nvidia0 c3 0", "file " + libDir + "/libGLX_nvidia.so.550.54.15"} {
		if f[absent] {
			t.Errorf("container has %q", absent)
		}
	}
	if out, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: claim.UID}}); err != nil || out[claim.UID] != nil {
		t.Fatalf("unprepare: %v %v", err, out)
	}
	if entries, _ := os.ReadDir(cdiDir); len(entries) != 0 {
		t.Errorf("CDI dir after unprepare: %v", entries)
	}
}

// injectCDI applies the CDI devices ids, from the specs in cdiDir, to bundle's config.json with
// the CDI library, as containerd does with the ids the kubelet passes on.
func injectCDI(t *testing.T, bundle, cdiDir string, ids []string) {
	t.Helper()
	p := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(cdiDir), cdilib.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if unresolved, err := cache.InjectDevices(&spec, ids...); err != nil {
		t.Fatalf("CDI injection of %v: %v (unresolved %v)", ids, err, unresolved)
	}
	if data, err = json.Marshal(&spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/dra"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/hook"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// TestSharedClaimMemoryLimit: a shared claim's CDI spec, applied by the CDI library as
// containerd does, makes real runc run gpu-hook memory-limit at createRuntime — the fake NVML
// then holds the claim's consumed memory as the limit on the container's cgroup v2 group — and
// at poststop, when the container is deleted, which clears it.
func TestSharedClaimMemoryLimit(t *testing.T) {
	e := newEnv(t, 1)
	opts := fakehost.Default(1)
	opts.MemoryLimits = fakehost.MemoryLimitsOffered
	e.host = privateHost(t, filepath.Join(e.dir, "host"), opts)
	e.writeConfig(t, "")
	cfg, _, err := config.Load(e.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Health.File = ""
	dir := t.TempDir()
	cfg.DRA.SharedGPUs = []string{"0"}
	// Short: the daemon's sockets live under it (108 bytes of sun_path).
	if cfg.DRA.MPSRoot, err = os.MkdirTemp("/tmp", "mps"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cfg.DRA.MPSRoot) })
	cdiDir := filepath.Join(dir, "cdi")
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctk := filepath.Join(binDir, "gpu-ctk")
	d, err := dra.New(dra.Options{Config: cfg, NodeName: "node-a", CDIDir: cdiDir, StateDir: filepath.Join(dir, "state"), Log: log, MPSLauncher: ctk,
		Render: plan.Render{HookPath: filepath.Join(binDir, "gpu-hook"), LDConfig: cfg.Hook.LDConfig, HookTimeout: 30, CTKPath: ctk, DriverRoot: cfg.Driver.Root},
		Host: func() (gpuhost.Result, error) {
			return gpuhost.Build(cfg, gpuhost.Options{Query: create.NVMLQuery(ctk), Health: true})
		}})
	if err != nil {
		t.Fatal(err)
	}
	uuid := e.host.Options.GPUs[0].UUID
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shared", UID: "0b4e8f1a-0000-4000-8000-00000000e2e7"}}
	share := types.UID("share-e2e")
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: dra.DeviceName(uuid), ShareID: &share,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
				dra.CapacityCompute: *resource.NewQuantity(30, resource.DecimalSI), dra.CapacityMemory: resource.MustParse("10Gi")}}}}}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err != nil || len(res[claim.UID].Devices) != 1 {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	t.Cleanup(func() {
		_, _ = d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: claim.UID}})
	})

	b := e.bundle(t, nil, "sleep 30")
	injectCDI(t, b, cdiDir, res[claim.UID].Devices[0].CDIDeviceIDs)

	id := containerID(t)
	// Output to a file, not a pipe: a created container inherits it and would hold a pipe open.
	runc := func(args ...string) (string, error) {
		f, err := os.CreateTemp(dir, "runc-out")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command("runc", append([]string{"--root", e.stateRoot}, args...)...)
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Run()
		out, _ := os.ReadFile(f.Name())
		return string(out), err
	}
	if out, err := runc("create", "--bundle", b, id); err != nil {
		t.Fatalf("runc create: %v\n%s", err, out)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_, _ = runc("delete", "--force", id)
		}
	})
	stateJSON, err := runc("state", id)
	if err != nil {
		t.Fatalf("runc state: %v\n%s", err, stateJSON)
	}
	var st specs.State
	if err := json.Unmarshal([]byte(stateJSON), &st); err != nil {
		t.Fatal(err)
	}
	cg, err := hook.ContainerCgroup("/", st.Pid, "")
	if err != nil {
		t.Skipf("SKIPPED LOUDLY: this host cannot hold per-cgroup GPU memory limits, and gpu-hook set none: %v", err)
	}
	limits, err := e.host.MemoryLimitsSet()
	want := fakehost.MemoryLimit{UUID: uuid, Cgroup: cg, Soft: 10 << 30, Hard: 10 << 30}
	if err != nil || len(limits) != 1 || limits[0] != want {
		t.Fatalf("after create the fake NVML holds %+v (%v), want %+v", limits, err, want)
	}
	if out, err := runc("delete", "--force", id); err != nil {
		t.Fatalf("runc delete: %v\n%s", err, out)
	}
	deleted = true
	if limits, err := e.host.MemoryLimitsSet(); err != nil || len(limits) != 0 {
		t.Errorf("after delete the fake NVML holds %+v (%v), want none", limits, err)
	}
	if _, err := os.Stat(filepath.Join(hook.DefaultMemoryLimitStateDir, id+"."+uuid)); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("the hook's record of the limit is left after delete: %v", err)
	}
}

package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// fixture is a fake 3-GPU node — GPUs 0 and 1 whole under PCIe root pci0000:00, GPU 2 in MIG
// mode (3g.40gb and 1g.10gb) under pci0000:40 — and a driver for it. NVML's answer is made
// from the fake host's options (a process loads one fake NVML, and the NVML path is tested
// in internal/nvmlinfo); everything else (device nodes, driver files, /proc, sysfs, the
// health file) is read from the fake host by the real code.
type fixture struct {
	fh                         *fakehost.Host
	cfg                        config.Config
	cdiDir, stateDir, stateTop string
	nvml                       discover.Driver
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	opts := fakehost.Default(3)
	opts.GPUs[2].MIGCurrent, opts.GPUs[2].MIGPending = true, true
	if err := opts.GPUs[2].AddMIGDevices("3g.40gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	fh := fakehost.BuildT(t, opts)
	f := &fixture{fh: fh, stateTop: t.TempDir()}
	f.cdiDir, f.stateDir = filepath.Join(f.stateTop, "cdi"), filepath.Join(f.stateTop, "state")
	f.cfg = config.Default()
	f.cfg.Driver = config.DriverConfig{Root: fh.DriverRoot, DevRoot: fh.DevRoot, ProcRoot: fh.ProcRoot, SysRoot: fh.SysRoot}
	f.cfg.Health.File = filepath.Join(t.TempDir(), "health.csv")
	f.cfg.DRA.MPSRoot = shortTempDir(t, "dramps") // never the host's: New looks for daemons there
	f.nvml = discover.Driver{Version: opts.DriverVersion, CUDAVersion: "12.4"}
	for _, g := range fh.Options.GPUs {
		dg := discover.GPU{Index: g.Index, Minor: g.Minor, UUID: g.UUID, Name: g.Name, BusID: g.BusID,
			Brand:             map[int]string{fakehost.BrandTesla: "tesla", fakehost.BrandNVIDIA: "nvidia"}[g.Brand],
			ComputeCapability: fmt.Sprintf("%d.%d", g.CCMajor, g.CCMinor), MemoryMiB: g.TotalMemoryMiB(),
			MIGCapable: g.MIGCapable, MIGCurrent: g.MIGCurrent, MIGPending: g.MIGPending}
		for _, m := range fh.MIGDevices() {
			if m.GPU == g.Index {
				dg.MIGDevices = append(dg.MIGDevices, discover.MIGDevice{Index: m.Index, UUID: m.UUID, GI: m.GI, CI: m.CI, Profile: m.Profile, MemoryMiB: m.MemoryMiB})
			}
		}
		f.nvml.GPUs = append(f.nvml.GPUs, dg)
	}
	return f
}

// driver starts a driver (again) on the fixture's directories, as a plugin (re)start does.
func (f *fixture) driver(t testing.TB) *Driver {
	t.Helper()
	hostCfg := f.cfg
	hostCfg.Discovery.CacheFile = filepath.Join(f.stateDir, "discovery-cache.csv")
	log := logrus.New()
	log.SetOutput(io.Discard)
	d, err := New(Options{Config: f.cfg, NodeName: "node-a", CDIDir: f.cdiDir, StateDir: f.stateDir, Log: log, MPSLauncher: os.Args[0],
		Render: plan.Render{HookPath: "/usr/bin/gpu-hook", LDConfig: "/sbin/ldconfig", HookTimeout: 30, CTKPath: "/usr/bin/gpu-ctk", DriverRoot: "/"},
		Host: func() (gpuhost.Result, error) {
			return gpuhost.Build(hostCfg, gpuhost.Options{Query: func(context.Context, string) (discover.Driver, error) { return f.nvml, nil },
				Cache: true, Health: true, Topology: true})
		}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

// mark records (or with reason "" clears) a device in the health file, as gpu-ctk health
// mark and clear do.
func (f *fixture) mark(t *testing.T, uuid, reason string, xid uint64) {
	t.Helper()
	_, err := discover.UpdateHealthFile(f.cfg.Health.File, func(rs []discover.HealthRecord) ([]discover.HealthRecord, error) {
		rs = slices.DeleteFunc(rs, func(r discover.HealthRecord) bool { return r.UUID == uuid })
		if reason != "" {
			rs = append(rs, discover.HealthRecord{UUID: uuid, Reason: reason, Xid: xid, Since: time.Now()})
		}
		return rs, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
func num(n int) resourceapi.DeviceAttribute {
	v := int64(n)
	return resourceapi.DeviceAttribute{IntValue: &v}
}
func ver(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{VersionValue: &s} }
func mem(mib int) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *resourceQuantity(mib)}}
}

// wantDevices is what the fixture's node must publish, written from the fake host's options.
func (f *fixture) wantDevices() []resourceapi.Device {
	gpus := f.fh.Options.GPUs
	common := func(g fakehost.GPU) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		arch := map[int]string{8: "Ampere", 9: "Hopper"}[g.CCMajor]
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"minor": num(g.Minor), "productName": str(g.Name), "brand": str(map[int]string{fakehost.BrandTesla: "tesla", fakehost.BrandNVIDIA: "nvidia"}[g.Brand]),
			"architecture": str(arch), "cudaComputeCapability": ver(fmt.Sprintf("%d.%d.0", g.CCMajor, g.CCMinor)),
			"driverVersion": ver("550.54.15"), "cudaDriverVersion": ver("12.4.0"), "pcieBusID": str(g.BusID),
			PCIeRootAttribute: str(fakehost.PCIeRootOf(g)), "numaNode": num(g.NUMANode),
		}
	}
	var out []resourceapi.Device
	for _, g := range gpus[:2] {
		a := common(g)
		a["type"], a["uuid"], a["index"] = str("gpu"), str(g.UUID), num(g.Index)
		out = append(out, resourceapi.Device{Name: strings.ToLower(g.UUID), Attributes: a, Capacity: mem(g.TotalMemoryMiB())})
	}
	for _, m := range f.fh.MIGDevices() {
		a := common(gpus[2])
		a["type"], a["uuid"], a["index"], a["parentIndex"], a["parentUUID"], a["profile"] = str("mig"), str(m.UUID), num(m.Index), num(2), str(gpus[2].UUID), str(m.Profile)
		out = append(out, resourceapi.Device{Name: strings.ToLower(m.UUID), Attributes: a, Capacity: mem(m.MemoryMiB)})
	}
	return out
}

// TestResources: the node publishes exactly its whole GPUs and MIG devices (not GPU 2, in
// MIG mode), with every attribute, compared whole; PCIe roots and NUMA nodes from sysfs.
func TestResources(t *testing.T) {
	f := newFixture(t)
	res, warnings, err := f.driver(t).Resources()
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Resources: %v %v", err, warnings)
	}
	if len(res.Pools) != 1 || len(res.Pools["node-a"].Slices) != 1 {
		t.Fatalf("pools %+v: want one pool node-a with one slice", res.Pools)
	}
	got := res.Pools["node-a"].Slices[0].Devices
	want := f.wantDevices()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("devices:\n got %s\nwant %s", g, w)
	}
	// The placement the bundle test relies on: GPUs 0 and 1 share a root, the MIG
	// devices' GPU 2 is on another.
	if *got[0].Attributes[PCIeRootAttribute].StringValue != *got[1].Attributes[PCIeRootAttribute].StringValue ||
		*got[0].Attributes[PCIeRootAttribute].StringValue == *got[2].Attributes[PCIeRootAttribute].StringValue {
		t.Errorf("PCIe roots: %s %s %s", *got[0].Attributes[PCIeRootAttribute].StringValue, *got[1].Attributes[PCIeRootAttribute].StringValue, *got[2].Attributes[PCIeRootAttribute].StringValue)
	}
}

// taints returns each published device's taints, by device name.
func taints(t *testing.T, d *Driver) map[string][]resourceapi.DeviceTaint {
	t.Helper()
	res, _, err := d.Resources()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]resourceapi.DeviceTaint{}
	for _, dev := range res.Pools["node-a"].Slices[0].Devices {
		if len(dev.Taints) > 0 {
			out[dev.Name] = dev.Taints
		}
	}
	return out
}

// TestHealthTaints: a device the health file marks is published with a NoSchedule taint
// naming the reason (NoExecute when configured; a MIG device when its GPU is marked), and the
// taint goes when the record is cleared — the same driver, no restart.
func TestHealthTaints(t *testing.T) {
	f := newFixture(t)
	d := f.driver(t)
	gpu1, gpu2 := f.fh.Options.GPUs[1].UUID, f.fh.Options.GPUs[2].UUID
	migs := f.fh.MIGDevices()
	if got := taints(t, d); len(got) != 0 {
		t.Fatalf("healthy host: taints %+v", got)
	}
	f.mark(t, gpu1, "Xid 79: GPU has fallen off the bus", 79)
	f.mark(t, gpu2, "fan failure", 0)
	want := map[string][]resourceapi.DeviceTaint{
		strings.ToLower(gpu1):         {{Key: TaintKey, Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		strings.ToLower(migs[0].UUID): {{Key: TaintKey, Value: "fan-failure", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		strings.ToLower(migs[1].UUID): {{Key: TaintKey, Value: "fan-failure", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
	}
	if got := taints(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("marked: taints\n got %+v\nwant %+v", got, want)
	}
	f.mark(t, gpu2, "", 0) // gpu-ctk health clear
	delete(want, strings.ToLower(migs[0].UUID))
	delete(want, strings.ToLower(migs[1].UUID))
	if got := taints(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("GPU 2 cleared: taints\n got %+v\nwant %+v", got, want)
	}
	f.cfg.Kubernetes.TaintEffect = config.TaintNoExecute
	want[strings.ToLower(gpu1)][0].Effect = resourceapi.DeviceTaintEffectNoExecute
	if got := taints(t, f.driver(t)); !reflect.DeepEqual(got, want) {
		t.Errorf("NoExecute: taints\n got %+v\nwant %+v", got, want)
	}
	f.mark(t, gpu1, "", 0)
	if got := taints(t, d); len(got) != 0 {
		t.Errorf("all cleared: taints %+v", got)
	}
}

// claim is an allocated ResourceClaim for devices of node-a, with opaque configurations.
func claim(uid, name string, devices []string, configs ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	alloc := &resourceapi.AllocationResult{}
	for i, dev := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("gpu%d", i), Driver: DriverName, Pool: "node-a", Device: dev})
	}
	for _, raw := range configs {
		alloc.Devices.Config = append(alloc.Devices.Config, resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}}})
	}
	c.Status.Allocation = alloc
	return c
}

// readSpec reads a claim's CDI spec as a CDI consumer does.
func readSpec(t *testing.T, p string) *cdilib.Spec {
	t.Helper()
	spec, err := cdilib.ReadSpec(p, 0)
	if err != nil {
		t.Fatalf("the CDI library refuses %s: %v", p, err)
	}
	return spec
}

// TestPrepareUnprepare: a claim for GPU 0 and a MIG device gets one CDI spec named after it,
// with device names holding its UID, GPU 0's node and the MIG device's and no other GPU's,
// the utility,compute driver files and the loader-cache hook; prepare is idempotent, the
// checkpoint lets a restarted driver unprepare it, and unprepare of an unknown claim succeeds.
func TestPrepareUnprepare(t *testing.T) {
	f := newFixture(t)
	d := f.driver(t)
	gpu0, mig := strings.ToLower(f.fh.Options.GPUs[0].UUID), strings.ToLower(f.fh.MIGDevices()[1].UUID)
	const uid = "3f1c2a9e-0000-4000-8000-000000000001"
	c := claim(uid, "gpu-a", []string{gpu0, mig})
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare: %v %v", err, res[c.UID].Err)
	}
	want := []kubeletplugin.Device{
		{Requests: []string{"gpu0"}, PoolName: "node-a", DeviceName: gpu0, CDIDeviceIDs: []string{CDIKind + "=" + uid + "-" + gpu0}},
		{Requests: []string{"gpu1"}, PoolName: "node-a", DeviceName: mig, CDIDeviceIDs: []string{CDIKind + "=" + uid + "-" + mig}},
	}
	if !reflect.DeepEqual(res[c.UID].Devices, want) {
		t.Errorf("devices:\n got %+v\nwant %+v", res[c.UID].Devices, want)
	}
	specPath := filepath.Join(f.cdiDir, "gpu.gpu-runtime.dev-claim-"+uid+".json")
	spec := readSpec(t, specPath)
	var names, nodes, mounts []string
	for _, dev := range spec.Devices {
		names = append(names, dev.Name)
		for _, n := range dev.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
	}
	for _, m := range spec.ContainerEdits.Mounts {
		mounts = append(mounts, filepath.Base(m.ContainerPath))
	}
	if spec.Kind != CDIKind || !slices.Equal(names, []string{uid + "-" + gpu0, uid + "-" + mig}) {
		t.Errorf("spec kind %s devices %v", spec.Kind, names)
	}
	if !slices.Contains(nodes, "/dev/nvidia0") || !slices.Contains(nodes, "/dev/nvidia2") || slices.Contains(nodes, "/dev/nvidia1") {
		t.Errorf("device nodes %v: want /dev/nvidia0 and /dev/nvidia2 (the MIG device's GPU), not /dev/nvidia1", nodes)
	}
	if !slices.Contains(mounts, "libcuda.so.550.54.15") || !slices.Contains(mounts, "nvidia-smi") || slices.ContainsFunc(mounts, func(m string) bool { return strings.HasPrefix(m, "libGLX_nvidia") }) {
		t.Errorf("mounts %v: want utility and compute files (libcuda, nvidia-smi), no graphics", mounts)
	}
	if len(spec.ContainerEdits.Hooks) != 1 || !slices.Contains(spec.ContainerEdits.Hooks[0].Args, plan.LDCacheSubcommand) {
		t.Errorf("hooks %+v: want the loader-cache hook", spec.ContainerEdits.Hooks)
	}
	before, _ := os.ReadFile(specPath)

	// Again, and after a restart: the same answer, the same file, nothing duplicated.
	for _, again := range []*Driver{d, f.driver(t)} {
		res2, err := again.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
		if err != nil || !reflect.DeepEqual(res2[c.UID].Devices, want) {
			t.Errorf("prepare again: %v %+v", err, res2[c.UID])
		}
	}
	after, _ := os.ReadFile(specPath)
	if string(before) != string(after) {
		t.Error("prepare again rewrote the spec differently")
	}
	if entries, _ := os.ReadDir(f.cdiDir); len(entries) != 1 {
		t.Errorf("CDI dir holds %d files, want 1", len(entries))
	}

	// A restarted driver finds the claim and unprepares it; unprepare is idempotent.
	restarted := f.driver(t)
	if got := restarted.Prepared(); !slices.Equal(got, []types.UID{c.UID}) {
		t.Fatalf("restarted driver: prepared %v", got)
	}
	for range 2 {
		out, err := restarted.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}})
		if err != nil || out[c.UID] != nil {
			t.Fatalf("unprepare: %v %v", err, out[c.UID])
		}
	}
	if _, err := os.Stat(specPath); err == nil {
		t.Error("unprepare left the CDI spec")
	}
	if got := f.driver(t).Prepared(); len(got) != 0 {
		t.Errorf("after unprepare a new driver finds %v prepared", got)
	}
	out, err := restarted.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "never-prepared"}})
	if err != nil || out["never-prepared"] != nil {
		t.Errorf("unknown claim: %v %v", err, out)
	}
}

// TestPrepareCapabilities: the claim's opaque capabilities choose the driver files.
func TestPrepareCapabilities(t *testing.T) {
	f := newFixture(t)
	d := f.driver(t)
	gpu0 := strings.ToLower(f.fh.Options.GPUs[0].UUID)
	c := claim("uid-caps", "gpu-g", []string{gpu0}, `{"apiVersion": "gpu.gpu-runtime.dev/v1alpha1", "kind": "GPUConfig", "capabilities": "utility"}`)
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare: %v %v", err, res[c.UID].Err)
	}
	spec := readSpec(t, filepath.Join(f.cdiDir, cdiFileName(c.UID)))
	for _, m := range spec.ContainerEdits.Mounts {
		if strings.HasPrefix(filepath.Base(m.ContainerPath), "libcuda.so") {
			t.Errorf("capabilities utility: libcuda mounted (%s)", m.ContainerPath)
		}
	}
}

// TestPrepareErrors: each bad claim fails its prepare with a message naming the input, and
// writes nothing.
func TestPrepareErrors(t *testing.T) {
	f := newFixture(t)
	gpu0, gpu1 := f.fh.Options.GPUs[0].UUID, f.fh.Options.GPUs[1].UUID
	f.mark(t, gpu1, "Xid 79: GPU has fallen off the bus", 79)
	where := "ResourceClaim default/bad: opaque configuration of driver gpu.gpu-runtime.dev (from the claim)"
	testCases := []struct {
		description string
		claim       *resourceapi.ResourceClaim
		wantErr     string
	}{
		{"unknown key", claim("u1", "bad", []string{strings.ToLower(gpu0)}, `{"capabilites": "compute"}`),
			"invalid opaque configuration: " + where + `: unknown key "capabilites": the keys are capabilities (and apiVersion gpu.gpu-runtime.dev/v1alpha1, kind GPUConfig)`},
		{"unknown capability", claim("u2", "bad", []string{strings.ToLower(gpu0)}, `{"capabilities": "compute,cuda"}`),
			"invalid opaque configuration: " + where + `: unknown capability "cuda" in capabilities "compute,cuda": the capabilities are all, compute, compat32, display, graphics, ngx, utility, video`},
		{"capabilities not a string", claim("u3", "bad", []string{strings.ToLower(gpu0)}, `{"capabilities": ["compute"]}`),
			"invalid opaque configuration: " + where + `: key "capabilities" must be a string, such as "utility,compute"`},
		{"a device unhealthy since allocation", claim("u4", "bad", []string{strings.ToLower(gpu1)}),
			"unhealthy device: ResourceClaim default/bad was allocated GPU 1 (" + gpu1 + "): Xid 79: GPU has fallen off the bus since "},
		{"a device gone since allocation", claim("u5", "bad", []string{"mig-00000000-0000-0000-0000-000000000000"}),
			"unknown device: ResourceClaim default/bad was allocated device MIG-00000000-0000-0000-0000-000000000000, which this node no longer has"},
	}
	d := f.driver(t)
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tc.claim})
			if err != nil {
				t.Fatal(err)
			}
			if got := res[tc.claim.UID].Err; got == nil || !strings.HasPrefix(got.Error(), tc.wantErr) {
				t.Errorf("error:\n got %v\nwant %s…", got, tc.wantErr)
			}
		})
	}
	if entries, _ := os.ReadDir(f.cdiDir); len(entries) != 0 || len(d.Prepared()) != 0 {
		t.Errorf("failed prepares left %d CDI files, %d claims", len(entries), len(d.Prepared()))
	}
}

// TestWritesOnlyItsOwn: a prepare/unprepare cycle and a restart write nothing outside the
// CDI directory and the state directory: the fake host (driver root, device root, /proc,
// sysfs) and the health file's directory are as they were, nothing is written in TMPDIR, and
// the CDI directory holds only the plugin's files; a spec file of the plugin's with no prepared claim is removed at start,
// another file in the CDI directory is left alone.
func TestWritesOnlyItsOwn(t *testing.T) {
	f := newFixture(t)
	f.mark(t, f.fh.Options.GPUs[1].UUID, "fan", 0)
	if err := os.MkdirAll(f.cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(f.cdiDir, "nvidia.yaml")
	stale := filepath.Join(f.cdiDir, cdiFileName("crashed-before-checkpoint"))
	for _, p := range []string{other, stale} {
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, root := range []string{f.fh.Dir, filepath.Dir(f.cfg.Health.File)} {
			_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				fi, _ := os.Lstat(p)
				out[p] = fmt.Sprintf("%v %d %v", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
				return nil
			})
		}
		return out
	}
	before := snapshot()
	// The process's temporary directory is not there: a file written in it, even for a moment,
	// fails the prepare.
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "absent"))
	d := f.driver(t)
	if _, err := os.Stat(stale); err == nil {
		t.Error("a spec of a claim not prepared was left at start")
	}
	c := claim("uid-w", "w", []string{strings.ToLower(f.fh.Options.GPUs[0].UUID)})
	if res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	if _, _, err := f.driver(t).Resources(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}}); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); !reflect.DeepEqual(before, after) {
		for p, v := range after {
			if before[p] != v {
				t.Errorf("changed outside the CDI and state directories: %s", p)
			}
		}
	}
	entries, _ := os.ReadDir(f.cdiDir)
	if len(entries) != 1 || entries[0].Name() != "nvidia.yaml" {
		t.Errorf("CDI dir after the cycle: %v, want only the foreign nvidia.yaml", entries)
	}
	if entries, _ := os.ReadDir(f.stateTop); len(entries) != 2 {
		t.Errorf("state top holds %v, want cdi and state", entries)
	}
}

func resourceQuantity(mib int) *resource.Quantity {
	return resource.NewQuantity(int64(mib)<<20, resource.BinarySI)
}

// published returns the published devices' names and their taints' values.
func published(t *testing.T, d *Driver) map[string]string {
	t.Helper()
	res, _, err := d.Resources()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, dev := range res.Pools["node-a"].Slices[0].Devices {
		var vals []string
		for _, tn := range dev.Taints {
			vals = append(vals, tn.Key+"="+tn.Value+":"+string(tn.Effect))
		}
		out[dev.Name] = strings.Join(vals, ",")
	}
	return out
}

// TestMIGReconfigured: a MIG reconfiguration (a GPU instance destroyed: the driver's
// capabilities tree changes, so the discovery fingerprint does and NVML is asked again) is
// published by the same driver, and a claim for the device that no longer exists fails
// naming it.
func TestMIGReconfigured(t *testing.T) {
	f := newFixture(t)
	d := f.driver(t)
	migs := f.fh.MIGDevices()
	if got := published(t, d); len(got) != 4 {
		t.Fatalf("before: %v", got)
	}
	// nvidia-smi mig -dci/-dgi of the 1g.10gb instance.
	gpu := &f.nvml.GPUs[2]
	gpu.MIGDevices = slices.DeleteFunc(gpu.MIGDevices, func(m discover.MIGDevice) bool { return m.UUID == migs[1].UUID })
	if err := os.RemoveAll(filepath.Join(f.fh.ProcRoot, discover.ProcCapabilities, fmt.Sprintf("gpu%d/mig/gi%d", migs[1].GPUMinor, migs[1].GI))); err != nil {
		t.Fatal(err)
	}
	got := published(t, d)
	if _, ok := got[strings.ToLower(migs[1].UUID)]; ok || len(got) != 3 {
		t.Errorf("after the reconfiguration: %v, want %s gone", got, migs[1].UUID)
	}
	c := claim("uid-gone", "old", []string{strings.ToLower(migs[1].UUID)})
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	want := "unknown device: ResourceClaim default/old was allocated device " + strings.ToUpper(migs[1].UUID[:3]) + strings.ToLower(migs[1].UUID[3:]) + ", which this node no longer has"
	if err != nil || res[c.UID].Err == nil || !strings.HasPrefix(res[c.UID].Err.Error(), want) {
		t.Errorf("prepare of the gone device: %v %v\nwant %s…", err, res[c.UID].Err, want)
	}
}

// TestDriverSignals: a GPU gone from the driver's /proc, one the driver now says it excludes,
// and one NVML no longer enumerates because the driver excludes it are published tainted
// gone, excluded and excluded.
func TestDriverSignals(t *testing.T) {
	f := newFixture(t)
	f.cfg.Discovery.Cache = false // NVML's answer below changes with no change of the host
	d := f.driver(t)
	gpu0, gpu1 := strings.ToLower(f.fh.Options.GPUs[0].UUID), strings.ToLower(f.fh.Options.GPUs[1].UUID)
	dir, err := f.fh.ProcGPUDir(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := f.fh.SetGPUExcluded(1, true); err != nil {
		t.Fatal(err)
	}
	f.nvml.Excluded = []discover.ExcludedGPU{{UUID: "GPU-4f2e0000-0000-0000-0000-000000000009", BusID: "00000000:B7:00.0"}}
	got := published(t, d)
	for name, want := range map[string]string{
		gpu0: TaintKey + "=gone:NoSchedule",
		gpu1: TaintKey + "=excluded:NoSchedule",
		"gpu-4f2e0000-0000-0000-0000-000000000009": TaintKey + "=excluded:NoSchedule",
	} {
		if got[name] != want {
			t.Errorf("%s: taints %q, want %q", name, got[name], want)
		}
	}
}

// TestPrepareDoubleAllocation: a device prepared for one claim is refused to another, naming
// the claim that holds it (the driver is the last line of defence against the scheduler
// allocating a device twice).
func TestPrepareDoubleAllocation(t *testing.T) {
	f := newFixture(t)
	d := f.driver(t)
	gpu0 := strings.ToLower(f.fh.Options.GPUs[0].UUID)
	a, b := claim("uid-a", "a", []string{gpu0}), claim("uid-b", "b", []string{gpu0})
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{a, b})
	if err != nil || res[a.UID].Err != nil {
		t.Fatalf("prepare a: %v %v", err, res[a.UID].Err)
	}
	want := "ResourceClaim default/b was allocated " + gpu0 + ", which ResourceClaim default/a (UID uid-a) holds whole on this node: the scheduler allocated it twice; delete one of the pods"
	if res[b.UID].Err == nil || res[b.UID].Err.Error() != want {
		t.Errorf("prepare b: %v\nwant %s", res[b.UID].Err, want)
	}
}

package create

// Benchmarks of the in-process steps of gpu-runtime's create path on a fake 8-GPU host
// (internal/fakehost), each step alone and then PrepareBundle whole:
//
//	sudo go test -run '^$' -bench CreatePath -benchmem ./internal/create/
//
// They complement bench/lifecycle, which times the real binaries around runc; see
// bench/README.md. Needs root (the fake host's device nodes are made with mknod).
//
// NVML: gpu-runtime asks NVML only on a discovery-cache miss, by running gpu-ctk (cgo) — the
// NVMLQuery/gpu-ctk, Discover/miss and PrepareBundle/cache-off sub-benchmarks build gpu-ctk and
// pay that. In-process, go-nvml binds its symbols to the first libnvidia-ml a process loads and
// the library then stays loaded, so a process pays the load once: the fixture queries once,
// untimed, and NVMLQuery/in-process-warm measures the query with the library mapped.
// NVMLQuery/in-process-cold measures the first query of a process, load included: each
// iteration runs this test binary again (TestCreateBenchNVMLChild), which times its first
// query and reports it; its ns/op is that in-child time, not the process spawn, and its
// B/op and allocs/op are the parent's and mean nothing.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/internal/runlog"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// Environment of TestCreateBenchNVMLChild, set only by BenchmarkCreatePath/NVMLQuery/in-process-cold.
const (
	benchNVMLRootEnv   = "GPU_RUNTIME_BENCH_NVML_ROOT"   // driver root to query
	benchNVMLReportEnv = "GPU_RUNTIME_BENCH_NVML_REPORT" // file to write the first query's ns to
)

// benchGPUEnv is the environment of the benchmark's GPU container: all GPUs, default capabilities.
var benchGPUEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOSTNAME=bench",
	"NVIDIA_VISIBLE_DEVICES=all",
}

// benchSpec returns a container spec shaped like the default one of `runc spec` and containerd
// (mounts, namespaces, masked paths, capabilities), with the given environment. withSeccomp adds
// a profile the size of containerd's default one (about 350 syscall names), which makes the
// file several times larger: containerd and docker always send one.
func benchSpec(env []string, withSeccomp bool) []byte {
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
		"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	s := specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: []string{"/bin/true"}, Env: env, Cwd: "/",
			Capabilities:    &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: "bench",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: &specs.Linux{
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if withSeccomp {
		names := make([]string, 350)
		for i := range names {
			names[i] = fmt.Sprintf("syscall_name_%03d", i)
		}
		s.Linux.Seccomp = &specs.LinuxSeccomp{
			DefaultAction: specs.ActErrno,
			Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
			Syscalls: []specs.LinuxSyscall{
				{Names: names, Action: specs.ActAllow},
				{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0, Op: specs.OpEqualTo}}},
				{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 2114060288, Op: specs.OpMaskedEqual}}},
			},
		}
	}
	data, err := json.MarshalIndent(&s, "", "\t")
	if err != nil {
		panic(err)
	}
	return data
}

// benchFixture is the fake host and what discovery found on it.
type benchFixture struct {
	host    *fakehost.Host
	cfg     config.Config
	dir     string
	exe     string            // a gpu-runtime path whose directory holds gpu-ctk (PrepareBundle looks there)
	ctk     string            // gpu-ctk built for the benchmark; "" if it could not be built
	ctkErr  string            // why not
	specs   map[string][]byte // by spec shape name
	devices discover.DeviceNodes
	req     request.Request
	planned plan.Plan
	phost   plan.Host
	render  plan.Render
}

var benchSpecShapes = []string{"runc-default", "with-seccomp"}

// inProcessQuery asks NVML in this process (what gpu-ctk does).
func inProcessQuery(_ context.Context, root string) (discover.Driver, error) {
	return nvmlinfo.Query(root)
}

func newBenchFixture(b *testing.B) *benchFixture {
	b.Helper()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "\n*** BenchmarkCreatePath SKIPPED: it needs root to build the fake GPU host (mknod); run it with sudo ***")
		b.Skip("SKIPPED: needs root to build the fake GPU host (mknod, ldconfig -r); run `sudo go test -run '^$' -bench CreatePath ./internal/create/`")
	}
	h := fakehost.BuildT(b, fakehost.Default(8))
	dir := b.TempDir()
	bin := filepath.Join(dir, "bin")
	hook := filepath.Join(bin, plan.HookName)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Driver.Root, cfg.Driver.DevRoot, cfg.Hook.Path = h.DriverRoot, h.DevRoot, hook
	cfg.Discovery.Cache, cfg.Discovery.CacheFile = true, filepath.Join(dir, "discovery-cache.csv")
	f := &benchFixture{host: h, cfg: cfg, dir: dir, exe: filepath.Join(bin, "gpu-runtime"), specs: map[string][]byte{
		"runc-default": benchSpec(benchGPUEnv, false),
		"with-seccomp": benchSpec(benchGPUEnv, true),
	}}
	// gpu-ctk, for the sub-benchmarks that ask NVML the way gpu-runtime does.
	ctk := filepath.Join(bin, CTKName)
	cmd := exec.Command("go", "build", "-o", ctk, "github.com/gpu-runtime/gpu-runtime/cmd/"+CTKName)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		f.ctkErr = fmt.Sprintf("cannot build gpu-ctk: %v: %s", err, strings.TrimSpace(string(out)))
	} else {
		f.ctk = ctk
	}

	// The one NVML load of this process, untimed (see the file comment).
	var err error
	if f.devices, err = discover.FindDeviceNodes(h.DevRoot); err != nil {
		b.Fatal(err)
	}
	res, err := discover.Discover(discover.Options{DriverRoot: h.DriverRoot, DevRoot: h.DevRoot, Query: inProcessQuery}, f.devices)
	if err != nil {
		b.Fatalf("discover the fake host: %v", err)
	}
	if len(res.Host.Driver.GPUs) != 8 {
		b.Fatalf("fake host reports %d GPUs, want 8", len(res.Host.Driver.GPUs))
	}
	f.phost = plan.Host{Driver: res.Host.Driver, Files: res.Host.Files, Devices: f.devices}
	f.render = plan.Render{HookPath: hook, LDConfig: cfg.Hook.LDConfig}
	if f.req, _, err = request.FromSpec(&specs.Spec{Process: &specs.Process{Env: benchGPUEnv}}, request.Policy{AcceptEnvWhenUnprivileged: true}); err != nil {
		b.Fatal(err)
	}
	if f.planned, err = plan.Build(f.req, f.phost, nil); err != nil {
		b.Fatal(err)
	}
	return f
}

// needCTK skips a sub-benchmark that runs gpu-ctk when it could not be built.
func (f *benchFixture) needCTK(b *testing.B) {
	b.Helper()
	if f.ctk == "" {
		b.Skip("SKIPPED: " + f.ctkErr)
	}
}

// prepareBundles times PrepareBundle on fresh bundles of spec with cfg, after one untimed
// call that fills the discovery cache, as the first container on a host does. It returns the
// first timed bundle.
func (f *benchFixture) prepareBundles(b *testing.B, spec []byte, cfg config.Config) string {
	b.ReportAllocs()
	parent := b.TempDir()
	log := runlog.New(runlog.Options{RuncLog: filepath.Join(parent, "log.json"), Format: "json", Level: logrus.InfoLevel, Stderr: os.Stderr})
	defer log.Close()
	opts := Options{Config: cfg, Executable: f.exe, Cwd: parent, Logger: log}
	warm := oci.Invocation{Command: "create", Bundle: writeBundle(b, filepath.Join(parent, "warm"), spec), ContainerID: "warm", LogFormat: "json"}
	if err := PrepareBundle(warm, opts); err != nil {
		b.Fatal(err)
	}
	bundles := make([]string, 256)
	round := 0
	batched(b, func(n int) {
		round++
		for i := 0; i < n; i++ {
			bundles[i] = writeBundle(b, filepath.Join(parent, fmt.Sprintf("b%d-%d", round, i)), spec)
		}
		// Flush the new bundles now: on ext4 (data=ordered) the fsync in PrepareBundle's
		// atomic write would otherwise also write them out, inside the timed region.
		unix.Sync()
	}, func(i int) {
		inv := oci.Invocation{Command: "create", Bundle: bundles[i], ContainerID: "bench", LogFormat: "json"}
		if err := PrepareBundle(inv, opts); err != nil {
			b.Fatal(err)
		}
	})
	return bundles[0]
}

// writeBundle writes a bundle's config.json and returns the bundle directory.
func writeBundle(b *testing.B, dir string, spec []byte) string {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(oci.ConfigPath(dir), spec, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// batched runs op b.N times, calling prepare (untimed) for batches of up to 256 iterations, so
// that per-iteration inputs (a fresh spec, a fresh bundle) cost no timer stop per iteration.
func batched(b *testing.B, prepare func(n int), op func(i int)) {
	const batch = 256
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		b.StopTimer()
		prepare(n)
		b.StartTimer()
		for i := 0; i < n; i++ {
			op(i)
		}
		done += n
	}
}

func BenchmarkCreatePath(b *testing.B) {
	f := newBenchFixture(b)
	root, devRoot := f.host.DriverRoot, f.host.DevRoot

	for _, shape := range benchSpecShapes {
		path := oci.ConfigPath(writeBundle(b, filepath.Join(f.dir, "read-"+shape), f.specs[shape]))
		b.Run("ReadSpec/"+shape, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(f.specs[shape])))
			for i := 0; i < b.N; i++ {
				raw, err := os.ReadFile(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := oci.ParseSpec(path, raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	var bspec specs.Spec
	if err := json.Unmarshal(f.specs["runc-default"], &bspec); err != nil {
		b.Fatal(err)
	}
	policy := request.Policy{
		AcceptEnvWhenUnprivileged: f.cfg.Request.AcceptEnvvarWhenUnprivileged,
		AcceptVolumeMounts:        f.cfg.Request.AcceptDeviceListAsVolumeMounts,
	}
	b.Run("RequestFromSpec", func(b *testing.B) { // what PrepareBundle calls: the env plus the policy checks
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, _, err := request.FromSpec(&bspec, policy); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("MayRequestGPU", func(b *testing.B) { // the raw-bytes check that lets non-GPU specs skip decoding
		b.ReportAllocs()
		raw := f.specs["runc-default"]
		for i := 0; i < b.N; i++ {
			if !request.MayRequestGPU(raw) {
				b.Fatal("GPU spec not recognised")
			}
		}
	})

	b.Run("FindNVML", func(b *testing.B) { // ld.so.cache parse and in-root resolution, part of the NVML query and fingerprint
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := discover.FindNVML(root); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("NVMLQuery/in-process-warm", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			d, err := nvmlinfo.Query(root)
			if err != nil || len(d.GPUs) != 8 {
				b.Fatalf("query NVML: %d GPUs, %v", len(d.GPUs), err)
			}
		}
	})

	b.Run("NVMLQuery/in-process-cold", func(b *testing.B) {
		var total time.Duration
		report := filepath.Join(b.TempDir(), "nvml-ns")
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCreateBenchNVMLChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), benchNVMLRootEnv+"="+root, benchNVMLReportEnv+"="+report)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("child: %v: %s", err, out)
			}
			raw, err := os.ReadFile(report)
			if err != nil {
				b.Fatalf("child wrote no report: %v", err)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += time.Duration(ns)
		}
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
	})

	b.Run("NVMLQuery/gpu-ctk", func(b *testing.B) { // what a cache miss runs: gpu-ctk info --json, exec'd
		f.needCTK(b)
		b.ReportAllocs()
		query := NVMLQuery(f.ctk)
		for i := 0; i < b.N; i++ {
			d, err := query(context.Background(), root)
			if err != nil || len(d.GPUs) != 8 {
				b.Fatalf("gpu-ctk: %d GPUs, %v", len(d.GPUs), err)
			}
		}
	})

	dopts := discover.Options{DriverRoot: root, DevRoot: devRoot, Timeout: f.cfg.Discovery.TimeoutDuration()}
	b.Run("Discover/cache-hit", func(b *testing.B) {
		b.ReportAllocs()
		o := dopts
		o.CacheFile, o.Query = filepath.Join(b.TempDir(), "cache.csv"), inProcessQuery
		if _, err := discover.Discover(o, f.devices); err != nil { // fills the cache
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := discover.Discover(o, f.devices)
			if err != nil || !res.CacheHit {
				b.Fatalf("cache hit %v, %v", res.CacheHit, err)
			}
		}
	})

	b.Run("Discover/miss-gpu-ctk", func(b *testing.B) { // no cache: gpu-ctk, then the driver-file scan
		f.needCTK(b)
		b.ReportAllocs()
		o := dopts
		o.Query = NVMLQuery(f.ctk)
		for i := 0; i < b.N; i++ {
			if _, err := discover.Discover(o, f.devices); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("FindDriverFiles", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := discover.FindDriverFiles(root, f.phost.Driver.Version); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("FindDeviceNodes", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := discover.FindDeviceNodes(devRoot); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("PlanBuild", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := plan.Build(f.req, f.phost, nil); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("EditsApply", func(b *testing.B) {
		b.ReportAllocs()
		fresh := make([]*specs.Spec, 256)
		batched(b, func(n int) {
			for i := 0; i < n; i++ {
				fresh[i] = new(specs.Spec)
				if err := json.Unmarshal(f.specs["runc-default"], fresh[i]); err != nil {
					b.Fatal(err)
				}
			}
		}, func(i int) {
			if err := f.planned.Rendered(f.render).Apply(fresh[i]); err != nil {
				b.Fatal(err)
			}
		})
	})

	for _, shape := range benchSpecShapes {
		path := oci.ConfigPath(writeBundle(b, filepath.Join(f.dir, "encode-"+shape), f.specs[shape]))
		sf, err := oci.ParseSpec(path, f.specs[shape])
		if err != nil {
			b.Fatal(err)
		}
		if err := f.planned.Rendered(f.render).Apply(sf.Spec); err != nil {
			b.Fatal(err)
		}
		encoded, err := sf.Encode()
		if err != nil {
			b.Fatal(err)
		}
		b.Run("SpecEncode/"+shape, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(encoded)))
			for i := 0; i < b.N; i++ {
				if _, err := sf.Encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("SpecWriteAtomic/"+shape, func(b *testing.B) { // temp file, fsync, rename, directory fsync
			b.ReportAllocs()
			b.SetBytes(int64(len(encoded)))
			for i := 0; i < b.N; i++ {
				if err := atomicfile.Write(sf.Path, encoded, 0o644, atomicfile.Options{Follow: true, KeepOwner: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	prepare := func(name string, spec []byte, cfg config.Config, wantChanged bool) {
		b.Run(name, func(b *testing.B) {
			if wantChanged {
				f.needCTK(b) // the untimed first call fills the cache through gpu-ctk (and cache-off asks it every time)
			}
			first := f.prepareBundles(b, spec, cfg)
			b.StopTimer()
			after, err := os.ReadFile(oci.ConfigPath(first))
			if err != nil {
				b.Fatal(err)
			}
			if changed := string(after) != string(spec); changed != wantChanged {
				b.Fatalf("PrepareBundle changed the spec: %v, want %v", changed, wantChanged)
			}
		})
	}
	for _, shape := range benchSpecShapes {
		prepare("PrepareBundle/"+shape, f.specs[shape], f.cfg, true)
	}
	noCache := f.cfg
	noCache.Discovery.Cache = false
	prepare("PrepareBundle/cache-off", f.specs["runc-default"], noCache, true)
	prepare("PrepareBundle/non-GPU", benchSpec(benchGPUEnv[:2], false), f.cfg, false)
}

// TestCreateBenchNVMLChild is not a test: it is the child process of
// BenchmarkCreatePath/NVMLQuery/in-process-cold, which sets its environment. It times the process's
// first nvmlinfo.Query (the NVML load included) and writes the nanoseconds to a file.
func TestCreateBenchNVMLChild(t *testing.T) {
	root := os.Getenv(benchNVMLRootEnv)
	if root == "" {
		t.Skip("not a test: the child process of BenchmarkCreatePath/NVMLQuery/in-process-cold, run only by it")
	}
	start := time.Now()
	d, err := nvmlinfo.Query(root)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.GPUs) == 0 {
		t.Fatal("no GPUs")
	}
	if err := os.WriteFile(os.Getenv(benchNVMLReportEnv), []byte(strconv.FormatInt(took.Nanoseconds(), 10)), 0o644); err != nil {
		t.Fatal(err)
	}
}

package ctk

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/cdi"
	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/engine"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

const doctorUsage = `usage:
  gpu-ctk doctor [--json] [--engine-root DIR]

doctor checks what GPU containers need on this host, one check a line, each starting with ok,
warn, fail or skip, and a failing, warning or skipped check ends with its fix: the
configuration (the file gpu-runtime reads: GPU_RUNTIME_CONFIG or /etc/gpu-runtime/config.toml;
engines start gpu-runtime without this shell's GPU_RUNTIME_CONFIG, and read the latter; when it
does not parse, the checks that read it are skipped), the driver, NVML and
how long it takes, every GPU's device node, the control, UVM and MIG capability nodes,
persistence mode, MIG, device health (gpu-ctk health), gpu-hook and ldconfig, the low-level runtime, the discovery cache,
the container engines found (docker, containerd, cri-o, podman) and under which names
gpu-runtime is registered ("gpu", "nvidia": a runtime of gpu-runtime's is told by its path) (and, when the engine answers on its socket — DOCKER_HOST, CONTAINERD_ADDRESS —
whether the running engine loaded it), docker's --gpus hook, the cgroup version, the /dev/char
links an engine on the systemd cgroup driver needs, and the CDI spec. The exit status is
1 when a check fails. --json prints a list of {check, status, detail, fix} objects.
--engine-root looks for the engines' files and programs under DIR instead of / (a host
mounted elsewhere, tests).
`

// Check is one line of gpu-ctk doctor.
type Check struct {
	Check  string `json:"check"`
	Status string `json:"status"` // ok, warn, fail, or skip (not run: what it reads is broken)
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// The statuses of a check.
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
	statusSkip = "skip" // not run: what it reads is broken (a line of its own says what)
)

func runDoctor(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk doctor", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the checks as JSON")
	engineRoot := fs.String("engine-root", "/", "look for the engines' files and programs under DIR")
	if help, err := parseNoArgs(fs, args, doctorUsage, stdout); help || err != nil {
		return err
	}
	d := &doctor{engineRoot: *engineRoot}
	d.run()
	if *asJSON {
		if err := writeJSON(stdout, d.checks); err != nil {
			return err
		}
	} else {
		var b strings.Builder
		for _, c := range d.checks {
			fmt.Fprintf(&b, "%-4s %s: %s", c.Status, c.Check, c.Detail)
			if c.Fix != "" {
				b.WriteString(" — fix: " + c.Fix)
			}
			b.WriteString("\n")
		}
		if _, err := io.WriteString(stdout, b.String()); err != nil {
			return err
		}
	}
	if slices.ContainsFunc(d.checks, func(c Check) bool { return c.Status == statusFail }) {
		return ErrReported
	}
	return nil
}

// doctor runs the checks in order; later checks use what earlier ones found.
type doctor struct {
	engineRoot string
	checks     []Check
	cfg        config.Config
	driver     *discover.Driver // nil when NVML did not answer
	devices    discover.DeviceNodes
	// memoryLimits asks whether the driver under root offers per-cgroup GPU memory limits;
	// nil: nvmlinfo.MemoryLimitsOffered. (One NVML per process: tests of other packages load
	// the fake drivers; this one's tests replace it.)
	memoryLimits func(root string) error
}

func (d *doctor) add(check, status, detail, fix string) {
	d.checks = append(d.checks, Check{Check: check, Status: status, Detail: detail, Fix: fix})
}

func (d *doctor) run() {
	if !d.checkConfig() {
		// Every other check reads the configuration: from the defaults they would report
		// failures (driver not loaded, nodes missing) that are not the host's.
		for _, name := range configDependentChecks {
			d.add(name, statusSkip, "not checked: it reads the configuration, which does not parse", "correct the configuration (the config check above), then run gpu-ctk doctor again")
		}
		d.checkEngines()
		d.checkCgroups()
		return
	}
	for _, check := range []func(){d.checkDriver, d.checkNVML, d.checkDeviceNodes, d.checkGPUs, d.checkHealth,
		d.checkHook, d.checkRuntime, d.checkCache, d.checkEngines, d.checkCgroups, d.checkDevChar, d.checkCDI, d.checkMPS, d.checkSharedGPUs} {
		check()
	}
}

// configDependentChecks are the checks that read the configuration, skipped when it does not parse.
var configDependentChecks = []string{"driver", "NVML", "device nodes", "persistence mode", "MIG", "health", "hook", "low-level runtime", "discovery cache", "/dev/char links", "CDI", "MPS", "shared GPUs"}

// checkMPS: every configured MPS share runs (a stopped one fails its containers).
func (d *doctor) checkMPS() {
	names := d.cfg.MPS.ShareNames()
	if len(names) == 0 {
		return
	}
	var running, stopped []string
	for _, n := range names {
		if st := mps.Check(d.cfg.MPS, n); st.Running {
			running = append(running, fmt.Sprintf("%s (pid %d)", n, st.PID))
		} else {
			stopped = append(stopped, n+" ("+st.Why+")")
		}
	}
	if len(stopped) > 0 {
		d.add("MPS", statusWarn, "shares not running: "+strings.Join(stopped, ", ")+"; their containers fail to start",
			"gpu-ctk mps start (or systemctl enable --now gpu-runtime-mps@<share>)")
		return
	}
	d.add("MPS", statusOK, "shares running: "+strings.Join(running, ", "), "")
}

// checkSharedGPUs: where dra.shared-gpus shares GPUs between Kubernetes claims, what
// enforces a claim's memory — its MPS daemon, and the driver's per-cgroup limits where NVML
// answers that it offers them (d.memoryLimits, nvmlinfo.MemoryLimitsOffered by default).
func (d *doctor) checkSharedGPUs() {
	if len(d.cfg.DRA.SharedGPUs) == 0 {
		return
	}
	probe := d.memoryLimits
	if probe == nil {
		probe = func(root string) error { return nvmlinfo.MemoryLimitsOffered(root, "") }
	}
	// NVML cannot be interrupted: a hung driver leaves the probe behind, the check goes on.
	done := make(chan error, 1)
	go func() { done <- probe(d.cfg.Driver.Root) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(memoryLimitsProbeTimeout):
		err = fmt.Errorf("NVML did not answer within %v", memoryLimitsProbeTimeout)
	}
	head := "dra.shared-gpus = " + strings.Join(d.cfg.DRA.SharedGPUs, ", ") + ": "
	switch {
	case err == nil:
		d.add("shared GPUs", statusOK, head+mps.MemoryLimitsApplied, "")
	case errors.Is(err, nvmlinfo.ErrMemoryLimitsNotOffered):
		d.add("shared GPUs", statusWarn, head+mps.MemoryLimitsNote(err.Error()),
			"none needed: each claim's MPS daemon enforces its memory; for per-cgroup limits too, install NVIDIA driver R615 (CUDA 13.4) or later")
	default:
		d.add("shared GPUs", statusWarn, head+mps.MemoryLimitsNote("per-cgroup GPU memory limits: cannot ask NVML: "+err.Error()),
			"see the NVML check: until NVML answers, each claim's MPS daemon alone enforces its memory")
	}
}

// memoryLimitsProbeTimeout bounds doctor's question whether the driver offers memory limits.
const memoryLimitsProbeTimeout = 10 * time.Second

// checkConfig loads the configuration into d.cfg; false when it does not parse. A
// GPU_RUNTIME_CONFIG of this shell is a warning: the engines start gpu-runtime without it.
func (d *doctor) checkConfig() bool {
	path := config.Path(os.Getenv)
	cfg, warnings, err := config.LoadFromEnv(os.Getenv)
	switch {
	case err != nil:
		d.add("config", statusFail, err.Error()+"; the checks that read it are skipped",
			"correct "+path+" (gpu-ctk config prints what gpu-runtime reads): until then every GPU container fails to start")
	case len(warnings) > 0:
		d.add("config", statusWarn, path+": "+strings.Join(warnings, "; "), "remove or correct the keys named")
	default:
		if _, serr := os.Stat(path); serr != nil {
			d.add("config", statusOK, "no "+path+": the built-in defaults apply", "")
		} else {
			d.add("config", statusOK, path+" parses", "")
		}
	}
	if env := os.Getenv(config.EnvPath); env != "" && filepath.Clean(env) != config.DefaultPath {
		d.add("config for engines", statusWarn, fmt.Sprintf("%s=%s is set in this shell, so gpu-ctk reads %s; docker, containerd and cri-o start gpu-runtime with their own environment, "+
			"without it: their containers read %s, and may fail where these checks pass", config.EnvPath, env, env, config.DefaultPath),
			fmt.Sprintf("put these settings in %s (or set %s in the engine's service environment: systemctl edit docker), then restart the engine", config.DefaultPath, config.EnvPath))
	}
	if err != nil {
		return false
	}
	d.cfg = cfg
	return true
}

func (d *doctor) checkDriver() {
	p := filepath.Join(d.cfg.Driver.ProcRoot, "proc/driver/nvidia/version")
	f, err := os.Open(p)
	if err != nil {
		d.add("driver", statusFail, fmt.Sprintf("the NVIDIA kernel module is not loaded: %v", err), "install the NVIDIA driver, or load its module (modprobe nvidia)")
		return
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 4096)).ReadString('\n')
	_, after, _ := strings.Cut(line, "Kernel Module")
	version := "unknown version"
	if fields := strings.Fields(after); len(fields) > 0 {
		version = fields[0]
	}
	d.add("driver", statusOK, "kernel module "+version+" loaded ("+p+")", "")
}

func (d *doctor) checkNVML() {
	timeout := d.cfg.Discovery.TimeoutDuration()
	start := time.Now()
	drv, _, err := gpuhost.Driver(d.cfg, nvmlinfo.QueryContext, false)
	switch {
	case errors.Is(err, discover.ErrTimeout):
		d.add("NVML", statusFail, fmt.Sprintf("no answer within discovery.timeout (%s): the driver is hung or still initialising", timeout),
			"check nvidia-smi and the kernel log (dmesg) for Xid errors; enable persistence mode (nvidia-smi -pm 1)")
	case err != nil:
		d.add("NVML", statusFail, err.Error(), "install the driver's user-space libraries, or set driver.root to where they are (the GPU operator's: /run/nvidia/driver)")
	default:
		d.driver = &drv
		d.add("NVML", statusOK, fmt.Sprintf("%s answered in %s: driver %s, CUDA %s, %d GPU(s)", drv.NVMLPath, time.Since(start).Round(time.Millisecond), drv.Version, drv.CUDAVersion, len(drv.GPUs)), "")
	}
}

func (d *doctor) checkDeviceNodes() {
	nodes, err := discover.FindDeviceNodes(d.cfg.Driver.DevRoot)
	if err != nil {
		d.add("device nodes", statusFail, err.Error(), "check driver.dev-root")
		return
	}
	d.devices = nodes
	root := d.cfg.Driver.DevRoot
	before := len(d.checks) // each problem adds one
	check := func(p, what, fix, status string) {
		if _, ok := nodes.Nodes[p]; ok {
			return
		}
		why := "missing"
		if err := nodes.Invalid[p]; err != nil {
			why = err.Error()
		}
		d.add("device nodes", status, fmt.Sprintf("%s (%s) under dev root %q: %s", p, what, root, why), fix)
	}
	check("/dev/nvidiactl", "the control node every GPU container needs", "load the NVIDIA driver (nvidia-modprobe), or set driver.dev-root", statusFail)
	check("/dev/nvidia-uvm", "CUDA needs it", "load the nvidia-uvm module: nvidia-modprobe -u -c=0", statusWarn)
	check("/dev/nvidia-uvm-tools", "CUDA profilers need it", "nvidia-modprobe -u -c=0", statusWarn)
	var gpus []discover.GPU
	if d.driver != nil {
		gpus = d.driver.GPUs
	}
	for _, g := range gpus {
		p := fmt.Sprintf("/dev/nvidia%d", g.Minor)
		n, found := nodes.Nodes[p]
		switch {
		case !found:
			check(p, fmt.Sprintf("GPU %d, %s", g.Index, g.UUID), fmt.Sprintf("create it: nvidia-modprobe -c %d (or check driver.dev-root)", g.Minor), statusFail)
		case n.Type != "c" || n.Major != 195 || n.Minor != int64(g.Minor):
			d.add("device nodes", statusFail, fmt.Sprintf("%s is %s %d:%d, but GPU %d (%s) is c 195:%d", n.HostPath, n.Type, n.Major, n.Minor, g.Index, g.UUID, g.Minor),
				fmt.Sprintf("recreate it: rm %s && nvidia-modprobe -c %d", n.HostPath, g.Minor))
		}
	}
	if len(d.checks) == before {
		d.add("device nodes", statusOK, fmt.Sprintf("nvidiactl, nvidia-uvm, nvidia-uvm-tools and the %d GPU node(s) under dev root %q", len(gpus), root), "")
	}
}

// checkGPUs: persistence mode and MIG, per GPU, and the MIG capabilities.
func (d *doctor) checkGPUs() {
	if d.driver == nil {
		return
	}
	var off []string
	for _, g := range d.driver.GPUs {
		if g.Persistence == "disabled" {
			off = append(off, fmt.Sprintf("%d (%s)", g.Index, g.UUID))
		}
	}
	if len(off) > 0 {
		d.add("persistence mode", statusWarn, "off on GPU "+strings.Join(off, ", ")+": the driver tears down and re-initialises the GPU between users, so NVML and CUDA start slowly",
			"run nvidia-persistenced (the driver's service), or nvidia-smi -pm 1")
	} else {
		d.add("persistence mode", statusOK, "on for every GPU (or not reported)", "")
	}

	var migs, pending []string
	migDevices := 0
	for _, g := range d.driver.GPUs {
		switch {
		case g.MIGCurrent != g.MIGPending:
			pending = append(pending, fmt.Sprintf("%d (%s): current %s, pending %s", g.Index, g.UUID, onOff(g.MIGCurrent), onOff(g.MIGPending)))
		case g.MIGEnabled():
			migs = append(migs, fmt.Sprintf("GPU %d: %d MIG device(s)", g.Index, len(g.MIGDevices)))
			migDevices += len(g.MIGDevices)
		}
	}
	switch {
	case len(pending) > 0:
		d.add("MIG", statusWarn, "MIG mode change pending on GPU "+strings.Join(pending, "; ")+": such a GPU is given to no container",
			"reset the GPU (nvidia-smi -r -i <index>, with nothing running on it) or reboot")
	case len(migs) == 0:
		d.add("MIG", statusOK, "no GPU in MIG mode", "")
	default:
		caps, err := discover.ReadMIGCaps(d.cfg.Driver.ProcRoot, d.driver.GPUs)
		if err != nil {
			d.add("MIG", statusFail, err.Error(), "check driver.proc-root; the driver's MIG capabilities must be readable")
			return
		}
		host := plan.Host{Driver: *d.driver, Devices: d.devices, MIGCaps: caps, ProcRoot: d.cfg.Driver.ProcRoot}
		var problems []string
		for _, dev := range plan.Devices(d.driver.GPUs) {
			if !dev.IsMIG() {
				continue
			}
			if _, err := dev.Edits(host); err != nil {
				problems = append(problems, err.Error())
			}
		}
		if len(problems) > 0 {
			d.add("MIG", statusFail, strings.Join(problems, "; "), "recreate the capability nodes: nvidia-modprobe -f /proc/driver/nvidia/capabilities/…, or reload the driver")
			return
		}
		how := fmt.Sprintf("capability nodes /dev/nvidia-caps (major %d)", caps.Major)
		if caps.Major == 0 {
			how = "the driver's /proc capability interface"
		}
		d.add("MIG", statusOK, strings.Join(migs, ", ")+"; "+how+" in place for all "+fmt.Sprint(migDevices), "")
	}
}

// checkHealth: the devices gpu-runtime keeps from containers, and a health file it cannot trust.
func (d *doctor) checkHealth() {
	if d.driver == nil {
		return
	}
	// ReadHealth sets the GPUs' health: on a copy, the checks after this one see the driver's.
	drv := *d.driver
	drv.GPUs = slices.Clone(drv.GPUs)
	for i := range drv.GPUs {
		drv.GPUs[i].MIGDevices = slices.Clone(drv.GPUs[i].MIGDevices)
	}
	warnings := discover.ReadHealth(drv.GPUs, discover.HealthOptions{File: d.cfg.Health.File, ProcRoot: d.cfg.Driver.ProcRoot})
	if len(warnings) > 0 {
		d.add("health", statusWarn, strings.Join(warnings, "; "), "gpu-ctk health clear all rewrites it, root-owned with mode 0600 (records in it are lost: gpu-ctk health mark them again)")
		return
	}
	sick := healthSummary(drv)
	devices := len(plan.Devices(drv.GPUs))
	fix := "repair or replace them (gpu-ctk health says why each is held back); gpu-ctk health clear UUID returns a recorded one to service"
	switch {
	case len(sick) == 0:
		file := cmp.Or(d.cfg.Health.File, `a health file (health.file is "")`)
		d.add("health", statusOK, fmt.Sprintf("every device healthy (%d): none gone, excluded or recorded in %s", devices, file), "")
	case len(sick) < devices:
		d.add("health", statusWarn, fmt.Sprintf("%d of %d device(s) given to no container: %s", len(sick), devices, strings.Join(sick, "; ")), fix)
	default:
		d.add("health", statusFail, "every device is unhealthy: "+strings.Join(sick, "; "), fix)
	}
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}

// checkHook: gpu-hook, and the host's ldconfig it runs, which must be static.
func (d *doctor) checkHook() {
	self, _ := os.Executable()
	hookPath, err := create.HookPath(d.cfg.Hook.Path, self)
	if err != nil {
		d.add("hook", statusFail, err.Error(), "install gpu-hook next to gpu-runtime, or set hook.path")
		return
	}
	ld, err := ldupdate.StaticLDConfig(d.cfg.Hook.LDConfig) // what the hook runs where it needs ldconfig
	if err != nil {
		d.add("hook", statusFail, fmt.Sprintf("gpu-hook %s; %v", hookPath, err), "set hook.ldconfig to a static ldconfig (glibc's is)")
		return
	}
	d.add("hook", statusOK, fmt.Sprintf("gpu-hook %s; ldconfig %s (static)", hookPath, ld), "")
}

func (d *doctor) checkRuntime() {
	self, _ := os.Executable()
	p, err := create.LowLevelRuntime(d.cfg.Runtime.Runtimes, self)
	if err != nil {
		d.add("low-level runtime", statusFail, err.Error(), "install runc (apt-get install runc), or set runtime.runtimes")
		return
	}
	d.add("low-level runtime", statusOK, p, "")
}

func (d *doctor) checkCache() {
	if !d.cfg.Discovery.Cache {
		d.add("discovery cache", statusWarn, "off (discovery.cache = false): every GPU container queries NVML", "set discovery.cache = true unless you are debugging discovery")
		return
	}
	opts := discover.Options{DriverRoot: d.cfg.Driver.Root, DevRoot: d.cfg.Driver.DevRoot, ProcRoot: d.cfg.Driver.ProcRoot, CacheFile: d.cfg.Discovery.CacheFile}
	state, err := discover.CheckCache(opts, d.devices)
	file := d.cfg.Discovery.CacheFile
	switch state {
	case discover.CacheFresh:
		d.add("discovery cache", statusOK, "fresh: "+file+" answers for this host; GPU containers start without NVML", "")
	case discover.CacheMissing:
		d.add("discovery cache", statusOK, "none yet at "+file+": the next GPU container writes it", "")
	case discover.CacheStale:
		d.add("discovery cache", statusOK, "stale: the host changed since "+file+" was written (a driver upgrade, MIG, device nodes); the next GPU container re-reads it", "")
	default:
		d.add("discovery cache", statusWarn, fmt.Sprintf("%s: %v", state, err), "remove "+file+"; gpu-runtime rewrites it, root-owned with mode 0600")
	}
}

// engines are the container engines doctor looks for: the program that says one is installed,
// and its configuration files under the engine root.
var engines = []struct {
	name, program  string
	engine         engine.Engine // "" for podman, which takes no registration
	config, dropIn string
	restart        string
}{
	{"docker", "dockerd", engine.Docker, engine.DefaultDockerConfig, "", "systemctl restart docker"},
	{"containerd", "containerd", engine.Containerd, engine.DefaultContainerdConfig, engine.DefaultContainerdDropIn, "systemctl restart containerd"},
	{"cri-o", "crio", engine.CRIO, engine.DefaultCRIODropIn, "", "systemctl restart crio"},
	{"podman", "podman", "", "", "", ""},
}

// findProgram looks for a program under the engine root, on the PATH systemd gives services
// such as dockerd.
func (d *doctor) findProgram(name string) string {
	for _, dir := range plan.SystemDirs {
		p := filepath.Join(d.engineRoot, dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func (d *doctor) checkEngines() {
	runtimePath, _ := runtimePath("", realHost) // fails only on a --runtime-path
	found := 0
	for _, e := range engines {
		prog := d.findProgram(e.program)
		if prog == "" {
			continue
		}
		found++
		check := "engine " + e.name
		if e.engine == "" {
			d.add(check, statusOK, fmt.Sprintf("installed (%s): it takes no registration; run podman run --runtime %s, or with a CDI spec podman run --device nvidia.com/gpu=0", prog, runtimePath), "")
			continue
		}
		opts := engine.Options{RuntimePath: runtimePath, ConfigPath: filepath.Join(d.engineRoot, e.config)}
		if e.dropIn != "" {
			opts.DropInPath = filepath.Join(d.engineRoot, e.dropIn)
		}
		configure := fmt.Sprintf("gpu-ctk runtime configure --runtime=%s && %s", e.engine, e.restart)
		registered, err := engine.PlanUnconfigure(e.engine, opts) // every runtime of ours, whatever its name
		if err != nil {
			d.add(check, statusFail, fmt.Sprintf("installed (%s); its configuration cannot be read: %v", prog, err), "correct the file named; the engine itself fails on it too")
			continue
		}
		if !registered.Changed() {
			detail := fmt.Sprintf("installed (%s); runtime %q not registered (%s)", prog, engine.DefaultRuntimeName, strings.Join(registered.Files, ", "))
			if status, note, fix := d.compareLive(e.engine, e.restart, nil, ""); status != "" {
				d.add(check, statusWarn, detail+note, fix)
				continue
			}
			d.add(check, statusWarn, detail, configure)
			continue
		}
		names := registered.Runtimes
		what := runtimeNames(names)
		status, detail, fix, defaultName := statusOK, "", "", ""
		for _, name := range names {
			opts.RuntimeName = name
			opts.SetAsDefault = false
			again := configure
			if name != engine.DefaultRuntimeName {
				again = fmt.Sprintf("gpu-ctk runtime configure --runtime=%s --runtime-name=%s && %s", e.engine, name, e.restart)
			}
			current, err := engine.PlanConfigure(e.engine, opts)
			switch {
			case err != nil:
				status, detail, fix = statusFail, fmt.Sprintf("installed (%s): %v", prog, err), "correct the file named"
			case current.Changed() && len(current.Stale) > 0:
				status, detail, fix = statusWarn, fmt.Sprintf("installed (%s); runtime %q registered, but %s", prog, name, strings.Join(current.Stale, "; ")), again
			case current.Changed():
				status, detail, fix = statusWarn, fmt.Sprintf("installed (%s); runtime %q registered, but not as gpu-ctk runtime configure writes it now (another path than %s, or an older gpu-ctk)", prog, name, runtimePath), again
			}
			if status != statusOK {
				break
			}
			opts.SetAsDefault = true
			if def, err := engine.PlanConfigure(e.engine, opts); err == nil && !def.Changed() {
				defaultName = name
			}
		}
		if status != statusOK {
			d.add(check, status, detail, fix)
			continue
		}
		detail = fmt.Sprintf("installed (%s); %s registered: %s", prog, what, runtimePath)
		switch {
		case defaultName != "" && len(names) == 1:
			detail += ", the default runtime"
		case defaultName != "":
			detail += fmt.Sprintf(", %q the default runtime", defaultName)
		}
		status, note, fix := d.compareLive(e.engine, e.restart, names, defaultName)
		d.add(check, cmp.Or(status, statusOK), detail+note, fix)
		if e.engine == engine.Docker {
			d.checkDockerHook()
		}
	}
	if found == 0 {
		d.add("engines", statusWarn, "no docker, containerd, cri-o or podman found under "+d.engineRoot, "install a container engine, then gpu-ctk runtime configure --runtime=<it>")
	}
}

// checkDockerHook: docker run --gpus needs an executable named nvidia-container-runtime-hook on
// dockerd's PATH, or dockerd refuses the flag.
func (d *doctor) checkDockerHook() {
	p := d.findProgram(request.DockerHookName)
	if p == "" {
		d.add("docker --gpus", statusWarn, request.DockerHookName+" is not on dockerd's PATH: docker run --gpus fails with \"could not select device driver\" (NVIDIA_VISIBLE_DEVICES still works)",
			"install the package, or link it: ln -s gpu-hook /usr/bin/"+request.DockerHookName+"; then restart docker")
		return
	}
	if isGPUHook(p) {
		d.add("docker --gpus", statusOK, p+" is gpu-hook: docker run --gpus works with --runtime=gpu or gpu as the default runtime", "")
		return
	}
	d.add("docker --gpus", statusOK, p+" is another program (NVIDIA's toolkit): docker run --gpus works through gpu-runtime, which honours the request and removes that hook", "")
}

func (d *doctor) checkCgroups() {
	// The cgroup driver follows the init system: engines use systemd's where systemd runs.
	driver := "cgroup driver cgroupfs (no systemd)"
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() {
		driver = "systemd is the init: engines use its cgroup driver unless configured otherwise"
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		d.add("cgroups", statusWarn, fmt.Sprintf("/sys/fs/cgroup: %v", err), "mount the cgroup filesystem (the init system does)")
		return
	}
	switch st.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		d.add("cgroups", statusOK, "v2 (unified): device access is enforced by an eBPF program runc writes from the spec; "+driver, "")
	default:
		mode := "v1"
		if _, err := os.Stat("/sys/fs/cgroup/unified"); err == nil {
			mode = "v1 (hybrid: v1 controllers, v2 at /sys/fs/cgroup/unified)"
		}
		if _, err := os.Stat("/sys/fs/cgroup/devices"); errors.Is(err, fs.ErrNotExist) {
			d.add("cgroups", statusWarn, mode+" without the devices controller: device rules cannot be enforced", "mount the devices controller (the init system does)")
			return
		}
		d.add("cgroups", statusOK, mode+": device access is enforced by the devices controller; "+driver, "")
	}
}

func (d *doctor) checkCDI() {
	if d.driver == nil {
		return // nothing to compare a spec with
	}
	r := cdi.NewResolver(d.cfg.CDI.SpecDirs, d.cfg.CDI.AllowedKinds)
	generate := "gpu-ctk cdi generate --output /var/run/cdi/nvidia.yaml (or enable gpu-runtime-cdi.service)"
	files, problems := r.CheckSpecs(cdi.DefaultKind, d.driver.GPUs)
	switch {
	case len(files) == 0:
		detail := "no spec of kind " + cdi.DefaultKind + " in " + strings.Join(d.cfg.CDI.SpecDirs, ", ") + ": podman --device, containerd 2.x, cri-o and CDI names in NVIDIA_VISIBLE_DEVICES cannot find the GPUs (gpu-runtime's own NVIDIA_VISIBLE_DEVICES path needs none)"
		if p := r.Problems(); len(p) > 0 {
			detail += "; specs not loaded: " + strings.Join(p, "; ")
		}
		d.add("CDI", statusWarn, detail, generate)
	case len(problems) > 0:
		d.add("CDI", statusFail, strings.Join(problems, "; "), "regenerate it: "+generate)
	default:
		d.add("CDI", statusOK, strings.Join(files, ", ")+" describes this host", "")
	}
}

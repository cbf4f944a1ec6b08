package engines

// CDI consumers. gpu-ctk writes a spec; engines that speak CDI apply it
// themselves, with plain runc and no gpu-runtime in the path:
//   - podman 4.3 (`podman run --device vendor/class=name`), which reads only /etc/cdi and
//     /var/run/cdi (4.3 ignores containers.conf's cdi_spec_dirs, which later podmans read) and
//     refuses specs newer than cdiVersion 0.5.0;
//   - containerd 2.x's CRI, whose containers name devices in the CRI CDI_devices field (the
//     device plugin's cdi-cri strategy, DRA drivers).
// An engine without CDI (containerd 1.6) reaches the devices through gpu-runtime, from the
// cdi.k8s.io/ annotations the device plugin's cdi-annotations strategy puts on containers.
//
// The specs describe fake hosts. The one for podman and containerd 2.x is a MIG host (GPU 0
// with three MIG devices, GPU 1 whole); its kind is the suite's own, gpu-runtime.test/gpu-<pid>,
// so that nothing else on the machine answers for it and two runs of the suite, each with a
// spec in the machine-wide /var/run/cdi, never offer the same device names (the CDI library
// drops names two specs of one directory both define). The spec gpu-runtime reads is generated
// from gpu-runtime's own configuration, the suite's host, as a user would: kind
// gpu-runtime.test/gpu in the private directory [cdi] spec-dirs names (see writeWrapper).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// wrapperCDIKind is the kind of the spec in cdiDir, generated for the suite's host.
const wrapperCDIKind = "gpu-runtime.test/gpu"

// podmanCDIDir is where podman 4.3 reads specs (and /etc/cdi): the suite writes its spec there
// under the work directory's name (podmanCDISpecs) and removes it when it ends.
const podmanCDIDir = "/var/run/cdi"

// podmanCDISpecs are the spec files the suite whose work directory is dir puts in podmanCDIDir:
// gpu-ctk's spec, and the same spec claiming a newer cdiVersion.
func podmanCDISpecs(dir string) (spec, newer string) {
	base := filepath.Join(podmanCDIDir, filepath.Base(dir))
	return base + ".yaml", base + "-newer.yaml"
}

// generatedSpec is a spec `gpu-ctk cdi generate` wrote.
type generatedSpec struct {
	path, kind string
	host       *fakehost.Host
	// mounts are the container paths of the spec's common mounts: the driver files.
	mounts []string
}

// name returns the qualified name of the spec's device.
func (s *generatedSpec) name(device string) string {
	return s.kind + "=" + device
}

// generateSpec runs `gpu-ctk cdi generate --kind kind --output output` with gpu-runtime's
// configuration config, and reads the spec back with the CDI library (which validates it).
func generateSpec(config, kind, output string, host *fakehost.Host) (*generatedSpec, error) {
	if err := os.MkdirAll(filepath.Dir(output), 0o755); err != nil {
		return nil, err
	}
	args := []string{"cdi", "generate", "--kind", kind, "--output", output}
	cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...)
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+config)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gpu-ctk %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	spec, err := cdi.ReadSpec(output, 0)
	if err != nil {
		return nil, fmt.Errorf("read back the spec gpu-ctk wrote: %w", err)
	}
	s := &generatedSpec{path: output, kind: kind, host: host}
	for _, m := range spec.ContainerEdits.Mounts {
		s.mounts = append(s.mounts, m.ContainerPath)
	}
	return s, nil
}

// migCDI is the MIG host of the CDI consumers' tests and the spec gpu-ctk generated for it,
// in a directory of its own (containerd 2.x's cdi_spec_dirs).
type migCDI struct {
	*generatedSpec
	config string // gpu-runtime's configuration for the host, which gpu-ctk reads
	mig    []fakehost.MIGInfo
}

var migCDISetup shared[*migCDI]

func migCDIFixture(t *testing.T) *migCDI {
	t.Helper()
	requireSetup(t)
	return migCDISetup.get(t, func() (*migCDI, error) {
		opts := fakehost.Default(2)
		if err := opts.GPUs[0].AddMIGDevices("3g.40gb", "2g.20gb", "1g.10gb"); err != nil {
			return nil, err
		}
		h, err := fakehost.Build(filepath.Join(workDir, "mig-host"), opts)
		if err != nil {
			return nil, fmt.Errorf("build the MIG host: %w", err)
		}
		config := filepath.Join(workDir, "mig-host.toml")
		content := fmt.Sprintf("[driver]\nroot = %q\ndev-root = %q\nproc-root = %q\n[hook]\npath = %q\n[discovery]\ncache-file = %q\n",
			h.DriverRoot, h.DevRoot, h.ProcRoot, filepath.Join(binDir, "gpu-hook"), filepath.Join(workDir, "mig-host-cache.csv"))
		if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
			return nil, err
		}
		kind := fmt.Sprintf("gpu-runtime.test/gpu-%d", os.Getpid())
		spec, err := generateSpec(config, kind, filepath.Join(workDir, "cdi-mig", "gpu.yaml"), h)
		if err != nil {
			return nil, err
		}
		m := &migCDI{generatedSpec: spec, config: config, mig: h.MIGDevices()}
		if len(m.mig) != 3 {
			return nil, fmt.Errorf("the MIG host has %d MIG devices, want 3", len(m.mig))
		}
		return m, nil
	})
}

var wrapperSpecSetup shared[*generatedSpec]

// wrapperSpec returns the spec gpu-runtime's [cdi] spec-dirs offers: generated, kind
// wrapperCDIKind, from the configuration gpu-runtime itself runs with (the suite's host).
func wrapperSpec(t *testing.T) *generatedSpec {
	t.Helper()
	requireSetup(t)
	return wrapperSpecSetup.get(t, func() (*generatedSpec, error) {
		return generateSpec(runtimeConfig, wrapperCDIKind, filepath.Join(cdiDir, "gpu.yaml"), host)
	})
}

// cdiCase is one container given CDI devices, and what it must get (or the error it must
// fail with).
type cdiCase struct {
	description string
	devices     []string // qualified names
	want        enginetest.CDIWant
	wantErr     string
}

// TestPodmanCDI: podman 4.3 with plain runc applies the spec gpu-ctk wrote, MIG devices
// included, and refuses the same spec claiming a newer cdiVersion — why gpu-ctk writes the
// lowest version that can express the spec.
func TestPodmanCDI(t *testing.T) {
	p := startedPodman(t)
	m := migCDIFixture(t)
	spec, newer := podmanCDISpecs(workDir)
	atExit(func() {
		for _, f := range []string{spec, newer} {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(os.Stderr, "engines: remove %s: %v\n", f, err)
			}
		}
	})
	if _, err := generateSpec(m.config, m.kind, spec, m.host); err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T, devices []string) result {
		t.Helper()
		flags := []string{"--runtime", "runc"}
		for _, d := range devices {
			flags = append(flags, "--device", d)
		}
		var cidFile string
		return p.runScriptCid(t, &cidFile, enginetest.CDIProbe, flags...)
	}
	h := m.host
	testCases := []cdiCase{
		{description: "a whole GPU by index", devices: []string{m.name("1")},
			want: enginetest.CDIWant{GPUs: []int{1}}},
		{description: "a whole GPU by UUID", devices: []string{m.name(h.Options.GPUs[1].UUID)},
			want: enginetest.CDIWant{GPUs: []int{1}}},
		{description: "a MIG device by G:I", devices: []string{m.name("0:1")},
			want: enginetest.CDIWant{MIGs: m.mig[1:2]}},
		{description: "a MIG device by UUID", devices: []string{m.name(m.mig[2].UUID)},
			want: enginetest.CDIWant{MIGs: m.mig[2:3]}},
		{description: "a MIG device and a whole GPU", devices: []string{m.name("0:0"), m.name("1")},
			want: enginetest.CDIWant{GPUs: []int{1}, MIGs: m.mig[0:1]}},
		// GPU 0 is in MIG mode: all is GPU 1 and every MIG device, not GPU 0 whole.
		{description: "all", devices: []string{m.name("all")},
			want: enginetest.CDIWant{GPUs: []int{1}, MIGs: m.mig}},
		{description: "no device: no GPU"},
		{description: "an unknown device is refused", devices: []string{m.name("7")},
			wantErr: "unresolvable CDI devices " + m.name("7")},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			r := run(t, tc.devices)
			if tc.wantErr != "" {
				wantRefused(t, "podman run", r, 0, tc.wantErr)
				return
			}
			if r.Code != 0 {
				t.Fatalf("podman run %v: %s", tc.devices, r)
			}
			want := tc.want
			want.Mounts = m.mounts
			enginetest.WantCDIDevices(t, h, r.Stdout, want)
		})
	}

	// The control: podman 4.3 (Debian 12's) drops a spec newer than it knows, so a gpu-ctk
	// that wrote a newer cdiVersion than the spec needs would lose every podman 4.3 user.
	// Newer podmans accept more; there the run only shows what this podman does.
	t.Run("podman 4.3 refuses the same spec claiming cdiVersion 0.6.0", func(t *testing.T) {
		data, err := os.ReadFile(spec)
		if err != nil {
			t.Fatal(err)
		}
		newerKind := m.kind + "-newer"
		text := string(data)
		for _, edit := range []struct{ re, repl string }{{`(?m)^cdiVersion: .*$`, "cdiVersion: 0.6.0"}, {`(?m)^kind: .*$`, "kind: " + newerKind}} {
			re := regexp.MustCompile(edit.re)
			if len(re.FindAllString(text, -1)) != 1 {
				t.Fatalf("the spec gpu-ctk wrote has no single line matching %s:\n%.400s", edit.re, text)
			}
			text = re.ReplaceAllString(text, edit.repl)
		}
		if err := os.WriteFile(newer, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		version := podmanVersion(t, p)
		r := run(t, []string{newerKind + "=1"})
		if !strings.HasPrefix(version, "4.3.") {
			t.Logf("podman %s: cdiVersion 0.6.0 spec: exit %d (the 0.5.0 floor is podman 4.3's)", version, r.Code)
			return
		}
		wantRefused(t, "podman run", r, 0, "unresolvable CDI devices "+newerKind+"=1")
	})
}

// podmanVersion returns `podman --version`'s version.
func podmanVersion(t *testing.T, p *podman) string {
	t.Helper()
	r := runCmd(t, 30*time.Second, p.env, "", "podman", "--version")
	if f := strings.Fields(r.Stdout); r.Code == 0 && len(f) == 3 {
		return f[2]
	}
	t.Fatalf("podman --version: %s", r)
	return ""
}

// TestContainerd2CDI: containerd 2.x's CRI injects the devices a container's CDI_devices
// field names, from the spec in its cdi_spec_dirs, through plain runc: no gpu-runtime in the
// path.
func TestContainerd2CDI(t *testing.T) {
	bins := requireContainerd2(t)
	crictl := requireCrictl(t)
	m := migCDIFixture(t)
	c := containerd2Daemon.get(t, func() (*containerd, error) { return startContainerd2(bins, m.path) })
	cri := &criClient{c: c, crictl: crictl, pods: map[string]string{}}
	t.Cleanup(func() { cri.removePods(t) })

	t.Run("the CRI has CDI on, reading the suite's spec directory only", func(t *testing.T) {
		var info struct {
			Config struct {
				EnableCDI   bool     `json:"enableCDI"`
				CDISpecDirs []string `json:"cdiSpecDirs"`
			} `json:"config"`
		}
		out := cri.run(t, "info")
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("decode crictl info: %v\n%s", err, out)
		}
		if want := filepath.Dir(m.path); !info.Config.EnableCDI || len(info.Config.CDISpecDirs) != 1 || info.Config.CDISpecDirs[0] != want {
			t.Errorf("crictl info: enableCDI %v, cdiSpecDirs %q; want true and [%q]", info.Config.EnableCDI, info.Config.CDISpecDirs, want)
		}
	})

	h := m.host
	testCases := []cdiCase{
		{description: "CDI_devices: a whole GPU", devices: []string{m.name("1")},
			want: enginetest.CDIWant{GPUs: []int{1}}},
		{description: "CDI_devices: a MIG device by G:I", devices: []string{m.name("0:2")},
			want: enginetest.CDIWant{MIGs: m.mig[2:3]}},
		{description: "CDI_devices: a MIG device by UUID and a GPU by UUID", devices: []string{m.name(m.mig[0].UUID), m.name(h.Options.GPUs[1].UUID)},
			want: enginetest.CDIWant{GPUs: []int{1}, MIGs: m.mig[0:1]}},
		{description: "no CDI_devices: no GPU"},
		{description: "an unknown device fails crictl create", devices: []string{m.name("7")},
			wantErr: "unresolvable CDI devices " + m.name("7")},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			out := cri.runProbe(t, handlerPod(""), criContainer{cdiDevices: tc.devices, script: enginetest.CDIProbe}, tc.wantErr)
			if tc.wantErr != "" {
				return
			}
			want := tc.want
			want.Mounts = m.mounts
			enginetest.WantCDIDevices(t, h, out, want)
		})
	}
}

// TestContainerdCRICDIAnnotations: containerd 1.6 has no CDI; its CRI hands the gpu runtime
// (gpu-runtime) a container's cdi.k8s.io/ annotations, because gpu-ctk's drop-in lists them
// in container_annotations, and gpu-runtime applies the devices they name from [cdi]
// spec-dirs.
//
// A pod's annotations are not passed: gpu-ctk lists no pod_annotations. That is on purpose.
// Whoever creates a pod writes its annotations, so a CDI annotation on a pod would let any
// tenant take any GPU; a container's annotations come from the kubelet, and the device
// plugin's cdi-annotations strategy sets them there for the devices it allocated.
func TestContainerdCRICDIAnnotations(t *testing.T) {
	c := startedContainerd(t)
	spec := wrapperSpec(t)
	cri := &criClient{c: c, crictl: requireCrictl(t), pods: map[string]string{}}
	t.Cleanup(func() { cri.removePods(t) })

	annotation := func(names ...string) map[string]string {
		return map[string]string{"cdi.k8s.io/gpu-runtime-test": strings.Join(names, ",")}
	}
	testCases := []struct {
		description string
		pod         criPod
		annotations map[string]string
		want        enginetest.CDIWant
		wantErr     string
	}{
		{description: "runtime gpu, container annotation gets GPU 1", pod: handlerPod("gpu"),
			annotations: annotation(spec.name("1")), want: enginetest.CDIWant{GPUs: []int{1}}},
		{description: "runtime gpu, container annotation naming both GPUs by UUID", pod: handlerPod("gpu"),
			annotations: annotation(spec.name(host.Options.GPUs[1].UUID), spec.name(host.Options.GPUs[0].UUID)), want: enginetest.CDIWant{GPUs: []int{0, 1}}},
		{description: "runtime gpu, a pod annotation alone gets no GPU",
			pod: criPod{name: "pod-gpu-annotated", handler: "gpu", annotations: annotation(spec.name("1"))}},
		{description: "runtime gpu, an unknown device fails crictl start with gpu-runtime's error", pod: handlerPod("gpu"),
			annotations: annotation(spec.name("7")), wantErr: `unresolvable CDI devices "` + spec.name("7") + `"`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			out := cri.runProbe(t, tc.pod, criContainer{annotations: tc.annotations, script: enginetest.CDIProbe}, tc.wantErr)
			if tc.wantErr != "" {
				return
			}
			want := tc.want
			want.Mounts = spec.mounts
			enginetest.WantCDIDevices(t, host, out, want)
		})
	}
}

// containerd2Daemon is the private containerd 2.x, beside (never sharing anything with) the
// containerd 1.6 of containerd_test.go.
var containerd2Daemon shared[*containerd]

// containerd2Main is containerd 2.x's config (version 3): private root, state, socket, opt
// directory, CNI directories and runc state, as for containerd 1.6 (containerdMain), plus CDI
// on with the suite's spec directory only. runtime_path names the 2.x shim (PATH would give
// the 1.6 one), and NRI is off (it listens on /var/run/nri/nri.sock otherwise).
const containerd2Main = `version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %[4]q
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = [%[6]q]
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[7]q]
      conf_dir = %[7]q
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      runtime_path = %[8]q
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        Root = %[9]q
`

// startContainerd2 starts containerd 2.x (the binaries in bins) with CDI specs from the
// directory of spec, and imports the images into the CRI's namespace.
func startContainerd2(bins, spec string) (*containerd, error) {
	dir := filepath.Join(workDir, "ctd2")
	c := &containerd{
		dir:          dir,
		config:       filepath.Join(dir, "config.toml"),
		sock:         filepath.Join(dir, "containerd.sock"),
		crictlConfig: filepath.Join(dir, "crictl.yaml"),
		ctr:          filepath.Join(bins, "ctr"),
		cgroup:       "cri2",
	}
	for _, d := range []string{"cni", "pods"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	main := fmt.Sprintf(containerd2Main, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock,
		filepath.Join(dir, "opt"), containerdPause, filepath.Dir(spec), filepath.Join(dir, "cni"),
		filepath.Join(bins, "containerd-shim-runc-v2"), filepath.Join(dir, "runc"))
	if err := os.WriteFile(c.config, []byte(main), 0o644); err != nil {
		return nil, err
	}
	if err := c.writeCrictlConfig(); err != nil {
		return nil, err
	}
	ready := func() error { return c.quiet(10*time.Second, "version") }
	daemon, err := startDaemon("containerd2", dir, nil, ready, filepath.Join(bins, "containerd"), "--config", c.config)
	if err != nil {
		return nil, err
	}
	daemon.BeforeStop = c.removeAll
	if err := c.quiet(60*time.Second, "-n", "k8s.io", "images", "import", imageArchive); err != nil {
		return nil, fmt.Errorf("import the images: %w", err)
	}
	return c, nil
}

var containerd2Build shared[string]

// requireContainerd2 returns the directory holding containerd 2.x, ctr and its
// containerd-shim-runc-v2: .cache/containerd2, built there once by scripts/build-containerd2.sh
// (a no-op when the cache holds the pinned version; a cold build takes a few minutes and
// needs the Go module proxy).
func requireContainerd2(t *testing.T) string {
	t.Helper()
	requireSetup(t)
	containerd2Build.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts", "build-containerd2.sh"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			containerd2Build.err = fmt.Errorf("scripts/build-containerd2.sh: %w: %s", err, stderr.String())
			return
		}
		containerd2Build.val = strings.TrimSpace(string(out))
	})
	if containerd2Build.err != nil {
		prerequisite(t, "containerd 2.x is not built and building it failed: %v", containerd2Build.err)
	}
	return containerd2Build.val
}

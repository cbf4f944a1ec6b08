// Package arm64 checks gpu-runtime's arm64 build (Grace Hopper, Grace Blackwell nodes) on an
// amd64 machine: `make package ARCH=arm64` cross-builds both packages, the packaged binaries
// run (--version) under qemu-user, the arm64 gpu-ctk loads an aarch64 fake NVML (`gpu-ctk
// info` on an arm64 fake host) and the arm64 gpu-runtime injects a GPU into a bundle and hands
// it to an arm64 runc, all under qemu-aarch64-static run explicitly, with the aarch64 C library
// of libc6-arm64-cross (-L /usr/aarch64-linux-gnu).
//
// Without binfmt_misc (where qemu-user-static's postinst registered no handler, as in
// containers), runc's own re-exec of its init (a copy of /proc/self/exe) is an exec of an
// aarch64 file by the kernel, which fails with ENOEXEC: the create is then checked up to that
// point — runc parsed and validated the GPU-injected spec, set up the container and failed
// exactly at "unable to start init: … exec format error". Where an enabled qemu-aarch64
// binfmt handler exists, the create must succeed and the container be "created".
//
// It needs root (mknod, runc), the aarch64 cross compiler and C library, and
// qemu-user-static. Under `make test` (GPU_RUNTIME_E2E=1) a missing prerequisite fails the
// run; otherwise the tests skip with the reason.
package arm64

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

const (
	qemu        = "qemu-aarch64-static"
	sysroot     = "/usr/aarch64-linux-gnu" // libc6-arm64-cross: the loader and glibc for qemu -L
	crossGCC    = "aarch64-linux-gnu-gcc"
	runcVersion = "v1.4.3" // as scripts/build-realgpu-kit.sh builds for amd64
)

var (
	skipReason string
	repo       string // the module root
	workDir    string
	pkgRoot    string // the arm64 .deb extracted
	debVersion string // the packages' version
)

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		if workDir, err = os.MkdirTemp("", "gpu-runtime-arm64-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(workDir)
		if reason := prerequisites(); reason != "" {
			if os.Getenv("GPU_RUNTIME_E2E") == "1" {
				fmt.Fprintf(os.Stderr, "arm64: FAIL: prerequisite missing under GPU_RUNTIME_E2E=1: %s\n", reason)
				return 1
			}
			skipReason = reason
			fmt.Fprintf(os.Stderr, "\n*** arm64 tests SKIPPED: %s (run `make test` as root to run them) ***\n\n", reason)
		}
		return m.Run()
	}()
	os.Exit(code)
}

// prerequisites returns a reason the tests cannot run here, or "".
func prerequisites() string {
	if runtime.GOARCH != "amd64" {
		return "these tests cross-build arm64 on amd64; this machine is " + runtime.GOARCH
	}
	if os.Geteuid() != 0 {
		return "the arm64 tests need root (mknod for the fake host, runc)"
	}
	for _, tool := range []string{crossGCC, qemu, "dpkg-deb", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (make deps installs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user-static)"
		}
	}
	if _, err := os.Stat(filepath.Join(sysroot, "lib/libc.a")); err != nil {
		return "the aarch64 C library is not installed (apt-get install libc6-dev-arm64-cross; make deps does)"
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "cannot find the module root: " + err.Error()
	}
	repo = strings.TrimSpace(string(out))
	return ""
}

func requireArm64(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED: " + skipReason)
	}
}

// run runs a command with a deadline and returns its combined output.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	done := make(chan struct{})
	timer := time.AfterFunc(timeout, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		close(done)
	})
	out, err := cmd.CombinedOutput()
	if !timer.Stop() {
		<-done
		return string(out), fmt.Errorf("%s timed out after %v", name, timeout)
	}
	return string(out), err
}

// underQemu runs an arm64 binary under qemu-aarch64-static.
func underQemu(t *testing.T, env []string, bin string, args ...string) (string, error) {
	t.Helper()
	return run(t, 2*time.Minute, env, qemu, append([]string{"-L", sysroot, bin}, args...)...)
}

// packageArm64 runs `make package ARCH=arm64` into a private BIN and DIST once, and extracts
// the .deb; the tests use the packaged binaries.
func packageArm64(t *testing.T) string {
	t.Helper()
	requireArm64(t)
	if pkgRoot != "" {
		return pkgRoot
	}
	bin, dist := filepath.Join(workDir, "bin"), filepath.Join(workDir, "dist")
	out, err := run(t, 10*time.Minute, nil, "make", "-C", repo, "package", "ARCH=arm64", "BIN="+bin, "DIST="+dist)
	if err != nil {
		t.Fatalf("make package ARCH=arm64: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "gpu-runtime_*_arm64.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "gpu-runtime-*-1.aarch64.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package ARCH=arm64 made %q and %q; want one arm64 .deb and one aarch64 .rpm\n%s", debs, rpms, out)
	}
	if others, _ := filepath.Glob(filepath.Join(dist, "*amd64*")); len(others) > 0 {
		t.Errorf("make package ARCH=arm64 made amd64 packages too: %q", others)
	}
	if arch, err := run(t, time.Minute, nil, "dpkg-deb", "-f", debs[0], "Architecture"); err != nil || strings.TrimSpace(arch) != "arm64" {
		t.Errorf("%s: Architecture %q, %v; want arm64", debs[0], arch, err)
	}
	v, err := run(t, time.Minute, nil, "dpkg-deb", "-f", debs[0], "Version")
	if err != nil {
		t.Fatalf("dpkg-deb -f Version: %v: %s", err, v)
	}
	debVersion = strings.TrimSpace(v)
	if _, err := exec.LookPath("rpm"); err == nil {
		if arch, err := run(t, time.Minute, nil, "rpm", "-qp", "--qf", "%{ARCH}", rpms[0]); err != nil || strings.TrimSpace(arch) != "aarch64" {
			t.Errorf("%s: ARCH %q, %v; want aarch64", rpms[0], arch, err)
		}
	} else {
		t.Log("rpm is not installed: the .rpm's architecture is not checked (make deps installs rpm)")
	}
	root := filepath.Join(workDir, "deb")
	if out, err := run(t, time.Minute, nil, "dpkg-deb", "-x", debs[0], root); err != nil {
		t.Fatalf("dpkg-deb -x: %v: %s", err, out)
	}
	pkgRoot = root
	return root
}

// TestPackage checks what `make package ARCH=arm64` builds: an arm64 .deb and an aarch64 .rpm
// whose gpu-runtime and gpu-hook are static aarch64 executables and whose gpu-ctk is an
// aarch64 executable of glibc's aarch64 loader, each answering --version with the packages'
// version under qemu-user.
func TestPackage(t *testing.T) {
	root := packageArm64(t)
	for _, tc := range []struct {
		name   string
		interp string // "" for a static executable
	}{
		{"gpu-runtime", ""},
		{"gpu-hook", ""},
		{"gpu-ctk", "/lib/ld-linux-aarch64.so.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(root, "usr/bin", tc.name)
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != elf.EM_AARCH64 {
				t.Errorf("%s is for %v, want EM_AARCH64", tc.name, f.Machine)
			}
			interp := ""
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					b := make([]byte, p.Filesz)
					if _, err := p.ReadAt(b, 0); err != nil {
						t.Fatal(err)
					}
					interp = strings.TrimRight(string(b), "\x00")
				}
			}
			if interp != tc.interp {
				t.Errorf("%s: program interpreter %q, want %q", tc.name, interp, tc.interp)
			}
			out, err := underQemu(t, nil, bin, "--version")
			if want := tc.name + " version " + debVersion; err != nil || !strings.HasPrefix(out, want+"\n") {
				t.Errorf("%s --version under qemu: %v\n%s\nwant it to start with %q", tc.name, err, out, want)
			}
		})
	}
}

// TestPackageRefusesOtherArch: package.sh checks that the binaries are of the architecture it
// packages, so that arm64 binaries never go into an amd64 package (or the reverse).
func TestPackageRefusesOtherArch(t *testing.T) {
	root := packageArm64(t)
	out, err := run(t, time.Minute, []string{"ARCH=amd64", "BIN=" + filepath.Join(root, "usr/bin"), "DIST=" + t.TempDir()},
		filepath.Join(repo, "scripts/package.sh"))
	want := "package: " + filepath.Join(root, "usr/bin/gpu-runtime") +
		" is not an amd64 binary (ELF machine 183, want 62): build it with make build ARCH=amd64 (make package ARCH=amd64 does)"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("package.sh ARCH=amd64 with arm64 binaries: %v\n%s\nwant %q", err, out, want)
	}
}

// arm64Host builds an arm64 fake host with two GPUs and a gpu-runtime config pointing at it.
func arm64Host(t *testing.T, extra string) (*fakehost.Host, string) {
	t.Helper()
	opts := fakehost.Default(2)
	opts.Arch = "arm64"
	h, err := fakehost.Build(filepath.Join(t.TempDir(), "host"), opts)
	if err != nil {
		t.Fatalf("build arm64 fake host: %v", err)
	}
	config := filepath.Join(t.TempDir(), "config.toml")
	content := fmt.Sprintf("[driver]\nroot = %q\ndev-root = %q\nproc-root = %q\n%s", h.DriverRoot, h.DevRoot, h.ProcRoot, extra)
	if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return h, config
}

// TestCtkInfo: the arm64 gpu-ctk loads the arm64 fake host's aarch64 NVML through dlopen and
// reports its GPUs.
func TestCtkInfo(t *testing.T) {
	root := packageArm64(t)
	h, config := arm64Host(t, "")
	out, err := underQemu(t, []string{"GPU_RUNTIME_CONFIG=" + config}, filepath.Join(root, "usr/bin/gpu-ctk"), "info", "--json")
	if err != nil {
		t.Fatalf("gpu-ctk info --json under qemu: %v\n%s", err, out)
	}
	var info struct {
		DriverVersion string `json:"driver_version"`
		GPUs          []struct {
			UUID string `json:"uuid"`
			Name string `json:"name"`
		} `json:"gpus"`
		NVMLPath string `json:"nvml_path"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("gpu-ctk info --json: %v\n%s", err, out)
	}
	if info.DriverVersion != h.Options.DriverVersion || info.NVMLPath != h.NVMLPath() || len(info.GPUs) != 2 ||
		info.GPUs[0].UUID != h.Options.GPUs[0].UUID || info.GPUs[1].UUID != h.Options.GPUs[1].UUID ||
		info.GPUs[1].Name != h.Options.GPUs[1].Name {
		t.Errorf("gpu-ctk info --json = %+v\nwant driver %s, NVML %s and the GPUs %+v", info, h.Options.DriverVersion, h.NVMLPath(), h.Options.GPUs)
	}
}

// arm64Runc returns an arm64 runc: built once from the Go module proxy with the aarch64 cross
// compiler (cgo, for runc's nsexec; static, so that qemu needs no -L for it; without seccomp,
// which would need an aarch64 libseccomp) and cached under .cache/runc/.
func arm64Runc(t *testing.T) string {
	t.Helper()
	cache := filepath.Join(repo, ".cache/runc", runcVersion+"-arm64")
	out := filepath.Join(cache, "runc")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	t.Logf("building runc %s for arm64 from the Go module proxy into %s (once; about 2 minutes)", runcVersion, cache)
	tmp := t.TempDir()
	script := `set -e
go mod init runc-build >/dev/null 2>&1
go get "github.com/opencontainers/runc@$RUNC_VERSION"
go build -trimpath -tags "urfave_cli_no_docs netgo osusergo" -ldflags "-s -w -linkmode external -extldflags -static" -o runc github.com/opencontainers/runc`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "RUNC_VERSION="+runcVersion, "GOWORK=off", "GOFLAGS=-mod=mod",
		"CGO_ENABLED=1", "GOOS=linux", "GOARCH=arm64", "CC="+crossGCC)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build runc %s for arm64: %v\n%s", runcVersion, err, b)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "runc"), out+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".new", out); err != nil {
		t.Fatal(err)
	}
	return out
}

// binfmtRegistered reports whether the kernel runs aarch64 executables through an enabled
// qemu binfmt_misc handler, in which case runc's re-exec of its init works under qemu.
func binfmtRegistered() bool {
	b, err := os.ReadFile("/proc/sys/fs/binfmt_misc/qemu-aarch64")
	return err == nil && strings.HasPrefix(string(b), "enabled")
}

// qemuScript writes an executable script at path that runs the arm64 binary bin under
// qemu-aarch64-static with its arguments: what a binfmt_misc handler does, for the programs
// an arm64 binary running in qemu-user execs (qemu-user cannot exec an aarch64 file itself).
func qemuScript(t *testing.T, path, bin string) {
	t.Helper()
	script := "#!/bin/sh\nexec " + qemu + " -L " + sysroot + " " + bin + ` "$@"` + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestCreate runs the arm64 gpu-runtime (under qemu) for `create` on a bundle asking for GPU 1
// of the arm64 fake host. What it execs runs under qemu through scripts (qemuScript): the
// arm64 gpu-ctk, next to it, answering its NVML query on the aarch64 fake NVML, and the arm64
// runc, its configured runtime.
func TestCreate(t *testing.T) {
	root := packageArm64(t)
	h, config := arm64Host(t, "")
	runc := arm64Runc(t)
	if out, err := underQemu(t, nil, runc, "--version"); err != nil || !strings.HasPrefix(out, "runc version "+strings.TrimPrefix(runcVersion, "v")+"\n") {
		t.Fatalf("arm64 runc --version under qemu: %v\n%s", err, out)
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "runc-arm64")
	qemuScript(t, wrapper, runc)
	// gpu-runtime finds gpu-ctk next to itself.
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	gpuRuntime := filepath.Join(bin, "gpu-runtime")
	if out, err := run(t, time.Minute, nil, "cp", filepath.Join(root, "usr/bin/gpu-runtime"), gpuRuntime); err != nil {
		t.Fatalf("copy gpu-runtime: %v: %s", err, out)
	}
	qemuScript(t, filepath.Join(bin, "gpu-ctk"), filepath.Join(root, "usr/bin/gpu-ctk"))
	cfg := fmt.Sprintf("[runtime]\nruntimes = [%q]\nlog-level = \"debug\"\n[hook]\npath = %q\n[discovery]\ncache-file = %q\n",
		wrapper, filepath.Join(root, "usr/bin/gpu-hook"), filepath.Join(dir, "discovery-cache.csv"))
	old, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, append([]byte(cfg), old...), 0o644); err != nil {
		t.Fatal(err)
	}

	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, time.Minute, nil, "cp", "/bin/busybox", filepath.Join(bundle, "rootfs/bin/busybox")); err != nil {
		t.Fatalf("copy busybox (make deps installs busybox-static): %v: %s", err, out)
	}
	if out, err := underQemu(t, nil, runc, "spec", "-b", bundle); err != nil {
		t.Fatalf("arm64 runc spec: %v: %s", err, out)
	}
	specPath := filepath.Join(bundle, "config.json")
	var spec specs.Spec
	data, err := os.ReadFile(specPath)
	if err == nil {
		err = json.Unmarshal(data, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"/bin/busybox", "true"}
	spec.Process.Env = append(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES=1")
	if data, err = json.Marshal(&spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(specPath, data, 0o644); err != nil {
		t.Fatal(err)
	}

	state := filepath.Join(dir, "state")
	id := "arm64-create"
	out, createErr := underQemu(t, []string{"GPU_RUNTIME_CONFIG=" + config}, gpuRuntime,
		"--root", state, "create", "--bundle", bundle, id)
	defer func() { _, _ = underQemu(t, nil, runc, "--root", state, "delete", "--force", id) }()

	// The arm64 gpu-runtime edited the spec: GPU 1's node and the aarch64 NVML, not GPU 0.
	var edited specs.Spec
	if data, err = os.ReadFile(specPath); err == nil {
		err = json.Unmarshal(data, &edited)
	}
	if err != nil {
		t.Fatalf("read the edited spec: %v", err)
	}
	devices := map[string]bool{}
	for _, d := range edited.Linux.Devices {
		devices[d.Path] = true
	}
	if !devices["/dev/nvidia1"] || !devices["/dev/nvidiactl"] || devices["/dev/nvidia0"] {
		t.Errorf("devices of the edited spec: %v; want /dev/nvidia1 and /dev/nvidiactl, not /dev/nvidia0", devices)
	}
	nvml := false
	for _, m := range edited.Mounts {
		nvml = nvml || m.Source == h.NVMLPath() && strings.HasPrefix(m.Destination, "/usr/lib/aarch64-linux-gnu/")
	}
	if !nvml {
		t.Errorf("the edited spec mounts no %s into /usr/lib/aarch64-linux-gnu: %+v", h.NVMLPath(), edited.Mounts)
	}

	if binfmtRegistered() {
		if createErr != nil {
			t.Fatalf("gpu-runtime create (qemu-aarch64 binfmt handler enabled): %v\n%s", createErr, out)
		}
		st, err := underQemu(t, nil, runc, "--root", state, "state", id)
		if err != nil || !strings.Contains(st, `"status": "created"`) {
			t.Errorf("runc state after create: %v\n%s", err, st)
		}
		return
	}
	// Without binfmt_misc: runc got the spec, validated it and set the container up, and
	// stopped exactly where the kernel is asked to exec runc's aarch64 init.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Logf("no enabled qemu-aarch64 binfmt_misc handler: runc's init cannot be exec'd; checking the create up to that exec:\n%s",
		strings.Join(lines[max(0, len(lines)-2):], "\n"))
	if createErr == nil {
		t.Fatalf("gpu-runtime create succeeded without a binfmt handler for runc's init: %s", out)
	}
	if !strings.Contains(out, "runc create failed: unable to start container process: unable to start init: fork/exec /proc/self/fd/") ||
		!strings.Contains(out, "exec format error") {
		t.Errorf("gpu-runtime create: %v\n%s\nwant runc to fail only at the exec of its init (exec format error)", createErr, out)
	}
}

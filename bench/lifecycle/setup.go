package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// lab is everything one bench run made: fake hosts and configs under one work directory,
// bundles and a private runc state root under another (on tmpfs where there is one, as
// containerd keeps them under /run); cleanup removes both.
type lab struct {
	work    string // fake hosts, configs, the launcher: removed by cleanup
	run     string // bundles, runc state, busybox: removed by cleanup
	state   string // runc --root
	bundles string
	runc    string // absolute path of runc
	runtime string // absolute path of gpu-runtime
	hook    string // absolute path of gpu-hook
	// baseRuntime and baseHook are another build's (-baseline), "" without one.
	baseRuntime, baseHook string
	ctk                   string // absolute path of gpu-ctk
	noop                  string // absolute path of true(1): the no-op low-level runtime
	busybox               string // a copy of busybox inside run, hard-linked into every rootfs
	// realistic is the template of the realistic image's rootfs (internal/testimage's
	// Default: 1,500 libraries, CUDA libraries, an ld.so.cache), inside run; each bundle of
	// it is a copy whose files are hard links into it. Empty until buildRealistic.
	realistic     string
	realisticLibs int
	// rusage is a tiny C program that forks, execs its arguments, waits and writes the
	// child's ru_maxrss: see maxRSSLauncher.
	rusage string
	// goExec is a static Go program that only execs runc: the floor any Go wrapper pays.
	goExec string
	seq    int
	tracer *tracer // nil unless tracing
}

// baseline resolves another build's gpu-runtime and gpu-hook in dir.
func baseline(dir string) (runtime, hook string, err error) {
	for _, p := range []*string{&runtime, &hook} {
		name := "gpu-runtime"
		if p == &hook {
			name = "gpu-hook"
		}
		if *p, err = filepath.Abs(filepath.Join(dir, name)); err != nil {
			return "", "", err
		}
		if fi, err := os.Stat(*p); err != nil || fi.Mode().Perm()&0o111 == 0 {
			return "", "", fmt.Errorf("-baseline %s: no executable %s there", dir, name)
		}
	}
	return runtime, hook, nil
}

// preflight checks what the bench needs and resolves the binaries.
func preflight(o options) (runc, runtime, hook, ctk, noop string, err error) {
	if os.Geteuid() != 0 {
		return "", "", "", "", "", errors.New("the lifecycle benchmark needs root (runc, mknod for the fake GPU hosts); run it with sudo")
	}
	var problems []string
	if runc, err = exec.LookPath(o.runc); err != nil {
		problems = append(problems, fmt.Sprintf("runc %q not found (make deps installs it): %v", o.runc, err))
	}
	for _, tool := range []string{"gcc", "ldconfig"} {
		if _, err := exec.LookPath(tool); err != nil {
			problems = append(problems, tool+" not found (make deps installs it)")
		}
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		problems = append(problems, "/bin/busybox not found (apt-get install busybox-static)")
	}
	if noop, err = exec.LookPath("true"); err != nil {
		problems = append(problems, "true(1) not found")
	}
	check := func(p, flagName string) string {
		abs, err := filepath.Abs(p)
		if err == nil {
			var fi os.FileInfo
			if fi, err = os.Stat(abs); err == nil && (fi.IsDir() || fi.Mode().Perm()&0o111 == 0) {
				err = errors.New("not an executable file")
			}
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("-%s %s: %v (run `make build` in the repository root, or pass -%s)", flagName, p, err, flagName))
		}
		return abs
	}
	runtime, hook, ctk = check(o.runtime, "runtime"), check(o.hook, "hook"), check(o.ctk, "ctk")
	if len(problems) > 0 {
		return "", "", "", "", "", errors.New(strings.Join(problems, "\n  "))
	}
	runc, err = filepath.Abs(runc)
	return runc, runtime, hook, ctk, noop, err
}

// newLab creates the work and bundle directories and copies busybox next to the bundles.
func newLab(parent, bundleParent, runc, runtime, hook, ctk, noop string) (*lab, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	work, err := os.MkdirTemp(parent, "gpu-runtime-bench-")
	if err != nil {
		return nil, fmt.Errorf("create work directory: %w", err)
	}
	l := &lab{work: work, runc: runc, runtime: runtime, hook: hook, ctk: ctk, noop: noop}
	if bundleParent == "auto" {
		bundleParent = defaultBundleParent()
	}
	if bundleParent == "" {
		l.run = filepath.Join(work, "run")
		err = os.Mkdir(l.run, 0o700)
	} else {
		l.run, err = os.MkdirTemp(bundleParent, "gpu-runtime-bench-")
	}
	if err != nil {
		return l, fmt.Errorf("create bundle directory: %w", err)
	}
	l.state, l.bundles, l.busybox = filepath.Join(l.run, "state"), filepath.Join(l.run, "bundles"), filepath.Join(l.run, "busybox")
	for _, d := range []string{l.state, l.bundles} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return l, fmt.Errorf("create %s: %w", d, err)
		}
	}
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return l, fmt.Errorf("read busybox: %w", err)
	}
	if err := os.WriteFile(l.busybox, data, 0o755); err != nil {
		return l, fmt.Errorf("copy busybox: %w", err)
	}
	if l.rusage, err = buildLauncher(work); err != nil {
		return l, err
	}
	if l.goExec, err = buildGoExec(work, l.runc); err != nil {
		return l, err
	}
	return l, nil
}

// goExecSource is the least a Go wrapper of runc can be: start, then exec runc with the
// same arguments. Built like gpu-runtime (static, stripped), it measures what the Go
// runtime's start-up and the second exec cost on this machine, which gpu-runtime pays on
// create, start and delete before any work of its own.
const goExecSource = `package main

import (
	"os"
	"syscall"
)

var runc string // set with -ldflags -X

func main() {
	err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	panic(err)
}
`

func buildGoExec(dir, runc string) (string, error) {
	src := filepath.Join(dir, "goexec")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for name, content := range map[string]string{"main.go": goExecSource, "go.mod": "module goexec\n\ngo 1.24\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, "goexec-runc")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.runc="+runc, "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the Go exec-only reference wrapper: %w: %s", err, out)
	}
	return bin, nil
}

// maxRSSLauncher is the C source of the launcher used to measure peak RSS. Measuring a
// child of the bench directly would be wrong: the kernel keeps, across exec, the high-water
// RSS of the memory the process had before exec — for a child of a Go program, the Go
// program's own (os/exec forks with CLONE_VM, sharing the parent's memory until exec). A
// fresh fork of this tiny C program starts with a new maximum and a memory image of a few
// hundred KiB, so the child's ru_maxrss is that of what it execs: gpu-runtime's own peak
// before it execs its low-level runtime, or that runtime's peak if larger.
const maxRSSLauncher = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

/* usage: rusage OUTFILE PROGRAM [ARGS...] — exit status is PROGRAM's. */
int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: rusage OUTFILE PROGRAM [ARGS...]\n");
        return 125;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 125;
    }
    if (pid == 0) {
        execv(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("wait4");
        return 125;
    }
    FILE *f = fopen(argv[1], "w");
    if (f == NULL || fprintf(f, "%ld\n", ru.ru_maxrss) < 0 || fclose(f) != 0) {
        perror(argv[1]);
        return 125;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
`

// buildLauncher compiles maxRSSLauncher into dir, statically if the C library allows.
func buildLauncher(dir string) (string, error) {
	src := filepath.Join(dir, "rusage.c")
	bin := filepath.Join(dir, "rusage")
	if err := os.WriteFile(src, []byte(maxRSSLauncher), 0o644); err != nil {
		return "", err
	}
	if err := exec.Command("gcc", "-O2", "-static", "-o", bin, src).Run(); err != nil {
		if out, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
			return "", fmt.Errorf("compile the RSS launcher: %w: %s", err, out)
		}
	}
	return bin, nil
}

// cleanup force-deletes every container left in the private state root, reaps orphans that
// were handed to the bench as subreaper, and removes the work directory.
func (l *lab) cleanup() error {
	if l == nil || l.work == "" {
		return nil
	}
	var errs []error
	if out, err := exec.Command(l.runc, "--root", l.state, "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			if out, err := exec.Command(l.runc, "--root", l.state, "delete", "--force", id).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("delete container %s: %w: %s", id, err, strings.TrimSpace(string(out))))
			}
		}
	}
	reapOrphans()
	for _, d := range []string{l.run, l.work} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// defaultBundleParent returns where containerd would keep bundles and runc state: a tmpfs
// (/run, else /dev/shm), or "" (inside the work directory) when there is none.
func defaultBundleParent() string {
	for _, d := range []string{"/run", "/dev/shm"} {
		if fsType(d) == "tmpfs" {
			return d
		}
	}
	return ""
}

// reapOrphans collects exited orphans (a failed create can leave some) without blocking.
func reapOrphans() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// hostConfigs are the gpu-runtime configs written for one fake host.
type hostConfigs struct {
	runc     string // low-level runtime runc
	noop     string // low-level runtime true(1): isolates the wrapper
	noopCold string // true(1), and the discovery cache off: every create queries NVML
	base     string // runc, through the -baseline build's hook and its own cache
}

// buildHost builds a fake GPU host with n GPUs and writes gpu-runtime configs for it. The
// discovery cache (gpu-runtime ≥ the static build; older ones warn about the unknown key) is
// kept per host in the work directory, never in the host's /run.
func (l *lab) buildHost(n int) (hostConfigs, error) {
	h, err := fakehost.Build(filepath.Join(l.work, fmt.Sprintf("host-%dgpu", n)), fakehost.Default(n))
	if err != nil {
		return hostConfigs{}, err
	}
	cache := filepath.Join(l.work, fmt.Sprintf("discovery-cache-%dgpu.json", n))
	write := func(name, runtime string, cacheOn bool) (string, error) {
		p := filepath.Join(l.work, name)
		body := fmt.Sprintf("[runtime]\nruntimes = [%q]\n[driver]\nroot = %q\ndev-root = %q\n[hook]\npath = %q\n[discovery]\ncache = %t\ncache-file = %q\n",
			runtime, h.DriverRoot, h.DevRoot, l.hook, cacheOn, cache)
		return p, os.WriteFile(p, []byte(body), 0o644)
	}
	var c hostConfigs
	if c.runc, err = write(fmt.Sprintf("config-%dgpu.toml", n), l.runc, true); err != nil {
		return c, err
	}
	if l.baseHook != "" {
		// The baseline's own hook and cache: neither build reads the other's.
		p := filepath.Join(l.work, fmt.Sprintf("config-%dgpu-base.toml", n))
		body := fmt.Sprintf("[runtime]\nruntimes = [%q]\n[driver]\nroot = %q\ndev-root = %q\n[hook]\npath = %q\n[discovery]\ncache = true\ncache-file = %q\n",
			l.runc, h.DriverRoot, h.DevRoot, l.baseHook, cache+".base")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return c, err
		}
		c.base = p
	}
	if c.noop, err = write(fmt.Sprintf("config-%dgpu-noop.toml", n), l.noop, true); err != nil {
		return c, err
	}
	c.noopCold, err = write(fmt.Sprintf("config-%dgpu-noop-nocache.toml", n), l.noop, false)
	return c, err
}

// specTemplate returns runc's default spec, adjusted the way the e2e tests do: no terminal,
// writable root (the hook writes /etc/ld.so.cache), and the container runs /bin/true.
func (l *lab) specTemplate() (specs.Spec, error) {
	dir := filepath.Join(l.work, "spec")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return specs.Spec{}, err
	}
	if out, err := exec.Command(l.runc, "spec", "-b", dir).CombinedOutput(); err != nil {
		return specs.Spec{}, fmt.Errorf("runc spec: %w: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return specs.Spec{}, err
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return specs.Spec{}, fmt.Errorf("decode runc spec: %w", err)
	}
	s.Process.Terminal = false
	s.Process.Args = []string{"/bin/true"}
	s.Process.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	s.Root.Readonly = false
	return s, nil
}

// specJSON returns the template with extra environment entries, indented as containerd writes it.
func specJSON(tmpl specs.Spec, env ...string) ([]byte, error) {
	p := *tmpl.Process
	p.Env = append(append([]string(nil), tmpl.Process.Env...), env...)
	tmpl.Process = &p
	return json.MarshalIndent(&tmpl, "", "    ")
}

// The rootfs images a variant runs on (variant.image).
const (
	imageBusybox   = ""          // busybox alone: an empty /usr/lib, no ld.so.cache
	imageRealistic = "realistic" // internal/testimage's realistic CUDA image, plus busybox
)

// buildRealistic builds the realistic image's template rootfs: testimage.Default() (its
// ld.so.cache written by the host's ldconfig), with busybox as /usr/bin/true and the
// directories runc mounts on.
func (l *lab) buildRealistic() error {
	root := filepath.Join(l.run, "realistic")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	img, err := testimage.Build(root, testimage.Default())
	if err != nil {
		return fmt.Errorf("build the realistic image: %w", err)
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Link(l.busybox, filepath.Join(root, "usr/bin/busybox")); err != nil {
		return fmt.Errorf("link busybox into the realistic image: %w", err)
	}
	for _, applet := range []string{"sh", "true"} {
		if err := os.Symlink("busybox", filepath.Join(root, "usr/bin", applet)); err != nil {
			return err
		}
	}
	l.realistic, l.realisticLibs = root, len(img.Libraries)
	return nil
}

// copyTree makes dst a copy of the tree src in which regular files are hard links: the
// bundle gets its own directories and links (the hook adds links and replaces
// /etc/ld.so.cache by rename, never writing a file in place), at a fraction of a copy's cost.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		default:
			return os.Link(p, to)
		}
	})
}

// newBundle makes a fresh bundle with a busybox rootfs and the given config.json; it returns
// a fresh container id too. None of this is timed.
func (l *lab) newBundle(spec []byte) (id, dir string, err error) {
	return l.newImageBundle(spec, imageBusybox)
}

// newImageBundle makes a fresh bundle of the given image with the given config.json.
func (l *lab) newImageBundle(spec []byte, image string) (id, dir string, err error) {
	l.seq++
	id = fmt.Sprintf("gpubench-%d-%d", os.Getpid(), l.seq)
	dir = filepath.Join(l.bundles, id)
	rootfs := filepath.Join(dir, "rootfs")
	if image == imageRealistic {
		if err := copyTree(l.realistic, rootfs); err != nil {
			return "", "", fmt.Errorf("copy the realistic image: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o644); err != nil {
			return "", "", err
		}
		return id, dir, nil
	}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "usr/bin", "usr/lib"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return "", "", err
		}
	}
	if err := os.Link(l.busybox, filepath.Join(rootfs, "bin", "busybox")); err != nil {
		return "", "", fmt.Errorf("link busybox into the rootfs: %w", err)
	}
	for _, applet := range []string{"sh", "true", "ls", "cat"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			return "", "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o644); err != nil {
		return "", "", err
	}
	return id, dir, nil
}

// machine describes where the numbers were taken.
type machine struct {
	nproc, cpuModel, kernel, runc, gpuRuntime, goVersion, workFS, runFS, cgroups, memory, date string
	loadBefore, loadAfter                                                                      string
}

func describeMachine(l *lab, goVersion string) machine {
	m := machine{goVersion: goVersion, date: time.Now().UTC().Format(time.RFC3339)}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		m.nproc = fmt.Sprint(set.Count())
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		m.kernel = unix.ByteSliceToString(uts.Sysname[:]) + " " + unix.ByteSliceToString(uts.Release[:]) + " " + unix.ByteSliceToString(uts.Machine[:])
	}
	if out, err := exec.Command(l.runc, "--version").Output(); err == nil {
		m.runc = strings.Join(strings.Fields(strings.ReplaceAll(string(out), "\n", "; ")), " ")
	}
	if out, err := exec.Command(l.runtime, "--version").Output(); err == nil {
		m.gpuRuntime = strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; ")), " ")
	}
	m.workFS = l.work + " (" + fsType(l.work) + ")"
	m.runFS = l.run + " (" + fsType(l.run) + ")"
	m.cgroups = cgroupLayout()
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		m.memory = fmt.Sprintf("%.1f GiB", float64(si.Totalram)*float64(si.Unit)/(1<<30))
	}
	m.loadBefore = loadAvg()
	return m
}

func fsType(p string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	}
	return fmt.Sprintf("fs magic %#x", st.Type)
}

func cgroupLayout() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return "unknown"
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "v2 (unified)"
	}
	if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "v1 controllers (hybrid, v2 at /sys/fs/cgroup/unified)"
	}
	return "v1"
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

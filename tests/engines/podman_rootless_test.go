package engines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// rootlessUser is the user the rootless podman tests run as, created for them (useradd, with
// subordinate ids) and removed when the suite ends.
const rootlessUser = "gre-rootless"

// rootlessPodman is podman run by an unprivileged user: its storage, run root, XDG_RUNTIME_DIR
// and gpu-runtime's log, discovery cache and health file are the user's, under dir/state; the
// fake host, the binaries and the wrapper are root's, readable by all.
type rootlessPodman struct {
	uid, gid int
	dir      string
	host     *fakehost.Host
	wrapper  string // gpu-runtime with a config of this setup
	config   string // that config
	log      string // gpu-runtime's log
	state    string // the user's directory
	tarball  string // the image's root file system
	env      []string
	args     []string // podman's global flags
}

var (
	rootlessSetup  shared[*rootlessPodman]
	rootlessImport shared[bool]
)

// startedRootless is the user, its fake host and gpu-runtime's configuration.
func startedRootless(t *testing.T) *rootlessPodman {
	t.Helper()
	requireTools(t, "runc", "useradd", "usermod", "userdel", "setpriv", "tar")
	return rootlessSetup.get(t, setupRootless)
}

// startedRootlessPodman is startedRootless with the image in the user's podman storage.
func startedRootlessPodman(t *testing.T) *rootlessPodman {
	t.Helper()
	requireTools(t, "podman", "conmon", "newuidmap", "newgidmap")
	p := startedRootless(t)
	rootlessImport.get(t, func() (bool, error) {
		if out, err := p.command(60*time.Second, "import", "--change", `CMD=["/bin/sh"]`, p.tarball, podmanImage); err != nil {
			return false, fmt.Errorf("rootless podman import: %w: %s", err, out)
		}
		return true, nil
	})
	return p
}

func setupRootless() (*rootlessPodman, error) {
	// The user must reach the files below workDir (made 0700): traversal only, no listing.
	if err := os.Chmod(workDir, 0o711); err != nil {
		return nil, err
	}
	p := &rootlessPodman{dir: filepath.Join(workDir, "rootless")}
	if err := os.MkdirAll(filepath.Join(p.dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	// One test binary at a time owns the user: another run's cleanup would remove it.
	lock, err := lockRootlessUser(3 * time.Minute)
	if err != nil {
		return nil, err
	}
	atExit(func() { _ = lock.Close() })
	uid, gid, err := rootlessAccount(filepath.Join(p.dir, "home"))
	if err != nil {
		return nil, err
	}
	p.uid, p.gid = uid, gid
	state := filepath.Join(p.dir, "state")
	for _, d := range []string{filepath.Join(p.dir, "home"), state, filepath.Join(state, "xdg")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, err
		}
	}
	atExit(func() { p.cleanup(state) })

	// A fake host of its own: the suite's is under directories the user cannot read.
	if p.host, err = fakehost.Build(filepath.Join(p.dir, "host"), fakehost.Default(2)); err != nil {
		return nil, fmt.Errorf("build the fake GPU host: %w", err)
	}
	for _, name := range []string{"gpu-runtime", "gpu-hook", "gpu-ctk"} {
		data, err := os.ReadFile(filepath.Join(binDir, name))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(p.dir, "bin", name), data, 0o755); err != nil {
			return nil, err
		}
	}
	p.tarball = filepath.Join(p.dir, "rootfs.tar")
	data, err := os.ReadFile(rootfsTar)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.tarball, data, 0o644); err != nil {
		return nil, err
	}

	// No no-cgroups here: gpu-runtime finds it runs in a user namespace. The discovery cache is
	// left at root's default: a rootless create keeps its own in XDG_RUNTIME_DIR.
	p.state = state
	p.log = filepath.Join(state, "gpu-runtime.log")
	p.config = filepath.Join(p.dir, "gpu-runtime.toml")
	config := p.config
	content := fmt.Sprintf(`[runtime]
runtimes = ["runc"]
log-level = "debug"
log-file = %q
[driver]
root = %q
dev-root = %q
[hook]
path = %q
[health]
file = %q
`, p.log, p.host.DriverRoot, p.host.DevRoot, filepath.Join(p.dir, "bin", "gpu-hook"), filepath.Join(state, "health.csv"))
	if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
		return nil, err
	}
	p.wrapper = filepath.Join(p.dir, "bin", "gpu-runtime-wrapper")
	script := fmt.Sprintf("#!/bin/sh\nGPU_RUNTIME_CONFIG=%s exec %s \"$@\"\n", shellQuote(config), shellQuote(filepath.Join(p.dir, "bin", "gpu-runtime")))
	if err := os.WriteFile(p.wrapper, []byte(script), 0o755); err != nil {
		return nil, err
	}

	containersConf := fmt.Sprintf("[engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\nevents_logfile_path = %q\ntmp_dir = %q\n",
		filepath.Join(state, "events.log"), filepath.Join(state, "tmp"))
	storageConf := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(state, "root"), filepath.Join(state, "runroot"))
	for name, content := range map[string]string{"containers.conf": containersConf, "storage.conf": storageConf} {
		if err := os.WriteFile(filepath.Join(p.dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	p.env = []string{"HOME=" + filepath.Join(p.dir, "home"), "USER=" + rootlessUser, "LOGNAME=" + rootlessUser,
		"XDG_RUNTIME_DIR=" + filepath.Join(state, "xdg"), "XDG_CONFIG_HOME=" + filepath.Join(p.dir, "home", ".config"),
		"CONTAINERS_CONF=" + filepath.Join(p.dir, "containers.conf"), "CONTAINERS_STORAGE_CONF=" + filepath.Join(p.dir, "storage.conf")}
	p.args = []string{"--root", filepath.Join(state, "root"), "--runroot", filepath.Join(state, "runroot"),
		"--tmpdir", filepath.Join(state, "tmp"), "--cgroup-manager", "cgroupfs", "--events-backend", "file"}
	return p, nil
}

// lockRootlessUser takes the lock on the test user, waiting at most timeout for another run
// of the suite to release it (closing the file releases it).
func lockRootlessUser(timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile("/run/lock/"+rootlessUser+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("lock the rootless test user %s (another run of the engine tests holds /run/lock/%s.lock for %v): %w", rootlessUser, rootlessUser, timeout, err)
		}
	}
}

// rootlessAccount creates the test user with subordinate ids for its user namespaces
// (useradd gives them where /etc/login.defs allows; else a range is added), or reuses the one
// an interrupted run left, and returns its ids.
func rootlessAccount(home string) (int, int, error) {
	if out, err := exec.Command("id", "-u", rootlessUser).Output(); err != nil || len(out) == 0 {
		if out, err := exec.Command("useradd", "--no-create-home", "--home-dir", home, "--shell", "/bin/sh", "--user-group", rootlessUser).CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("useradd %s: %w: %s", rootlessUser, err, out)
		}
	}
	for _, f := range []struct{ file, flag string }{{"/etc/subuid", "--add-subuids"}, {"/etc/subgid", "--add-subgids"}} {
		data, _ := os.ReadFile(f.file)
		if slices.ContainsFunc(strings.Split(string(data), "\n"), func(l string) bool { return strings.HasPrefix(l, rootlessUser+":") }) {
			continue
		}
		if out, err := exec.Command("usermod", f.flag, "1879048192-1879113727", rootlessUser).CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("usermod %s %s: %w: %s", f.flag, rootlessUser, err, out)
		}
	}
	ids := make([]int, 2)
	for i, flag := range []string{"-u", "-g"} {
		out, err := exec.Command("id", flag, rootlessUser).Output()
		if err != nil {
			return 0, 0, fmt.Errorf("id %s %s: %w", flag, rootlessUser, err)
		}
		if ids[i], err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
			return 0, 0, err
		}
	}
	return ids[0], ids[1], nil
}

// cleanup removes the containers, ends the user namespace's pause process podman started
// (by the pid it recorded) and removes the user.
func (p *rootlessPodman) cleanup(state string) {
	if _, err := exec.LookPath("podman"); err == nil {
		_, _ = p.command(60*time.Second, "rm", "--all", "--force", "--time", "0")
	}
	for _, f := range []string{filepath.Join(state, "tmp", "pause.pid"), filepath.Join(state, "xdg", "libpod", "tmp", "pause.pid")} {
		data, err := os.ReadFile(f)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && perr == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// The user's files under workDir go with it (enginetest.Reap); the account here.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("userdel", rootlessUser).CombinedOutput()
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				fmt.Fprintf(os.Stderr, "engines: userdel %s: %v: %s\n", rootlessUser, err, out)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// command runs podman as the user outside any test.
func (p *rootlessPodman) command(timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "setpriv", p.asUser("podman", append(append([]string{}, p.args...), args...)...)...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Dir = filepath.Join(p.dir, "home")
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// asUser is setpriv's argv that runs name with args as the user, in no supplementary group.
func (p *rootlessPodman) asUser(name string, args ...string) []string {
	return append([]string{"--reuid", strconv.Itoa(p.uid), "--regid", strconv.Itoa(p.gid), "--clear-groups", "--", name}, args...)
}

// run runs script in a new container with podman run and the given flags, as the user.
func (p *rootlessPodman) run(t *testing.T, script string, flags ...string) result {
	t.Helper()
	args := append(append([]string{}, p.args...), "run", "--rm", "--pull", "never", "--name", containerName(), "--network", "none")
	args = append(append(args, flags...), podmanImage, "sh", "-c", script)
	return runCmd(t, 90*time.Second, p.env, "", "setpriv", p.asUser("podman", args...)...)
}

// rootlessProbe is enginetest.Probe, then every /dev/nvidia* mount of the container (its
// mountinfo's root and mount point): rootless, the nodes are bind mounts.
const rootlessProbe = `awk '$5 ~ "^/dev/nvidia" {print "mount " $5 " " $4}' /proc/self/mountinfo
` + enginetest.Probe

// TestPodmanRootless: podman run by a user, no root anywhere, with --runtime gpu-runtime
// (case 15). podman runs its runtime as root of the user's namespace, where no device node can
// be made and no device cgroup written: gpu-runtime finds it runs rootless and bind-mounts the
// GPU's nodes from the device root (this fake host's is not /dev, so runc's own fallback, a
// bind mount of the host's /dev/nvidia1, would fail the create), and updates the loader cache
// as the namespace's root.
func TestPodmanRootless(t *testing.T) {
	p := startedRootlessPodman(t)
	t.Run("NVIDIA_VISIBLE_DEVICES=1 gets GPU 1 only, bind-mounted from the device root", func(t *testing.T) {
		before := p.logSize()
		r := p.run(t, rootlessProbe, "--runtime", p.wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=1")
		if r.Code != 0 {
			p.logTail(t)
			t.Fatalf("rootless podman run: %s", r)
		}
		p.wantGPU1(t, r)
		p.wantLogged(t, before, "bind-mounted, no device cgroup rule: gpu-runtime runs in a user namespace (rootless)",
			"loader cache: written at create, in-process")
		cache := filepath.Join(p.state, "xdg", "gpu-runtime", "discovery-cache.csv")
		if _, err := os.Stat(cache); err != nil {
			t.Errorf("the rootless create kept no discovery cache in the user's XDG_RUNTIME_DIR: %v", err)
		}
		if log, _ := os.ReadFile(p.log); strings.Contains(string(log), "discovery-cache.csv: permission denied") {
			p.logTail(t)
			t.Error("the rootless create tried root's discovery cache")
		}
	})
	// keep-id gives the container a user namespace of its own inside the user's: the loader
	// cache is then the update-ldcache hook's, run by runc.
	t.Run("--userns=keep-id: GPU 1, the loader cache by the hook", func(t *testing.T) {
		before := p.logSize()
		r := p.run(t, rootlessProbe, "--runtime", p.wrapper, "--userns=keep-id", "-e", "NVIDIA_VISIBLE_DEVICES=1")
		if r.Code != 0 {
			p.logTail(t)
			t.Fatalf("rootless podman run --userns=keep-id: %s", r)
		}
		p.wantGPU1(t, r)
		p.wantLogged(t, before, "loader cache: left to the update-ldcache hook: the container has a user namespace")
	})
	// Rootless podman gives --device as a bind mount: such a container has its devices, and
	// gpu-runtime leaves its spec alone rather than add GPU 1 beside them.
	t.Run("--device nvidiactl, a bind mount rootless: the spec is left as the engine wrote it", func(t *testing.T) {
		before := p.logSize()
		ctl := filepath.Join(p.host.DevRoot, "dev", "nvidiactl")
		r := p.run(t, rootlessProbe, "--runtime", p.wrapper, "--device", ctl+":/dev/nvidiactl", "-e", "NVIDIA_VISIBLE_DEVICES=1")
		if r.Code != 0 {
			p.logTail(t)
			t.Fatalf("rootless podman run --device: %s", r)
		}
		var devs []string
		for _, l := range strings.Split(r.Stdout, "\n") {
			if strings.HasPrefix(l, "dev ") {
				devs = append(devs, l)
			}
		}
		if want := []string{"dev /dev/nvidiactl c3 ff"}; !slices.Equal(devs, want) {
			t.Errorf("device nodes %q, want only the engine's %q\n%s", devs, want, r)
		}
		p.wantLogged(t, before, "the spec already has NVIDIA devices (injected by the engine through CDI, or given with --device); spec unchanged")
	})
	t.Run("without a request: no GPU", func(t *testing.T) {
		r := p.run(t, rootlessProbe, "--runtime", p.wrapper)
		if r.Code != 0 || strings.Contains(r.Stdout, "nvidia") || !strings.Contains(r.Stdout, "probe-done") {
			t.Errorf("rootless podman run without a request: %s", r)
		}
	})
	t.Run("unknown device: podman shows gpu-runtime's error", func(t *testing.T) {
		r := p.run(t, rootlessProbe, "--runtime", p.wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=7")
		wantRefused(t, "rootless podman run", r, 0, `unknown device "7" in NVIDIA_VISIBLE_DEVICES`)
	})
}

// TestRuncRootless: a user runs gpu-runtime itself, runc's rootless mode, on a spec of
// `runc spec --rootless` (a user namespace mapping the user to root): gpu-runtime runs as the
// user, bind-mounts the nodes, and leaves the loader cache to its hook, which runc runs.
func TestRuncRootless(t *testing.T) {
	p := startedRootless(t)
	bundle := filepath.Join(p.state, "bundle-"+strconv.Itoa(int(containerSeq.Add(1))))
	for _, argv := range [][]string{{"mkdir", "-p", filepath.Join(bundle, "rootfs")}, {"tar", "-xf", p.tarball, "-C", filepath.Join(bundle, "rootfs")},
		{"runc", "spec", "--rootless", "--bundle", bundle}} {
		if r := runCmd(t, 30*time.Second, p.env, "", "setpriv", p.asUser(argv[0], argv[1:]...)...); r.Code != 0 {
			t.Fatalf("%v as %s: %s", argv, rootlessUser, r)
		}
	}
	specPath := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"sh", "-c", rootlessProbe}
	spec.Process.Env = append(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES=1")
	if data, err = json.Marshal(&spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(specPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime := []string{"GPU_RUNTIME_CONFIG=" + p.config, filepath.Join(p.dir, "bin", "gpu-runtime"),
		"--root", filepath.Join(p.state, "runc"), "run", "--bundle", bundle, containerName()}
	before := p.logSize()
	r := runCmd(t, 60*time.Second, p.env, "", "setpriv", p.asUser("env", runtime...)...)
	if r.Code != 0 {
		p.logTail(t)
		t.Fatalf("gpu-runtime run as %s: %s", rootlessUser, r)
	}
	p.wantGPU1(t, r)
	p.wantLogged(t, before, fmt.Sprintf("bind-mounted, no device cgroup rule: gpu-runtime runs as uid %d, not root (rootless)", p.uid),
		"loader cache: left to the update-ldcache hook: the container has a user namespace")
}

// wantGPU1 checks a rootlessProbe's output: GPU 1 of the fake host, the control and UVM
// nodes, each a bind mount of the device root's node, and the loader cache updated.
func (p *rootlessPodman) wantGPU1(t *testing.T, r result) {
	t.Helper()
	g := p.host.Options.GPUs[1]
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var devs, mounts []string
	for _, l := range lines {
		switch f := strings.Fields(l); {
		case len(f) == 4 && f[0] == "dev":
			devs = append(devs, strings.Join(f[1:], " "))
		case len(f) == 3 && f[0] == "mount":
			mounts = append(mounts, f[1])
			// mountinfo's root is the node's path on its file system: the device root's.
			if !strings.HasSuffix(f[2], "/"+filepath.Base(p.host.DevRoot)+f[1]) {
				t.Errorf("%s is mounted from %s, want the device root's node (%s%s)", f[1], f[2], p.host.DevRoot, f[1])
			}
		}
	}
	wantDevs := []string{fmt.Sprintf("/dev/nvidia%d c3 %x", g.Minor, g.Minor), "/dev/nvidiactl c3 ff",
		fmt.Sprintf("/dev/nvidia-uvm %x 0", p.host.UVMMajor), fmt.Sprintf("/dev/nvidia-uvm-tools %x 1", p.host.UVMMajor)}
	wantMounts := []string{fmt.Sprintf("/dev/nvidia%d", g.Minor), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
	for _, l := range [][]string{devs, wantDevs, mounts, wantMounts} {
		slices.Sort(l)
	}
	if !slices.Equal(devs, wantDevs) || !slices.Equal(mounts, wantMounts) {
		t.Errorf("device nodes %q, mounted at %q; want %q, all bind mounts\n%s", devs, mounts, wantDevs, r)
	}
	for _, marker := range []string{"ldcache-libcuda", "soname-libcuda", "probe-done"} {
		if !slices.Contains(lines, marker) {
			t.Errorf("no %s: the loader cache was not updated in the rootless container\n%s", marker, r)
		}
	}
}

// logSize is how much gpu-runtime has logged so far.
func (p *rootlessPodman) logSize() int64 {
	fi, err := os.Stat(p.log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// wantLogged checks that gpu-runtime logged each of wants after the first from bytes.
func (p *rootlessPodman) wantLogged(t *testing.T, from int64, wants ...string) {
	t.Helper()
	data, _ := os.ReadFile(p.log)
	if int64(len(data)) >= from {
		data = data[from:]
	}
	for _, want := range wants {
		if !strings.Contains(string(data), want) {
			p.logTail(t)
			t.Errorf("gpu-runtime's debug log lacks %q", want)
		}
	}
}

// logTail logs the end of gpu-runtime's log of this setup.
func (p *rootlessPodman) logTail(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(p.log)
	if errors.Is(err, fs.ErrNotExist) {
		t.Logf("gpu-runtime wrote no log (%s)", p.log)
		return
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	t.Logf("gpu-runtime log (end):\n%s", data)
}

// Package mps runs MPS shares: one nvidia-cuda-mps-control daemon per share,
// with its own pipe and log directories and a private tmpfs as its /dev/shm, and the share's
// defaults (active thread percentage, pinned memory limit) set through its control interface.
// A container joins a share by having exactly that share's client view and tmpfs mounted
// (pkg/plan): the client view holds the one socket an MPS client connects to, and none of
// what the daemon is controlled through. Check is what the create path asks, and reads only
// files. Nothing here is per host: a share is a name, a configuration and a root, so any
// number of daemons (per share, per claim) can run side by side.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moby/sys/mountinfo"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// MemoryLimitsNote says, once in gpu-kubelet-plugin's log and in gpu-ctk doctor, that the
// memory a shared claim consumed is enforced by its MPS daemon only, and why: the driver's
// per-cgroup GPU memory limits (R615 / CUDA 13.4, nvmlDeviceSetMemoryLimits_v1) are not
// offered (why is what NVML answered, or why it could not be asked).
func MemoryLimitsNote(why string) string {
	return why + "; a shared claim's memory is limited by its MPS daemon's pinned device memory limit only"
}

// MemoryLimitsApplied says, in the same places, that the driver offers per-cgroup limits.
const MemoryLimitsApplied = "per-cgroup GPU memory limits offered by the driver: each shared claim's consumed memory is also set on its containers' cgroup v2 groups (gpu-hook memory-limit), beside its MPS daemon's pinned device memory limit"

// ControlName is the MPS control program of the driver.
const ControlName = "nvidia-cuda-mps-control"

// State is a share's state as its files show it.
type State struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
	PID     int    `json:"pid,omitempty"`
	// Why says why a share is not running ("" when it runs).
	Why       string `json:"why,omitempty"`
	PipeDir   string `json:"pipeDir"`
	ClientDir string `json:"clientDir"`
	LogDir    string `json:"logDir"`
	ShmDir    string `json:"shmDir"`
	// The share's configuration.
	Devices                []string `json:"devices"`
	ActiveThreadPercentage int      `json:"activeThreadPercentage,omitempty"`
	PinnedMemoryLimit      string   `json:"pinnedMemoryLimit,omitempty"`
	UID                    int      `json:"uid"`
}

// Check reads a share's state from its files, without running anything: the pid file
// gpu-ctk mps start wrote names a live nvidia-cuda-mps-control, the share's tmpfs is
// mounted, and its client view holds the daemon's control socket (gpu-ctk mps start links it
// there once the share's defaults are set). The create path calls it for the share a
// container asks for.
func Check(cfg config.MPSConfig, name string) State {
	s := daemonState(cfg, name)
	if s.Running {
		if why := viewProblem(cfg, name); why != "" {
			s.Running, s.Why = false, why
		}
	}
	return s
}

// daemonState is Check without the client view: Running says the daemon runs.
func daemonState(cfg config.MPSConfig, name string) State {
	share := cfg.Shares[name]
	s := State{Name: name, PipeDir: cfg.PipeDir(name), ClientDir: cfg.ClientDir(name), LogDir: cfg.LogDir(name), ShmDir: cfg.ShmDir(name),
		Devices: share.Devices, ActiveThreadPercentage: share.ActiveThreadPercentage, PinnedMemoryLimit: share.PinnedMemoryLimit, UID: share.UID}
	pid, err := readPID(cfg.PIDFile(name))
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.Why = "not started"
		return s
	case err != nil:
		s.Why = err.Error()
		return s
	}
	s.PID = pid
	if !isDaemon(pid, false) {
		s.Why = fmt.Sprintf("its daemon (pid %d) is gone", pid)
		return s
	}
	if !mounted(s.ShmDir) {
		s.Why = "its shared-memory tmpfs " + s.ShmDir + " is not mounted"
		return s
	}
	s.Running = true
	return s
}

// isDaemon says whether pid runs nvidia-cuda-mps-control (or, with starting, is still the
// gpu-ctk mps __daemon that becomes it): a pid file outlives its daemon, and its pid may have
// gone to another process since.
func isDaemon(pid int, starting bool) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && (bytes.Contains(cmdline, []byte(ControlName)) || starting && bytes.Contains(cmdline, []byte("mps\x00"+DaemonCommand)))
}

// ControlSocket is the socket in a pipe directory that MPS clients connect to (the CUDA
// driver looks for it: https://docs.nvidia.com/deploy/mps/ names the directory, the daemon's
// log the socket). The daemon makes others beside it: control_privileged (mode 0755: its
// owner's, root's, way to change the daemon's defaults or end it), control_lock, the FIFO
// log its servers write to, nvidia-cuda-mps-control.pid.
const ControlSocket = "control"

// linkView gives the share's clients the daemon's control socket and nothing else of its
// pipe directory: <client>/control becomes a hard link to <pipe>/control, replaced
// atomically. Containers get the client view, read-only, where clients look for the pipe
// directory; a uid-0 container, the owner of control_privileged, cannot reach what it does
// not see.
func linkView(cfg config.MPSConfig, name string) error {
	dir := cfg.ClientDir(name)
	if err := ownDir(dir); err != nil {
		return err
	}
	src := filepath.Join(cfg.PipeDir(name), ControlSocket)
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return fmt.Errorf("the daemon of MPS share %q made no control socket: lstat %s: %w; see %s", name, src, err, cfg.LogDir(name))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("the daemon of MPS share %q made no control socket: %s is not a socket; see %s", name, src, cfg.LogDir(name))
	}
	tmp := filepath.Join(dir, "."+ControlSocket+".new")
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Link(src, tmp); err != nil {
		return fmt.Errorf("link the control socket of MPS share %q into its client view: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ControlSocket)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("link the control socket of MPS share %q into its client view: %w", name, err)
	}
	return nil
}

// viewProblem says why a share's client view does not hold its daemon's control socket; ""
// when it does.
func viewProblem(cfg config.MPSConfig, name string) string {
	var daemon, view unix.Stat_t
	if err := unix.Lstat(filepath.Join(cfg.PipeDir(name), ControlSocket), &daemon); err != nil || daemon.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return "its daemon has no control socket in " + cfg.PipeDir(name)
	}
	if err := unix.Lstat(filepath.Join(cfg.ClientDir(name), ControlSocket), &view); err != nil {
		return "its client view " + cfg.ClientDir(name) + " holds no control socket yet"
	}
	if view.Dev != daemon.Dev || view.Ino != daemon.Ino {
		return "its client view " + cfg.ClientDir(name) + " holds an old control socket"
	}
	return ""
}

// pidRule is what the pid file gpu-ctk mps start writes must be to be believed: root's (or
// gpu-ctk's user's), mode 0600, a few bytes. A pid another user could have written would
// have Stop signal any process it names.
var pidRule = trustedfile.Rule{What: "MPS pid file", Mode: 0o600, Max: 32}

// readPID reads a pid file that passes pidRule, not through a symlink, never blocking.
func readPID(p string) (int, error) {
	data, err := trustedfile.Read(p, pidRule)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s does not hold a pid", p)
	}
	return pid, nil
}

// mounted reports whether dir is a mount point (moby/sys/mountinfo: by mount id, which a bind
// mount of the same file system also has, unlike a device comparison).
func mounted(dir string) bool {
	m, err := mountinfo.Mounted(dir)
	return err == nil && m
}

// Options are what Start needs besides the configuration.
type Options struct {
	// Control is the host path of nvidia-cuda-mps-control; LibDirs the driver library
	// directories it must load from when the driver root is not "/" (LD_LIBRARY_PATH).
	Control string
	LibDirs []string
	// Self is gpu-ctk's own executable: the daemon starts as `gpu-ctk mps __daemon`, which
	// gives it its private /dev/shm, then becomes nvidia-cuda-mps-control -f.
	Self string
	// UUIDs are the share's GPUs, resolved: the daemon sees only them (CUDA_VISIBLE_DEVICES),
	// numbered 0..n-1 in this order.
	UUIDs []string
}

// DriverOptions are Options with the driver's programs and libraries found among its files
// (discover.FindDriverFiles under driverRoot): nvidia-cuda-mps-control, and the 64-bit
// compute libraries' directories when the driver root is not "/". Control is "" when the
// driver has no MPS programs.
func DriverOptions(files []discover.File, driverRoot, self string) Options {
	o := Options{Self: self}
	for _, f := range files {
		if f.Kind == discover.KindBinary && path.Base(f.ContainerPath) == ControlName {
			o.Control = f.HostPath
		}
		if f.Kind == discover.KindLibrary && f.Capability == capabilities.Compute && f.Bits != 32 && filepath.Clean(driverRoot) != "/" {
			if dir := filepath.Dir(f.HostPath); !slices.Contains(o.LibDirs, dir) {
				o.LibDirs = append(o.LibDirs, dir)
			}
		}
	}
	return o
}

// startWait bounds how long Start waits for the daemon's control pipe, and then for it to
// take the share's defaults (a variable for tests).
var startWait = 10 * time.Second

// Start starts the share's daemon unless it runs, then sets its defaults. It reports what
// it did.
func Start(cfg config.MPSConfig, name string, o Options) (string, error) {
	share, ok := cfg.Shares[name]
	if !ok {
		return "", fmt.Errorf("unknown MPS share %q", name)
	}
	st := daemonState(cfg, name)
	did := "already running"
	if !st.Running {
		if err := prepare(cfg, name); err != nil {
			return "", err
		}
		pid, err := launch(cfg, name, o)
		if err != nil {
			return "", err
		}
		did = fmt.Sprintf("started (pid %d)", pid)
	}
	if err := waitReady(cfg, name, startWait); err != nil {
		return "", err
	}
	if err := setDefaults(cfg, name, o, share); err != nil {
		return "", err
	}
	// Only now can a client connect: its server gets the share's defaults.
	if err := linkView(cfg, name); err != nil {
		return "", err
	}
	return did, nil
}

// setDefaults sets the share's defaults through the daemon's control interface, then reads
// back the active thread percentage: the front end prints the daemon's answer to a refused
// command on stdout and exits 0 (as the real one is documented to: fakehost's fakemps.c), so
// its exit status says only that the daemon answered. The pinned-memory limit is not read
// back: in what form get_default_device_pinned_mem_limit answers is not documented, and a
// guess would refuse shares the daemon took.
func setDefaults(cfg config.MPSConfig, name string, o Options, share config.MPSShare) error {
	cmds := defaults(share, len(o.UUIDs))
	if len(cmds) == 0 {
		return nil
	}
	// A daemon that has just made its pipe may not answer yet: try again for a while.
	var answer string
	var err error
	if !poll(startWait, 50*time.Millisecond, func() bool {
		answer, err = control(cfg, name, o, cmds)
		return err == nil
	}) {
		return fmt.Errorf("set the defaults of MPS share %q: %w", name, err)
	}
	want := share.ActiveThreadPercentage
	if want == 0 {
		return nil
	}
	const get = "get_default_active_thread_percentage"
	got, err := control(cfg, name, o, []string{get})
	if err != nil {
		return fmt.Errorf("read back the defaults of MPS share %q: %w", name, err)
	}
	// The real daemon may print "20.0", the fake prints "20".
	if v, err := strconv.ParseFloat(strings.TrimSpace(got), 64); err == nil && v == float64(want) {
		return nil
	}
	msg := fmt.Sprintf("the daemon of MPS share %q did not take active-thread-percentage %d: %s answers %q", name, want, get, strings.TrimSpace(got))
	if a := strings.TrimSpace(answer); a != "" {
		msg += fmt.Sprintf(", and to the settings it answered %q", a)
	}
	return errors.New(msg + "; see " + cfg.LogDir(name))
}

// defaults are the control commands that set a share's limits for the servers it starts.
func defaults(share config.MPSShare, devices int) []string {
	var cmds []string
	if share.ActiveThreadPercentage > 0 {
		cmds = append(cmds, fmt.Sprintf("set_default_active_thread_percentage %d", share.ActiveThreadPercentage))
	}
	if limit, ok := config.MPSMemoryLimit(share.PinnedMemoryLimit); ok {
		for i := 0; i < devices; i++ {
			cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %d %s", i, limit))
		}
	}
	return cmds
}

// prepare makes the share's directories and mounts its tmpfs. The pipe and log directories
// are root's (0755): the daemon and gpu-ctk write there as root, and in a directory the
// share's user could write, a link it planted would be followed (an older gpu-ctk gave both
// to the share's user). The user needs no more: the share's MPS servers, which run as it,
// reach the sockets and FIFO the daemon makes there with its own modes, and its logs are
// readable. The pipe directory holds only what the daemon makes at start, and the client
// view only what gpu-ctk links there once the defaults are set: the pipe directory is made
// anew, the client view emptied but kept, as containers that joined the share before a
// restart have it bind-mounted: they see the new daemon's socket once linkView links it.
func prepare(cfg config.MPSConfig, name string) error {
	if err := os.MkdirAll(filepath.Join(cfg.Root, name), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Join(cfg.Root, name), err)
	}
	if err := os.RemoveAll(cfg.PipeDir(name)); err != nil {
		return fmt.Errorf("empty %s: %w", cfg.PipeDir(name), err)
	}
	for _, d := range []string{cfg.PipeDir(name), cfg.LogDir(name)} {
		if err := ownDir(d); err != nil {
			return err
		}
	}
	if err := emptyDir(cfg.ClientDir(name)); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.ShmDir(name), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", cfg.ShmDir(name), err)
	}
	if !mounted(cfg.ShmDir(name)) {
		if err := unix.Mount("tmpfs", cfg.ShmDir(name), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777"); err != nil {
			return fmt.Errorf("mount the shared-memory tmpfs of MPS share %q at %s: %w", name, cfg.ShmDir(name), err)
		}
	}
	return nil
}

// ownDir makes dir, or takes it back: gpu-ctk's own (root's), mode 0755, through a handle
// that follows no link.
func ownDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory %s (not a symbolic link): %w", dir, err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Fchown(fd, os.Geteuid(), os.Getegid()); err != nil {
		return fmt.Errorf("take back %s: %w", dir, err)
	}
	if err := unix.Fchmod(fd, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}

// emptyDir makes dir an empty directory of gpu-ctk's (ownDir), keeping the directory itself
// when there is one: what is under it goes, what is not a directory at its path (a link) is
// removed first.
func emptyDir(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
		if err := os.Remove(dir); err != nil {
			return fmt.Errorf("empty %s: %w", dir, err)
		}
	}
	if err := ownDir(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("empty %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("empty %s: %w", dir, err)
		}
	}
	return nil
}

// logName is gpu-ctk's log of a share's daemon (what it prints) in the share's log
// directory; daemonLogs are the logs the daemon writes there itself.
const logName = "gpu-ctk.log"

var daemonLogs = []string{"control.log", "server.log"}

// openLog opens the share's gpu-ctk.log for appending, through a handle on its log directory
// that follows no link, and checks the daemon's own logs there. A name that is a symbolic
// link, a FIFO or any file but a regular one of gpu-ctk's user with one link is refused:
// never followed, opened or waited on. The daemon opens its logs as it will.
func openLog(dir string) (*os.File, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open log directory %s (not a symbolic link): %w", dir, err)
	}
	defer func() { _ = unix.Close(dfd) }()
	var bad []string
	for _, n := range append([]string{logName}, daemonLogs...) {
		if why := notOwnFile(dfd, n); why != "" {
			bad = append(bad, n+" "+why)
		}
	}
	var fd int
	if len(bad) == 0 {
		fd, err = unix.Openat(dfd, logName, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", filepath.Join(dir, logName), err)
		}
		if why := notOwnFile(fd, ""); why != "" { // made between the check and the open: only root can
			_ = unix.Close(fd)
			bad = append(bad, logName+" "+why)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("log directory %s: %s: remove them (gpu-ctk and the MPS daemon write there as root; an older gpu-ctk let the share's user write there too)",
			dir, strings.Join(bad, "; "))
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, logName)), nil
}

// notOwnFile says why name in the directory dfd (dfd itself when name is "") is not a file
// gpu-ctk may write as root; "" when it is, or is absent.
func notOwnFile(dfd int, name string) string {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH)
	switch {
	case errors.Is(err, unix.ENOENT):
		return ""
	case err != nil:
		return err.Error()
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return "is a symbolic link"
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "is not a regular file"
	case int(st.Uid) != os.Geteuid():
		return fmt.Sprintf("belongs to uid %d", st.Uid)
	case st.Nlink != 1:
		return fmt.Sprintf("has %d hard links", st.Nlink)
	}
	return ""
}

// launch starts `gpu-ctk mps __daemon` in its own session and records its pid: the process
// becomes the control daemon (exec keeps the pid).
func launch(cfg config.MPSConfig, name string, o Options) (int, error) {
	logFile, err := openLog(cfg.LogDir(name))
	if err != nil {
		return 0, err
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(o.Self, "mps", DaemonCommand, cfg.ShmDir(name), o.Control)
	cmd.Env = append(env(cfg, name, o), "CUDA_VISIBLE_DEVICES="+strings.Join(o.UUIDs, ","))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start the daemon of MPS share %q: %w", name, err)
	}
	pid := cmd.Process.Pid
	// A new file of gpu-ctk's, mode 0600 (pidRule), whatever was at the path before.
	if err := atomicfile.Write(cfg.PIDFile(name), []byte(strconv.Itoa(pid)+"\n"), 0o600, atomicfile.Options{}); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	go func() { _ = cmd.Wait() }() // reaped if it dies while gpu-ctk still runs
	return pid, nil
}

// env is the daemon's and its clients' environment: the share's directories, nothing of the
// caller's.
func env(cfg config.MPSConfig, name string, o Options) []string {
	e := append([]string(nil), plan.HookEnv...)
	e = append(e, "CUDA_MPS_PIPE_DIRECTORY="+cfg.PipeDir(name), "CUDA_MPS_LOG_DIRECTORY="+cfg.LogDir(name))
	if len(o.LibDirs) > 0 {
		e = append(e, "LD_LIBRARY_PATH="+strings.Join(o.LibDirs, ":"))
	}
	return e
}

// waitReady waits until the daemon runs (Check) and its control pipe exists.
func waitReady(cfg config.MPSConfig, name string, wait time.Duration) error {
	var gone error
	ready := poll(wait, 20*time.Millisecond, func() bool {
		st := daemonState(cfg, name)
		_, err := os.Stat(filepath.Join(cfg.PipeDir(name), ControlSocket))
		// Between its fork and its exec the daemon is still gpu-ctk: only a process that is
		// gone has failed.
		if st.PID != 0 && !st.Running && exited(st.PID, 0) {
			gone = fmt.Errorf("the daemon of MPS share %q exited: %s; see %s", name, st.Why, cfg.LogDir(name))
		}
		return st.Running && err == nil || gone != nil
	})
	switch {
	case gone != nil:
		return gone
	case !ready:
		return fmt.Errorf("the daemon of MPS share %q did not create its control pipe in %s within %s; see %s", name, cfg.PipeDir(name), wait, cfg.LogDir(name))
	}
	return nil
}

// poll calls done every interval until it returns true or wait has passed, and reports
// whether it did.
func poll(wait, interval time.Duration, done func() bool) bool {
	deadline := time.Now().Add(wait)
	for !done() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// control sends commands to the share's daemon through nvidia-cuda-mps-control and returns
// what it printed on stdout: the daemon's answers.
func control(cfg config.MPSConfig, name string, o Options, cmds []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Control)
	cmd.Env = env(cfg, name, o)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", o.Control, err, strings.TrimSpace(stdout.String()+"\n"+stderr.String()))
	}
	return stdout.String(), nil
}

// Stop takes the control socket out of the share's client view, quits the share's daemon
// (through its control interface, then by signal), removes its pid file and unmounts its
// tmpfs. A share that does not run is already stopped.
func Stop(cfg config.MPSConfig, name string, o Options) (string, error) {
	// No new client first.
	if err := os.Remove(filepath.Join(cfg.ClientDir(name), ControlSocket)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	st := daemonState(cfg, name)
	did := "not running"
	if st.PID != 0 && isDaemon(st.PID, true) { // never a process that took over a dead daemon's pid
		// Asked to quit, the daemon gets a while to do so; else it is signalled at once.
		quit := st.Running && o.Control != ""
		if quit {
			_, _ = control(cfg, name, o, []string{"quit"})
		}
		if !quit || !exited(st.PID, 10*time.Second) {
			_ = unix.Kill(st.PID, unix.SIGTERM)
			if !exited(st.PID, 5*time.Second) {
				_ = unix.Kill(st.PID, unix.SIGKILL)
				exited(st.PID, 5*time.Second)
			}
		}
		did = fmt.Sprintf("stopped (pid %d)", st.PID)
	}
	if err := os.Remove(cfg.PIDFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if mounted(st.ShmDir) {
		// Detached: a container still holding it keeps its memory until it exits.
		if err := unix.Unmount(st.ShmDir, unix.MNT_DETACH); err != nil {
			return "", fmt.Errorf("unmount %s: %w", st.ShmDir, err)
		}
	}
	return did, nil
}

// exited waits for pid to be gone, or a zombie (a child of this process, reaped elsewhere).
func exited(pid int, wait time.Duration) bool {
	return poll(wait, 20*time.Millisecond, func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || zombie(stat)
	})
}

func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// DaemonCommand is the internal subcommand of `gpu-ctk mps` that becomes a share's daemon.
const DaemonCommand = "__daemon"

// Daemon is `gpu-ctk mps __daemon <shm dir> <control>`: in a mount namespace of its own it
// mounts the share's tmpfs on /dev/shm, where the MPS servers keep the memory their clients
// map, then execs nvidia-cuda-mps-control in the foreground. It returns only on failure.
func Daemon(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("%s: internal command of gpu-ctk mps, not for use by hand", DaemonCommand)
	}
	shm, control := args[0], args[1]
	// The namespace is this thread's: stay on it until the exec.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount(shm, "/dev/shm", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount %s on /dev/shm: %w", shm, err)
	}
	return unix.Exec(control, []string{ControlName, "-f"}, os.Environ())
}

// maxFound bounds how many entries of the MPS root Found reads.
const maxFound = 1024

// Found lists the shares that have a pid file under the MPS root, sorted: gpu-ctk mps start
// wrote one for each share it started, so a share removed from the configuration (or a
// configuration removed with its package) whose daemon still runs is still found. Only
// directories with a share's name are looked at, at most maxFound entries; whether a pid file
// is believed is readPID's rule, applied when the share is checked or stopped.
func Found(cfg config.MPSConfig) ([]string, error) {
	dir, err := os.Open(cfg.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	entries, err := dir.ReadDir(maxFound)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read MPS root %s: %w", cfg.Root, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || !config.ValidShareName(e.Name()) {
			continue
		}
		if fi, err := os.Lstat(cfg.PIDFile(e.Name())); err == nil && fi.Mode().IsRegular() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

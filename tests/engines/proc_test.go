package engines

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ownerFile, in the work directory, holds the pid of the test process that owns it.
const ownerFile = "owner.pid"

// result is what a command printed and how it ended.
type result struct {
	stdout, stderr string
	code           int // -1 when it did not run or was killed
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCmd runs a command to completion with the given extra environment and stdin file ("" for
// none), killing it after timeout. Output goes to files, not pipes: a process the command
// leaves behind (a shim, conmon, a container) could otherwise hold a pipe open forever.
func runCmd(t *testing.T, timeout time.Duration, env []string, stdin, name string, args ...string) result {
	t.Helper()
	dir, err := os.MkdirTemp(workDir, "cmd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	outFile, errFile := openOut(t, dir, "stdout"), openOut(t, dir, "stderr")
	defer outFile.Close()
	defer errFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, errFile
	if stdin != "" {
		in, err := os.Open(stdin)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		cmd.Stdin = in
	}
	runErr := cmd.Run()
	out, _ := os.ReadFile(outFile.Name())
	errb, _ := os.ReadFile(errFile.Name())
	r := result{stdout: string(out), stderr: string(errb), code: -1}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: timed out after %v\n%s", name, strings.Join(args, " "), timeout, r)
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), runErr)
	}
	return r
}

func openOut(t *testing.T, dir, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// mustRun is runCmd that fails the test unless the command exits 0; it returns stdout.

// daemon is an engine process started by the suite, in a process group of its own, with all
// of its files under dir.
type daemon struct {
	name   string
	dir    string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	// beforeStop removes what the daemon still runs (containers, pods) while it can.
	beforeStop func()
}

// startDaemon starts argv with env added, and waits until ready returns nil.
func startDaemon(name, dir string, env []string, ready func() error, argv ...string) (*daemon, error) {
	d := &daemon{name: name, dir: dir, log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.OpenFile(d.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	registerDaemon(d)
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ready()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("%s exited during start (%v); its log:\n%s", name, d.cmd.ProcessState, d.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not ready after 60s: %v; its log:\n%s", name, err, d.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logTail returns the end of the daemon's log.
func (d *daemon) logTail() string {
	data, _ := os.ReadFile(d.log)
	if len(data) > 6000 {
		data = data[len(data)-6000:]
	}
	return string(data)
}

// stop removes what the daemon runs, then SIGTERMs its process group, SIGKILLs it after 30s,
// and kills and unmounts whatever is left under its directory.
func (d *daemon) stop() {
	if d.beforeStop != nil {
		d.beforeStop()
	}
	pgid := d.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "engines: %s did not stop within 30s of SIGTERM; killing it\n", d.name)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-d.exited
	if err := release(d.dir); err != nil {
		fmt.Fprintf(os.Stderr, "engines: clean up after %s: %v\n", d.name, err)
	}
}

var daemons struct {
	sync.Mutex
	list []*daemon
}

func registerDaemon(d *daemon) {
	daemons.Lock()
	defer daemons.Unlock()
	daemons.list = append(daemons.list, d)
}

var exitFuncs struct {
	sync.Mutex
	list []func()
}

// atExit registers a cleanup for when the suite ends, for shared state that is no daemon.
func atExit(f func()) {
	exitFuncs.Lock()
	defer exitFuncs.Unlock()
	exitFuncs.list = append(exitFuncs.list, f)
}

// stopAll stops every daemon, the last started first, runs the atExit functions, and removes
// the suite's cgroups.
func stopAll() {
	daemons.Lock()
	for i := len(daemons.list) - 1; i >= 0; i-- {
		daemons.list[i].stop()
	}
	daemons.list = nil
	daemons.Unlock()
	exitFuncs.Lock()
	for i := len(exitFuncs.list) - 1; i >= 0; i-- {
		exitFuncs.list[i]()
	}
	exitFuncs.list = nil
	exitFuncs.Unlock()
	if err := removeCgroups(cgroupParent("")); err != nil {
		fmt.Fprintf(os.Stderr, "engines: remove cgroups: %v\n", err)
	}
}

// cgroupParent names the parent cgroup of one engine's containers: engines otherwise leave
// their parent cgroups (/docker, /libpod_parent, …) behind on the host.
func cgroupParent(engine string) string {
	return fmt.Sprintf("gre-%d-%s", os.Getpid(), engine)
}

// removeCgroups removes the (empty) cgroups whose top-level name starts with prefix, in every
// hierarchy, deepest first.
func removeCgroups(prefix string) error {
	tops, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", prefix+"*"))
	more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", prefix+"*"))
	var errs []error
	for _, top := range append(tops, more...) {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// shared starts a daemon (or anything else) once per test binary: the first test that needs
// it starts it, later ones reuse it, and a start that failed fails every test that needs it.
type shared[T any] struct {
	once sync.Once
	val  T
	err  error
}

func (s *shared[T]) get(t *testing.T, start func() (T, error)) T {
	t.Helper()
	s.once.Do(func() { s.val, s.err = start() })
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.val
}

// release kills every process that belongs to dir — its command line names a path under dir,
// or its root, working directory or executable is under dir — with all their descendants (the
// containers of a shim or conmon), then unmounts everything mounted under dir. Processes are
// picked by pid, never by name.
func release(dir string) error {
	dir = filepath.Clean(dir)
	for round := 0; round < 5; round++ {
		pids := processesUnder(dir)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var errs []error
	for round := 0; round < 5; round++ {
		mounts := mountsUnder(dir)
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %v", left))
	}
	return errors.Join(errs...)
}

// reap releases dir and removes it.
func reap(dir string) error {
	err := release(dir)
	return errors.Join(err, os.RemoveAll(dir))
}

// reapStale reaps the work directories of earlier runs whose test process is gone.
func reapStale() {
	dirs, _ := filepath.Glob(filepath.Join("/tmp", workPrefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "engines: cleaning up %s, left by test process %d\n", dir, pid)
		leftovers := readHostLeftovers(dir)
		if err := reap(dir); err != nil {
			fmt.Fprintf(os.Stderr, "engines: %v\n", err)
		}
		if err := removeCgroups(fmt.Sprintf("gre-%d-", pid)); err != nil {
			fmt.Fprintf(os.Stderr, "engines: %v\n", err)
		}
		leftovers.remove()
	}
}

// processesUnder returns the processes that belong to dir, and their descendants.
func processesUnder(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	children := map[int][]int{}
	var roots []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		base := filepath.Join("/proc", e.Name())
		if stat, err := os.ReadFile(filepath.Join(base, "stat")); err == nil {
			// pid (comm) state ppid …: comm may hold spaces and parentheses.
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					if ppid, err := strconv.Atoi(f[1]); err == nil {
						children[ppid] = append(children[ppid], pid)
					}
				}
			}
		}
		match := false
		if cmdline, err := os.ReadFile(filepath.Join(base, "cmdline")); err == nil {
			for _, arg := range strings.Split(string(cmdline), "\x00") {
				if strings.Contains(arg, dir+"/") || strings.HasSuffix(arg, dir) {
					match = true
				}
			}
		}
		for _, link := range []string{"root", "cwd", "exe"} {
			if target, err := os.Readlink(filepath.Join(base, link)); err == nil && target != "/" && under(target) {
				match = true
			}
		}
		if match {
			roots = append(roots, pid)
		}
	}
	seen := map[int]bool{}
	var out []int
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] || pid == self {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, pid := range roots {
		walk(pid)
	}
	return out
}

// mountsUnder returns the mount points under dir (dir included), deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hostLeftovers are host paths that engines create whatever their private directories are.
// Those that did not exist when the suite started are removed when it ends: trees only where
// nothing else can have put anything (podman's caches), directories only when empty.
type hostLeftovers []hostPath

type hostPath struct {
	path string
	tree bool // remove with its content; else only an empty directory (or a file)
}

// hostLeftoverPaths lists them, children before parents.
func hostLeftoverPaths() []hostPath {
	return []hostPath{
		{"/var/lib/containers", true},                   // podman 4.3: blob-info cache, whatever --root says
		{"/run/containers", true},                       // podman 4.3: network run directory
		{"/dev/shm/libpod_lock", false},                 // podman's shared-memory locks
		{"/run/runc", false},                            // runc's default state root: podman passes no --root
		{"/run/containerd/s", false},                    // containerd shims' sockets, wherever the state dir is
		{"/run/containerd/fifo", false},                 // ctr's stdio FIFOs
		{"/run/containerd/runc/" + ctrNamespace, false}, // ctr run's runc state (the CRI's is private)
		{"/run/containerd/runc", false},
		{"/run/containerd", false},
		{"/opt/containerd/bin", false}, // the opt plugin of dockerd's own containerd
		{"/opt/containerd/lib", false},
		{"/opt/containerd", false},
		{"/run/docker/plugins", false}, // dockerd's plugin socket directory
		{"/run/docker", false},
		{"/etc/docker", false}, // dockerd's key.json is elsewhere (deprecated-key-path)
	}
}

// hostLeftoversFile, in the work directory, lists the host leftovers of its run, for
// reapStale.
const hostLeftoversFile = "host-leftovers"

// recordHostLeftovers returns the leftover paths absent now, and lists them in the work
// directory.
func recordHostLeftovers() hostLeftovers {
	var absent hostLeftovers
	var list strings.Builder
	for _, p := range hostLeftoverPaths() {
		if _, err := os.Lstat(p.path); errors.Is(err, fs.ErrNotExist) {
			absent = append(absent, p)
			fmt.Fprintf(&list, "%t %s\n", p.tree, p.path)
		}
	}
	_ = os.WriteFile(filepath.Join(workDir, hostLeftoversFile), []byte(list.String()), 0o644)
	return absent
}

// readHostLeftovers reads the list recordHostLeftovers wrote in dir; it names only paths of
// hostLeftoverPaths.
func readHostLeftovers(dir string) hostLeftovers {
	data, _ := os.ReadFile(filepath.Join(dir, hostLeftoversFile))
	known := map[string]bool{}
	for _, p := range hostLeftoverPaths() {
		known[p.path] = true
	}
	var l hostLeftovers
	for _, line := range strings.Split(string(data), "\n") {
		tree, path, ok := strings.Cut(line, " ")
		if ok && known[path] {
			l = append(l, hostPath{path: path, tree: tree == "true"})
		}
	}
	return l
}

func (l hostLeftovers) remove() {
	for _, p := range l {
		if p.tree {
			_ = os.RemoveAll(p.path)
		} else {
			_ = os.Remove(p.path) // fails on a directory another user has put something in
		}
	}
}

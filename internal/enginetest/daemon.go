package enginetest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Daemon is an engine process started by a suite, in a process group of its own, with all of
// its files under Dir.
type Daemon struct {
	Name string
	Dir  string
	Log  string // its stdout and stderr
	// BeforeStop removes what the daemon still runs (containers, pods) while it can.
	BeforeStop func()
	cmd        *exec.Cmd
	exited     chan struct{}
}

// StartDaemon starts argv with env added, its output in dir/<name>.log, and waits until ready
// returns nil. A daemon that exits, or is not ready within 60s, is stopped (Stop) and the error
// holds the end of its log.
func StartDaemon(name, dir string, env []string, ready func() error, argv ...string) (*Daemon, error) {
	d := &Daemon{Name: name, Dir: dir, Log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.OpenFile(d.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ready()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.exited:
			d.Stop()
			return nil, fmt.Errorf("%s exited during start (%v); its log:\n%s", name, d.cmd.ProcessState, d.LogTail())
		default:
		}
		if time.Now().After(deadline) {
			tail := d.LogTail()
			d.Stop()
			return nil, fmt.Errorf("%s not ready after 60s: %w; its log:\n%s", name, err, tail)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LogTail returns the end of the daemon's log.
func (d *Daemon) LogTail() string {
	data, _ := os.ReadFile(d.Log)
	if len(data) > 6000 {
		data = data[len(data)-6000:]
	}
	return string(data)
}

// Stop removes what the daemon runs (BeforeStop), then SIGTERMs its process group, SIGKILLs it
// after 30s, and kills and unmounts whatever is left under its directory (Release).
func (d *Daemon) Stop() {
	if d.BeforeStop != nil {
		d.BeforeStop()
	}
	pgid := d.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "%s did not stop within 30s of SIGTERM; killing it\n", d.Name)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-d.exited
	// A containerd shim whose task the daemon just deleted exits by itself, removing its socket
	// in /run/containerd/s; killed before that, it leaves the socket behind. Give such
	// processes a moment before Release kills what is left.
	waitGone(d.Dir, 5*time.Second)
	if err := Release(d.Dir); err != nil {
		fmt.Fprintf(os.Stderr, "clean up after %s: %v\n", d.Name, err)
	}
}

// waitGone waits until no process belongs to dir (processesUnder), for at most timeout.
func waitGone(dir string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for len(processesUnder(filepath.Clean(dir))) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// RemoveCgroups removes the (empty) cgroups whose top-level name starts with prefix, in every
// hierarchy, deepest first. Engines otherwise leave their containers' parent cgroups behind.
func RemoveCgroups(prefix string) error {
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

// Release kills every process that belongs to dir — its command line names a path under dir,
// or its root, working directory or executable is under dir — with all their descendants (the
// containers of a shim or conmon), then unmounts everything mounted under dir. Processes are
// picked by pid, never by name.
func Release(dir string) error {
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
		mounts := mountsUnder(dir) // unreadable: nothing to unmount that we can see
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

// Reap releases dir and removes it.
func Reap(dir string) error {
	err := Release(dir)
	return errors.Join(err, os.RemoveAll(dir))
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

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	out := make([]string, len(infos))
	for i, m := range infos {
		out[i] = m.Mountpoint
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Kill SIGKILLs the daemon's process group, as a crash or the OOM killer would, and waits
// until its process is gone; what it leaves behind (sockets, files) stays. Stop still
// releases its directory afterwards.
func (d *Daemon) Kill() {
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.exited
}

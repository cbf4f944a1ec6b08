package engines

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
)

// ownerFile, in the work directory, holds the pid of the test process that owns it.
const ownerFile = "owner.pid"

// result is what a command printed and how it ended.
type result = enginetest.Result

// runCmd runs a command to completion (enginetest.Run), its output in files under workDir.
func runCmd(t *testing.T, timeout time.Duration, env []string, stdin, name string, args ...string) result {
	t.Helper()
	return enginetest.Run(t, workDir, timeout, env, stdin, name, args...)
}

// startDaemon starts a daemon (enginetest.StartDaemon) that stopAll stops when the suite ends.
func startDaemon(name, dir string, env []string, ready func() error, argv ...string) (*enginetest.Daemon, error) {
	d, err := enginetest.StartDaemon(name, dir, env, ready, argv...)
	if err != nil {
		return nil, err
	}
	registerDaemon(d)
	return d, nil
}

var daemons struct {
	sync.Mutex
	list []*enginetest.Daemon
}

func registerDaemon(d *enginetest.Daemon) {
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
		daemons.list[i].Stop()
	}
	daemons.list = nil
	daemons.Unlock()
	exitFuncs.Lock()
	for i := len(exitFuncs.list) - 1; i >= 0; i-- {
		exitFuncs.list[i]()
	}
	exitFuncs.list = nil
	exitFuncs.Unlock()
	if err := enginetest.RemoveCgroups(cgroupParent("")); err != nil {
		fmt.Fprintf(os.Stderr, "engines: remove cgroups: %v\n", err)
	}
}

// cgroupParent names the parent cgroup of one engine's containers: engines otherwise leave
// their parent cgroups (/docker, /libpod_parent, …) behind on the host.
func cgroupParent(engine string) string {
	return fmt.Sprintf("gre-%d-%s", os.Getpid(), engine)
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
		leftovers := enginetest.ReadLeftovers(filepath.Join(dir, hostLeftoversFile), hostLeftoverPaths())
		spec, newer := podmanCDISpecs(dir)
		_ = os.Remove(spec)
		_ = os.Remove(newer)
		// The killed shims' sockets (the tasks' state goes with the directory).
		for _, ctd := range []string{"ctd", "ctd2"} {
			for _, sock := range enginetest.ShimSockets(filepath.Join(dir, ctd, "containerd.sock"), filepath.Join(dir, ctd, "state")) {
				_ = os.Remove(sock)
			}
		}
		if err := enginetest.Reap(dir); err != nil {
			fmt.Fprintf(os.Stderr, "engines: %v\n", err)
		}
		if err := enginetest.RemoveCgroups(fmt.Sprintf("gre-%d-", pid)); err != nil {
			fmt.Fprintf(os.Stderr, "engines: %v\n", err)
		}
		leftovers.Remove()
	}
}

// hostLeftoverPaths lists the host paths engines create whatever their private directories are,
// children before parents; those absent when the suite starts are removed when it ends
// (enginetest.HostLeftovers).
func hostLeftoverPaths() []enginetest.HostPath {
	return append([]enginetest.HostPath{
		{Path: "/var/lib/containers", Tree: true},      // podman 4.3: blob-info cache, whatever --root says
		{Path: "/run/containers", Tree: true},          // podman 4.3: network run directory
		{Path: "/dev/shm/libpod_lock"},                 // podman's shared-memory locks
		{Path: "/run/runc"},                            // runc's default state root: podman passes no --root
		{Path: "/run/containerd/fifo"},                 // ctr's stdio FIFOs
		{Path: "/run/containerd/runc/" + ctrNamespace}, // ctr run's runc state (the CRI's is private)
		{Path: "/run/containerd/runc"},
		{Path: podmanCDIDir}, // podman 4.3 reads CDI specs only there and in /etc/cdi
	}, enginetest.DockerdHostPaths()...)
}

// hostLeftoversFile, in the work directory, lists the host leftovers of its run, for
// reapStale.
const hostLeftoversFile = "host-leftovers"

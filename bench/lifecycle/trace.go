package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Linux proc connector (include/uapi/linux/cn_proc.h, connector.h): the kernel multicasts a
// message for every fork, exec and exit on the machine. The tracer keeps those of the bench's
// own descendants, which is how it counts the processes a container's lifecycle spawns (hooks
// included) without wrapping or patching anything under test.
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procCnMcastIgnore = 2
	procEventFork     = 0x00000001
	procEventExec     = 0x00000002
	procEventExit     = 0x80000000
	cnMsgLen          = 20 // struct cn_msg without data
	procEventHdrLen   = 16 // what, cpu, timestamp_ns
)

// procEvent is an exec or exit of a descendant of the bench process.
type procEvent struct {
	exec bool   // false: exit
	ts   int64  // CLOCK_MONOTONIC ns, as the kernel stamped it
	pid  int    // thread group id
	comm string // comm, plus argv[1] when it is a subcommand
	exe  string
}

// tracer collects exec and exit events of the bench's descendants.
type tracer struct {
	fd   int
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	tracked map[int]bool
	events  []procEvent
	lost    bool // the socket overflowed: counts may be short
}

// startTracer subscribes to the proc connector (needs root and the initial network namespace).
func startTracer() (*tracer, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("open proc connector socket: %w", err)
	}
	t := &tracer{fd: fd, stop: make(chan struct{}), done: make(chan struct{}), tracked: map[int]bool{os.Getpid(): true}}
	fail := func(what string, err error) (*tracer, error) {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return fail("bind proc connector socket", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000}); err != nil {
		return fail("set proc connector timeout", err)
	}
	if err := t.control(procCnMcastListen); err != nil {
		return fail("subscribe to process events", err)
	}
	go t.read()
	return t, nil
}

// control sends PROC_CN_MCAST_LISTEN or _IGNORE.
func (t *tracer) control(op uint32) error {
	msg := make([]byte, unix.NLMSG_HDRLEN+cnMsgLen+4)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	binary.NativeEndian.PutUint32(msg[12:], uint32(os.Getpid()))
	cn := msg[unix.NLMSG_HDRLEN:]
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint16(cn[16:], 4)
	binary.NativeEndian.PutUint32(cn[cnMsgLen:], op)
	return unix.Sendto(t.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

func (t *tracer) read() {
	defer close(t.done)
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-t.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(t.fd, buf, 0)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			t.mu.Lock()
			t.lost = true
			t.mu.Unlock()
			continue
		case err != nil:
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			t.handle(m.Data)
		}
	}
}

func (t *tracer) handle(data []byte) {
	if len(data) < cnMsgLen+procEventHdrLen+8 {
		return
	}
	ev := data[cnMsgLen:]
	what := binary.NativeEndian.Uint32(ev[0:])
	ts := int64(binary.NativeEndian.Uint64(ev[8:]))
	body := ev[procEventHdrLen:]
	u32 := func(i int) int {
		if len(body) < 4*(i+1) {
			return -1
		}
		return int(binary.NativeEndian.Uint32(body[4*i:]))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch what {
	case procEventFork: // parent_pid, parent_tgid, child_pid, child_tgid
		parent, child := u32(1), u32(3)
		if t.tracked[parent] && child != parent {
			t.tracked[child] = true
		}
	case procEventExec: // process_pid, process_tgid
		pid := u32(1)
		if !t.tracked[pid] {
			return
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		name := strings.TrimSpace(string(comm))
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && name != "" {
			args := strings.Split(string(cmdline), "\x00")
			// A program exec'd from a memory file (gpu-hook's sealed copy of ldconfig,
			// run as /proc/self/fd/N) has the descriptor's number as comm: use its argv[0].
			if strings.HasPrefix(exe, "/memfd:") && args[0] != "" {
				name = args[0][strings.LastIndexByte(args[0], '/')+1:]
			}
			// A subcommand (gpu-hook update-ldcache, gpu-hook prestart) is part of the name.
			if len(args) > 1 && args[1] != "" && !strings.ContainsAny(args[1][:1], "-/") {
				name += " " + args[1]
			}
		}
		t.events = append(t.events, procEvent{exec: true, ts: ts, pid: pid, comm: name, exe: exe})
	case procEventExit: // process_pid, process_tgid, exit_code, exit_signal
		pid, tgid := u32(0), u32(1)
		if pid != tgid || !t.tracked[tgid] {
			return
		}
		t.events = append(t.events, procEvent{ts: ts, pid: tgid})
		delete(t.tracked, tgid)
	}
}

// take returns and forgets the events collected so far, and whether any were lost.
func (t *tracer) take() ([]procEvent, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ev, lost := t.events, t.lost
	t.events, t.lost = nil, false
	return ev, lost
}

// sawExit reports whether the exit of pid has been collected.
func (t *tracer) sawExit(pid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.events {
		if !e.exec && e.pid == pid {
			return true
		}
	}
	return false
}

func (t *tracer) close() {
	_ = t.control(procCnMcastIgnore)
	close(t.stop)
	<-t.done
	_ = unix.Close(t.fd)
}

// monotonicNow is CLOCK_MONOTONIC in ns, the clock of the proc connector's timestamps.
func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

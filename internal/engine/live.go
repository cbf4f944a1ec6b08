package engine

// What a running engine has loaded, as it answers on its socket: the files this package edits
// are what an engine loads when it starts, not what it runs with now (dockerd keeps its
// runtimes and default runtime from its start until it is restarted; a reload does not change
// the default).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Default sockets of the running engines.
const (
	DefaultDockerSocket     = "/var/run/docker.sock"
	DefaultContainerdSocket = "/run/containerd/containerd.sock"
)

// LiveTimeout bounds one question to a running engine; LiveMaxBody bounds its answer.
const (
	LiveTimeout = 5 * time.Second
	LiveMaxBody = 4 << 20
)

// ErrNotRunning: nothing answers on the engine's socket (no socket, or no one listening).
var ErrNotRunning = errors.New("not running")

// Live is what a running engine has loaded.
type Live struct {
	Engine Engine
	Socket string
	// PID is the process listening on Socket (from the socket's peer credentials; 0 when
	// unknown) and StartTime its start time (/proc/<pid>/stat, in clock ticks since boot):
	// the two tell the same engine process from a restarted one.
	PID       int
	StartTime uint64
	// Runtimes maps each runtime name the engine has loaded to its program ("" when the
	// engine did not say).
	Runtimes map[string]string
	// Default is the engine's default runtime ("" when it did not say).
	Default string
}

// Loads says whether the engine has the runtime name loaded.
func (l Live) Loads(name string) bool {
	_, ok := l.Runtimes[name]
	return ok
}

// Ours lists, sorted, the loaded runtimes that are gpu-runtime (Ours: by their program —
// dockerd's path, containerd's options.BinaryName — whatever their name).
func (l Live) Ours(runtimePath string) []string {
	var names []string
	for n, p := range l.Runtimes {
		if Ours(p, runtimePath) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// RuntimeNames lists the loaded runtimes, sorted.
func (l Live) RuntimeNames() []string {
	var names []string
	for n := range l.Runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// dialPeer connects to a unix socket and returns the connection and the listening process's pid.
func dialPeer(ctx context.Context, socket string) (net.Conn, int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, 0, fmt.Errorf("%s: %w", socket, ErrNotRunning)
		}
		return nil, 0, fmt.Errorf("connect to %s: %w", socket, err)
	}
	pid := 0
	if uc, ok := conn.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					pid = int(cred.Pid)
				}
			})
		}
	}
	return conn, pid, nil
}

// ProcessStartTime is field 22 of /proc/<pid>/stat (0 when it cannot be read).
func ProcessStartTime(pid int) uint64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces and parentheses: the fields follow the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state): field 22 is fields[19].
	if len(fields) < 20 {
		return 0
	}
	t, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0
	}
	return t
}

// QueryDocker asks the dockerd on socket what it has loaded (GET /info: Runtimes and
// DefaultRuntime), within LiveTimeout and reading at most LiveMaxBody bytes.
func QueryDocker(ctx context.Context, socket string) (Live, error) {
	ctx, cancel := context.WithTimeout(ctx, LiveTimeout)
	defer cancel()
	live := Live{Engine: Docker, Socket: socket}
	var dialErr error
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, pid, err := dialPeer(ctx, socket)
			dialErr = err
			live.PID = pid
			return conn, err
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/info", nil)
	if err != nil {
		return live, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if dialErr != nil {
			return live, fmt.Errorf("ask dockerd: %w", dialErr)
		}
		return live, fmt.Errorf("ask dockerd on %s: %w", socket, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, LiveMaxBody+1))
	if err != nil {
		return live, fmt.Errorf("read dockerd's answer on %s: %w", socket, err)
	}
	if len(body) > LiveMaxBody {
		return live, fmt.Errorf("dockerd's answer on %s: more than %d bytes", socket, LiveMaxBody)
	}
	if resp.StatusCode != http.StatusOK {
		return live, fmt.Errorf("dockerd on %s answered GET /info with %s", socket, resp.Status)
	}
	var info struct {
		Runtimes map[string]struct {
			Path string `json:"path"`
		}
		DefaultRuntime string
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return live, fmt.Errorf("dockerd's answer on %s: %w", socket, err)
	}
	live.Default = info.DefaultRuntime
	live.Runtimes = map[string]string{}
	for name, r := range info.Runtimes {
		live.Runtimes[name] = r.Path
	}
	if live.PID != 0 {
		live.StartTime = ProcessStartTime(live.PID)
	}
	return live, nil
}

// QueryContainerd asks the containerd on socket what its CRI plugin has loaded, through
// crictl info (the CRI's Status, verbose: the plugin's configuration), within LiveTimeout and
// reading at most LiveMaxBody bytes. containerd speaks only gRPC; crictl is the client CRI
// hosts have. Without crictl the runtimes are unknown: the error says so.
func QueryContainerd(ctx context.Context, socket, crictl string) (Live, error) {
	ctx, cancel := context.WithTimeout(ctx, LiveTimeout)
	defer cancel()
	live := Live{Engine: Containerd, Socket: socket}
	conn, pid, err := dialPeer(ctx, socket)
	if err != nil {
		return live, fmt.Errorf("ask containerd: %w", err)
	}
	_ = conn.Close()
	live.PID = pid
	if pid != 0 {
		live.StartTime = ProcessStartTime(pid)
	}
	if crictl == "" {
		return live, fmt.Errorf("containerd answers on %s, but without crictl its CRI runtimes cannot be asked", socket)
	}
	cmd := exec.CommandContext(ctx, crictl, "--runtime-endpoint", "unix://"+socket, "--timeout", "5s", "info")
	out := &limitedBuffer{max: LiveMaxBody}
	var stderr limitedBuffer
	stderr.max = 4096
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		return live, fmt.Errorf("crictl info on %s: %w: %s", socket, err, strings.TrimSpace(stderr.String()))
	}
	if out.over {
		return live, fmt.Errorf("crictl info on %s: more than %d bytes", socket, LiveMaxBody)
	}
	var info struct {
		Config struct {
			Containerd struct {
				DefaultRuntimeName string `json:"defaultRuntimeName"`
				Runtimes           map[string]struct {
					Options map[string]any `json:"options"`
				} `json:"runtimes"`
			} `json:"containerd"`
		} `json:"config"`
	}
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		return live, fmt.Errorf("crictl info on %s: %w", socket, err)
	}
	if info.Config.Containerd.Runtimes == nil {
		return live, fmt.Errorf("crictl info on %s: no CRI runtimes in its answer (is containerd's CRI plugin disabled?)", socket)
	}
	live.Default = info.Config.Containerd.DefaultRuntimeName
	live.Runtimes = map[string]string{}
	for name, r := range info.Config.Containerd.Runtimes {
		binary, _ := r.Options["BinaryName"].(string)
		live.Runtimes[name] = binary
	}
	return live, nil
}

// limitedBuffer keeps the first max bytes written to it and notes that more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

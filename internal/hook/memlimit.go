package hook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// ErrNoCgroupV2: the container has no cgroup of its own in a cgroup v2 hierarchy, where
// per-cgroup GPU memory limits live (the kernel's dmem controller is cgroup v2 only).
var ErrNoCgroupV2 = errors.New("no cgroup v2 group")

// exitNotOffered is gpu-ctk's exit status where the driver offers no per-cgroup GPU memory
// limits (ctk.ExitNotOffered; gpu-hook cannot import gpu-ctk's cgo code).
const exitNotOffered = 3

// DefaultMemoryLimitStateDir is where gpu-hook memory-limit keeps, per container and GPU, the
// cgroup it set a limit on, for the poststop hook that clears it.
const DefaultMemoryLimitStateDir = "/run/gpu-runtime/memory-limits"

// maxCgroupFile bounds what is read of /proc/<pid>/cgroup.
const maxCgroupFile = 64 << 10

// MemoryLimitOptions are the flags of gpu-hook memory-limit.
type MemoryLimitOptions struct {
	CTK        string // gpu-ctk, which talks to NVML
	DriverRoot string
	UUID       string
	Bytes      uint64
	Clear      bool   // poststop: clear the limit set at createRuntime
	StateDir   string // where the cgroup each limit was set on is kept until it is cleared
	ProcRoot   string // where the host's /proc is
	// CgroupRoot is where the cgroup v2 hierarchy is mounted; empty: found in /proc/self/mountinfo.
	CgroupRoot string
	Deadline   time.Duration // how long gpu-ctk may take
}

// containerState is what gpu-hook memory-limit reads of the state on stdin.
type containerState struct {
	ID  string `json:"id"`
	Pid int    `json:"pid"`
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)

func readState(r io.Reader) (containerState, error) {
	var s containerState
	data, err := io.ReadAll(io.LimitReader(r, MaxState+1))
	if err != nil {
		return s, fmt.Errorf("%w: read container state from stdin: %w", ErrState, err)
	}
	if len(data) > MaxState {
		return s, fmt.Errorf("%w: container state on stdin is larger than %d MiB", ErrState, MaxState>>20)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%w: decode container state from stdin: %w", ErrState, err)
	}
	if len(s.ID) > 1024 || !validID.MatchString(s.ID) {
		return s, fmt.Errorf("%w: container state has id %q, want letters, digits and _.+- only", ErrState, s.ID)
	}
	return s, nil
}

// MemoryLimit sets (createRuntime) or clears (poststop) the per-cgroup GPU memory limit of a
// container on one GPU through gpu-ctk memory-limit. It returns a note for the log when it did
// nothing because the driver does not offer the limits or the container has no cgroup v2 group;
// an error otherwise. Clearing is idempotent; a limit whose cgroup is gone is already cleared.
func MemoryLimit(stdin io.Reader, o MemoryLimitOptions) (note string, err error) {
	st, err := readState(stdin)
	if err != nil {
		return "", err
	}
	record := filepath.Join(o.StateDir, st.ID+"."+o.UUID)
	if o.Clear {
		data, err := os.ReadFile(record)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil // nothing was set, or it was cleared already
		}
		if err != nil {
			return "", fmt.Errorf("read the cgroup of container %s's GPU memory limit: %w", st.ID, err)
		}
		cg := string(data)
		if note, err := runCTK(o, "clear", "--cgroup", cg); err != nil || note != "" {
			return note, err
		}
		if err := os.Remove(record); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("remove %s: %w", record, err)
		}
		return "", nil
	}
	if st.Pid <= 0 {
		return "", fmt.Errorf("%w: container state has pid %d; run memory-limit as a createRuntime hook", ErrState, st.Pid)
	}
	cg, err := ContainerCgroup(o.ProcRoot, st.Pid, o.CgroupRoot)
	if errors.Is(err, ErrNoCgroupV2) {
		return fmt.Sprintf("GPU memory limit of %d bytes on %s not applied: %v", o.Bytes, o.UUID, err), nil
	}
	if err != nil {
		return "", err
	}
	// Recorded first: a poststop after a failed set still clears whatever was set.
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return "", fmt.Errorf("make %s: %w", o.StateDir, err)
	}
	if err := atomicfile.Write(record, []byte(cg), 0o600, atomicfile.Options{}); err != nil {
		return "", err
	}
	note, err = runCTK(o, "set", "--cgroup", cg, "--bytes", strconv.FormatUint(o.Bytes, 10))
	if note != "" {
		_ = os.Remove(record)
	}
	return note, err
}

// runCTK runs gpu-ctk memory-limit verb for the GPU, bounded by o.Deadline; a driver that does
// not offer the limits is a note.
func runCTK(o MemoryLimitOptions, verb string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.Deadline)
	defer cancel()
	argv := append([]string{"memory-limit", verb, "--driver-root", o.DriverRoot, "--device", o.UUID}, args...)
	cmd := exec.CommandContext(ctx, o.CTK, argv...)
	cmd.Env = plan.HookEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "gpu-ctk: "))
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "", nil
	case ctx.Err() != nil:
		return "", fmt.Errorf("%s memory-limit %s of %s: no answer within %v (the NVIDIA driver hangs?)", o.CTK, verb, o.UUID, o.Deadline)
	case errors.As(err, &exit) && exit.ExitCode() == exitNotOffered:
		return "GPU memory limit not applied: " + msg, nil
	case msg == "":
		msg = err.Error()
	}
	return "", fmt.Errorf("%s memory-limit %s: %s", o.CTK, verb, msg)
}

// ContainerCgroup returns the full path of the cgroup v2 group of process pid, from
// <procRoot>/proc/<pid>/cgroup and where cgroup v2 is mounted (cgroupRoot, or found in
// /proc/self/mountinfo). On a cgroup v1 host, or a hybrid one that left the process in the
// root of the v2 hierarchy, it is ErrNoCgroupV2: v1 hierarchies have no dmem controller, and
// NVML's limits are documented against the cgroup v2 group.
func ContainerCgroup(procRoot string, pid int, cgroupRoot string) (string, error) {
	file := filepath.Join(procRoot, "proc", strconv.Itoa(pid), "cgroup")
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("read the container's cgroup: %w", err)
	}
	defer func() { _ = f.Close() }()
	var v2 string
	var v1 bool
	sc := bufio.NewScanner(io.LimitReader(f, maxCgroupFile))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			v2 = p
		} else if line != "" {
			v1 = true
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	switch {
	case v2 == "":
		return "", fmt.Errorf("%w: %s has no cgroup v2 line (a cgroup v1 host); per-cgroup GPU memory limits need cgroup v2", ErrNoCgroupV2, file)
	case !filepath.IsAbs(v2) || filepath.Clean(v2) != v2 || strings.Contains(v2, "/../"):
		return "", fmt.Errorf("%s: cgroup v2 path %q is not a clean absolute path", file, v2)
	case v2 == "/" && v1:
		return "", fmt.Errorf("%w: the container is in the root of the cgroup v2 hierarchy of a hybrid (cgroup v1) host; per-cgroup GPU memory limits need cgroup v2", ErrNoCgroupV2)
	}
	if cgroupRoot == "" {
		if cgroupRoot, err = cgroup2Mount(); err != nil {
			return "", err
		}
	}
	return filepath.Join(cgroupRoot, v2), nil
}

// cgroup2Mount finds where the host's cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid host).
func cgroup2Mount() (string, error) {
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.FSType != "cgroup2" || m.Root != "/", false
	})
	if err != nil {
		return "", fmt.Errorf("find the cgroup v2 mount: %w", err)
	}
	for _, want := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		for _, m := range mounts {
			if m.Mountpoint == want {
				return want, nil
			}
		}
	}
	if len(mounts) > 0 {
		return mounts[0].Mountpoint, nil
	}
	return "", fmt.Errorf("%w: no cgroup2 file system is mounted; per-cgroup GPU memory limits need cgroup v2", ErrNoCgroupV2)
}

// Package engines runs gpu-runtime under the real container engines — dockerd, containerd
// (ctr and the CRI, through crictl) and podman — on a fake 2-GPU host built by
// internal/fakehost, and checks from inside busybox containers which GPUs each one got. The
// CDI tests (cdi_test.go) run the engines that apply a CDI spec themselves — podman and
// containerd 2.x, with plain runc — on a spec gpu-ctk generated for a fake MIG host, and
// containerd 1.6 handing CDI annotations to gpu-runtime.
//
// Every engine is started by the tests themselves, once per test binary, as a private
// instance: its own config file, root, state and exec directories and socket, all under one
// temporary directory. The host's engines, sockets and configuration (/etc/docker,
// /etc/containerd, /var/lib/docker, …) are never used. Engines are configured the way users
// configure them, with `gpu-ctk runtime configure`, pointed at private files.
//
// It needs root. Under `make test` (GPU_RUNTIME_E2E=1) a missing prerequisite fails the run;
// otherwise the tests skip, loudly, with the reason. scripts/install-engine-deps.sh installs
// the engines and builds crictl and containerd 2.x (which the tests also build when missing).
//
// Daemons run in process groups of their own and are stopped when the test binary ends
// (SIGTERM, SIGKILL after 30s), after which every process whose command line, root, working
// directory or executable lies under the suite's directory, and its descendants, is killed by
// pid, and everything mounted there is unmounted. A run killed by a panic or -timeout is
// cleaned up the same way by the next run (the directory records its owner's pid).
//
// What the engines need on these machines (hybrid cgroups, no CAP_SYS_RESOURCE, no registry):
//   - dockerd 20.10: --data-root, --exec-root, --pidfile, -H unix://…, --bridge none,
//     --iptables=false; containers with --network none. daemon.json's deprecated-key-path
//     keeps its identity key out of /etc/docker. Its own containerd still uses /opt/containerd
//     and /run/containerd/s (shim sockets), and the client must be /usr/bin/docker.
//   - containerd 1.6: a config with root, state, grpc address and the opt plugin's path;
//     ctr's default spec mounts no cgroup filesystem (the tests add one). The CRI needs
//     restrict_oom_score_adj = true, a local sandbox_image and host-network pods. ctr's runc
//     state goes to /run/containerd/runc/<namespace>; the CRI's to options.Root.
//   - containerd 2.x (not in Debian 12: scripts/build-containerd2.sh builds it into
//     .cache/containerd2): config version 3; runtime_path names its own shim (PATH has 1.6's);
//     NRI off (its socket is /var/run/nri otherwise); CDI spec directories of its own. Its
//     shims' sockets, like 1.6's, go to /run/containerd/s, named by a hash of the daemon's
//     address, namespace and container, so the two containerds never share one.
//   - podman 4.3: crun (its default) refuses the hybrid cgroup layout; --ulimit nofile and
//     nproc within the hard limits; cgroupfs; file events. It still writes
//     /var/lib/containers/cache, /run/containers and /dev/shm/libpod_lock, passes runc no
//     --root (state in /run/runc), and runs its cleanup's `runtime delete` with no PATH and
//     without --runtime-flag values. It reads CDI specs only from /etc/cdi and /var/run/cdi.
//
// Host paths like these that did not exist when the suite started are removed at its end.
package engines

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
	"github.com/gpu-runtime/gpu-runtime/internal/testbin"
)

// workPrefix names the suite's temporary directory, /tmp/gre-*: short, because unix socket
// paths under it are limited to 107 bytes.
const workPrefix = "gre-"

var (
	skipReason string
	e2eMode    = os.Getenv("GPU_RUNTIME_E2E") == "1"

	repoRoot string
	workDir  string // everything the suite writes: binaries, fake host, images, engines
	binDir   string // gpu-runtime, gpu-hook and gpu-ctk built from this checkout
	host     *fakehost.Host

	// wrapper is the "gpu-runtime" every engine is pointed at; see writeWrapper.
	wrapper string
	// hookDir holds nvidia-container-runtime-hook -> gpu-hook, prepended to dockerd's PATH.
	hookDir string
	// rootfsTar is the busybox root filesystem as a tar stream; imageArchive the same as a
	// `docker save` archive holding img:1 (CMD sh) and pause:1 (CMD sleep).
	rootfsTar, imageArchive string
	// runtimeLog is gpu-runtime's log-file, shown when a test fails.
	runtimeLog string
	// runtimeConfig is the configuration the wrapper gives gpu-runtime; cdiDir the CDI spec
	// directory it names (see wrapperSpec).
	runtimeConfig, cdiDir string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() == 0 {
		// A previous run killed by a panic or -timeout leaves its engines running; stop them
		// before anything else (only directories whose owning test process is gone).
		reapStale()
	}
	var err error
	workDir, err = os.MkdirTemp("/tmp", workPrefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(workDir, ownerFile), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	leftovers := enginetest.RecordLeftovers(hostLeftoverPaths(), filepath.Join(workDir, hostLeftoversFile))
	defer func() {
		stopAll()
		leftovers.Remove()
		if err := enginetest.Reap(workDir); err != nil {
			fmt.Fprintf(os.Stderr, "engines: cleanup of %s: %v\n", workDir, err)
		}
	}()
	if reason := setup(); reason != "" {
		if e2eMode {
			fmt.Fprintf(os.Stderr, "engines: FAIL: prerequisite missing under GPU_RUNTIME_E2E=1: %s\n", reason)
			return 1
		}
		skipReason = reason
		fmt.Fprintf(os.Stderr, "\n*** engine tests SKIPPED: %s (run `make test` as root to run them) ***\n\n", reason)
	}
	return m.Run()
}

// setup checks what every engine test needs and builds the shared pieces; it returns a reason
// to skip, or "".
func setup() string {
	if os.Geteuid() != 0 {
		return "engine tests need root (they start dockerd, containerd and podman)"
	}
	for _, tool := range []string{"runc", "gcc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (make deps)"
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "cannot find the module root: " + err.Error()
	}
	repoRoot = strings.TrimSpace(string(out))

	binDir = filepath.Join(workDir, "bin")
	// As `make build` builds them: gpu-runtime asks gpu-ctk, next to it, about NVML.
	if err := testbin.Build(repoRoot, binDir); err != nil {
		return err.Error()
	}
	if host, err = fakehost.Build(filepath.Join(workDir, "host"), fakehost.Default(2)); err != nil {
		return "build the fake GPU host: " + err.Error()
	}
	if err := writeWrapper(); err != nil {
		return err.Error()
	}
	hookDir = filepath.Join(workDir, "hookbin")
	if err := os.MkdirAll(hookDir, 0o755); err != nil {
		return err.Error()
	}
	// As packaging installs it: a symlink named for the hook dockerd looks for, to gpu-hook.
	if err := os.Symlink(filepath.Join(binDir, "gpu-hook"), filepath.Join(hookDir, "nvidia-container-runtime-hook")); err != nil {
		return err.Error()
	}
	if err := writeImages(); err != nil {
		return "build the busybox image: " + err.Error()
	}
	return ""
}

// writeWrapper writes the gpu-runtime configuration for the fake host and the wrapper script
// the engines run as their runtime.
//
// Why a wrapper: the engines exec the runtime binary themselves (dockerd through containerd's
// shim, containerd's shim, podman's conmon), each with an environment of its own, and none of
// their runtime settings can add a variable (docker's runtimes have only path and runtimeArgs,
// containerd's runc options only BinaryName and the like; runtimeArgs go to the runtime as
// runc flags, which gpu-runtime passes through). Installing the test config as
// /etc/gpu-runtime/config.toml would change the host. So each engine is given, as the
// runtime's path, a two-line script that sets GPU_RUNTIME_CONFIG and execs the real binary:
// the same process then replaces itself with runc, so signals and exit codes are unchanged.
func writeWrapper() error {
	runtimeLog = filepath.Join(workDir, "gpu-runtime.log")
	runtimeConfig = filepath.Join(workDir, "gpu-runtime.toml")
	cdiDir = filepath.Join(workDir, "cdi")
	content := fmt.Sprintf(`[runtime]
runtimes = ["runc"]
log-level = "debug"
log-file = %q
[driver]
root = %q
dev-root = %q
[hook]
path = %q
[discovery]
cache-file = %q
[cdi]
spec-dirs = [%q]
allowed-kinds = ["nvidia.com/gpu", %q]
`, runtimeLog, host.DriverRoot, host.DevRoot, filepath.Join(binDir, "gpu-hook"), filepath.Join(workDir, "discovery-cache.csv"), cdiDir, wrapperCDIKind)
	if err := os.WriteFile(runtimeConfig, []byte(content), 0o644); err != nil {
		return err
	}
	wrapper = filepath.Join(workDir, "gpu-runtime")
	script := fmt.Sprintf("#!/bin/sh\nGPU_RUNTIME_CONFIG=%s exec %s \"$@\"\n", shellQuote(runtimeConfig), shellQuote(filepath.Join(binDir, "gpu-runtime")))
	return os.WriteFile(wrapper, []byte(script), 0o755)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// requireSetup skips (or fails, under GPU_RUNTIME_E2E=1) when the suite could not be set up.
func requireSetup(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED: " + skipReason)
	}
}

// prerequisite reports a missing engine or tool: a failure under GPU_RUNTIME_E2E=1, else a
// loud skip.
func prerequisite(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if e2eMode {
		t.Fatalf("prerequisite missing under GPU_RUNTIME_E2E=1: %s (scripts/install-engine-deps.sh installs the engines)", msg)
	}
	t.Skipf("SKIPPED: %s (scripts/install-engine-deps.sh installs the engines)", msg)
}

// requireTools checks that every path or command name exists and returns their paths.
func requireTools(t *testing.T, tools ...string) []string {
	t.Helper()
	requireSetup(t)
	paths := make([]string, len(tools))
	for i, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			prerequisite(t, "%s is not installed", tool)
		}
		paths[i] = p
	}
	return paths
}

package gpuhost

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

// Testing dependencies: the effective user and the file that says which user namespace the
// process is in.
var (
	geteuid    = os.Geteuid
	uidMapFile = "/proc/self/uid_map"
)

// NoCgroups says why a create must bind-mount the host's device nodes instead of giving the
// low-level runtime device entries and cgroup rules (plan.Host.NoCgroups): runtime.no-cgroups,
// or rootless's answer (nil: Rootless); "" when neither says so. warning is set when the
// setting is on where gpu-runtime is the host's root: a rootful engine's device cgroup then
// denies the container the nodes.
func NoCgroups(cfg config.Config, rootless func() string) (why, warning string) {
	if rootless == nil {
		rootless = Rootless
	}
	r := rootless()
	switch {
	case cfg.Runtime.NoCgroups && r == "":
		return "runtime.no-cgroups is true", NoCgroupsRootfulWarning
	case cfg.Runtime.NoCgroups:
		return "runtime.no-cgroups is true", ""
	}
	return r, ""
}

// NoCgroupsRootfulWarning is NoCgroups' warning.
const NoCgroupsRootfulWarning = "runtime.no-cgroups is true, and gpu-runtime runs as the host's root: the engine's device cgroup denies the container the GPU nodes gpu-runtime bind-mounts (unless it is privileged); set runtime.no-cgroups = false (rootless runs are detected without it)"

// Rootless says why gpu-runtime runs rootless, "" when it is the host's root: not as root
// (runc --rootless), or in a user namespace other than the host's (rootless podman runs its
// runtime as root of a namespace that maps the user's ids). There neither runc nor crun can
// create a device node or write a device cgroup. It reads the process's own state, nothing
// of the container's.
func Rootless() string {
	if euid := geteuid(); euid != 0 {
		return fmt.Sprintf("gpu-runtime runs as uid %d, not root (rootless)", euid)
	}
	if inUserNamespace() {
		return "gpu-runtime runs in a user namespace (rootless)"
	}
	return ""
}

// RootlessCacheFile is the discovery cache of a rootless create: cfg's discovery.cache-file
// where it was set, else (root's default, which the user can neither read nor write) the
// user's runtime directory's gpu-runtime/discovery-cache.csv. runtimeDir is XDG_RUNTIME_DIR,
// which the engine (rootless podman) or the user's session sets; "" or a relative path keeps
// the default, whose warnings then say the cache cannot be used.
func RootlessCacheFile(cfg config.Config, runtimeDir string) string {
	if cfg.Discovery.CacheFile != config.Default().Discovery.CacheFile || !filepath.IsAbs(runtimeDir) {
		return cfg.Discovery.CacheFile
	}
	return filepath.Join(runtimeDir, "gpu-runtime", "discovery-cache.csv")
}

// inUserNamespace reports whether the process is in a user namespace other than the initial
// one, whose uid_map is the identity over every id ("0 0 4294967295"), as runc's
// userns.RunningInUserNS decides. An unreadable map (no /proc) counts as the initial one.
func inUserNamespace() bool {
	f, err := os.Open(uidMapFile)
	if err != nil {
		return false
	}
	defer f.Close()
	// A map has at most 340 lines (user_namespaces(7)); the initial one is one short line.
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(data)), " ") != "0 0 4294967295"
}

package ctk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/engine"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// liveSockets are where doctor and gpu-ctk loaded ask the running engines: DOCKER_HOST
// (unix:// only, as docker's client takes it) and CONTAINERD_ADDRESS (as ctr takes it), else
// the default sockets under root.
func liveSockets(root string) (docker, containerd string) {
	docker = filepath.Join(root, engine.DefaultDockerSocket)
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok && h != "" {
		docker = h
	}
	containerd = filepath.Join(root, engine.DefaultContainerdSocket)
	if a := os.Getenv("CONTAINERD_ADDRESS"); a != "" {
		containerd = strings.TrimPrefix(a, "unix://")
	}
	return docker, containerd
}

// queryLive asks the running engine e; crictl is looked up on PATH for containerd.
func queryLive(e engine.Engine, root string) (engine.Live, error) {
	docker, containerd := liveSockets(root)
	switch e {
	case engine.Docker:
		return engine.QueryDocker(context.Background(), docker)
	case engine.Containerd:
		return engine.QueryContainerd(context.Background(), containerd, lookCrictl())
	}
	return engine.Live{}, fmt.Errorf("%s: %w", e, engine.ErrNotRunning)
}

// Testing dependencies.
var lookCrictl = findCrictl

// findCrictl is GPU_RUNTIME_CRICTL when set, else crictl on PATH, else in the system's
// program directories (dpkg runs maintainer scripts with a PATH of its own); "" when none.
func findCrictl() string {
	if p := os.Getenv("GPU_RUNTIME_CRICTL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("crictl"); err == nil {
		return p
	}
	for _, dir := range plan.SystemDirs {
		p := filepath.Join(dir, "crictl")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// daemonName is the engine's process as users know it.
func daemonName(e engine.Engine) string {
	if e == engine.Docker {
		return "dockerd"
	}
	return string(e)
}

// compareLive compares what engine e's files register (registered: the runtimes of ours;
// defaultName: the one set as its default runtime, "" for none) with what the running engine
// has loaded, when one answers on its socket. Runtimes of ours are told by their program, not
// their name. The files are what an engine reads when it starts: until it restarts it runs
// with what it loaded then (dockerd keeps its default runtime even across a reload). It returns
// "" for status when there is nothing to say beyond a note (no engine answers, or it agrees);
// otherwise warn, with the restart as the fix.
func (d *doctor) compareLive(e engine.Engine, restart string, registered []string, defaultName string) (status, note, fix string) {
	if e != engine.Docker && e != engine.Containerd {
		return "", "", ""
	}
	live, err := queryLive(e, d.engineRoot)
	if errors.Is(err, engine.ErrNotRunning) {
		return "", "", ""
	}
	if err != nil {
		return "", fmt.Sprintf("; the running %s was not asked what it loaded: %v", daemonName(e), err), ""
	}
	running := "the running " + daemonName(e)
	if live.PID != 0 {
		running += fmt.Sprintf(" (pid %d)", live.PID)
	}
	loaded := live.Ours("")
	again := "restart " + string(e)
	var missing []string
	for _, name := range registered {
		if !slices.Contains(loaded, name) {
			missing = append(missing, name)
		}
	}
	switch {
	case len(missing) > 0:
		return statusWarn, fmt.Sprintf("; registered but not loaded: %s has only the runtimes %s (it read its configuration before the %s was registered); %s",
			running, strings.Join(live.RuntimeNames(), ", "), runtimeNames(missing), again), restart
	case defaultName != "" && live.Default != defaultName:
		return statusWarn, fmt.Sprintf("; but not loaded as such: %s still defaults to %q, so containers that name no runtime get no GPU; %s", running, live.Default, again), restart
	case len(registered) == 0 && len(loaded) > 0:
		return statusWarn, fmt.Sprintf(", but %s still has the %s loaded (%s) until it restarts; %s", running, runtimeNames(loaded), live.Runtimes[loaded[0]], again), restart
	case len(registered) == 0:
		return "", "", ""
	}
	note = "; loaded by " + running
	if defaultName != "" {
		note += " as its default runtime"
	}
	return statusOK, note, ""
}

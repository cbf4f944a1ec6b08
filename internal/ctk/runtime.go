package ctk

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/engine"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

const runtimeUsage = `usage:
  gpu-ctk runtime configure   --runtime=docker|containerd|crio [--runtime-name=NAME]
                              [--runtime-path=PATH] [--set-as-default] [--config=PATH]
                              [--drop-in=PATH] [--dry-run]
  gpu-ctk runtime unconfigure --runtime=docker|containerd|crio [--runtime-name=NAME]
                              [--runtime-path=PATH] [--config=PATH] [--drop-in=PATH]
                              [--dry-run]

configure registers gpu-runtime as runtime NAME of the engine (default gpu; nvidia keeps
manifests and scripts written for NVIDIA's toolkit working); unconfigure removes it, and the
engine's default runtime only when it is NAME, putting back what configure displaced (docker's
previous default-runtime, a runtime of the same name). A runtime is gpu-runtime's by its program,
not its name: one whose path ends in /gpu-runtime (or is --runtime-path). Without
--runtime-name, unconfigure removes every runtime of gpu-runtime's, whatever its name (gpu,
nvidia); a runtime NAME that is another's (NVIDIA's nvidia) is left, and said. Both are idempotent. Files are replaced
atomically; configure first copies daemon.json and containerd's config.toml to
<file>.bak.<time>, and unconfigure removes those backups. After a change, restart the engine.

  docker      edits daemon.json (--config, default /etc/docker/daemon.json)
  containerd  writes a drop-in (--drop-in, default /etc/containerd/conf.d/99-gpu-runtime.toml)
              and adds it to the imports of the main config (--config, default
              /etc/containerd/config.toml), which it creates when missing
  crio        writes a drop-in (--config, default /etc/crio/crio.conf.d/99-gpu-runtime.conf)

flags:
`

// host is what the runtime command asks of the machine; tests replace it.
type host struct {
	executable func() (string, error)
	lookPath   func(string) (string, error)
	// containerdVersion returns `containerd --version`'s output.
	containerdVersion func() (string, error)
	now               func() time.Time
}

var realHost = host{
	executable: os.Executable,
	lookPath:   exec.LookPath,
	containerdVersion: func() (string, error) {
		out, err := exec.Command("containerd", "--version").Output()
		return string(out), err
	},
	now: time.Now,
}

func runRuntime(args []string, stdout, stderr io.Writer) error {
	return runtimeCommand(args, stdout, stderr, realHost)
}

func runtimeCommand(args []string, stdout, stderr io.Writer, h host) error {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, runtimeUsage)
		return fmt.Errorf("%w: gpu-ctk runtime needs configure or unconfigure", ErrUsage)
	}
	switch args[0] {
	case "configure", "unconfigure":
		return configureCommand(args[0] == "configure", args[1:], stdout, stderr, h)
	case "--help", "-help", "-h", "help":
		return configureCommand(true, []string{"--help"}, stdout, stderr, h) // one usage for both
	}
	return fmt.Errorf("%w: unknown subcommand %q of gpu-ctk runtime: use configure or unconfigure", ErrUsage, args[0])
}

func configureCommand(configure bool, args []string, stdout, stderr io.Writer, h host) error {
	verb := map[bool]string{true: "configure", false: "unconfigure"}[configure]
	flags := flag.NewFlagSet("gpu-ctk runtime", flag.ContinueOnError)
	engineName := flags.String("runtime", "", "the container engine: docker, containerd or crio (required)")
	name := flags.String("runtime-name", engine.DefaultRuntimeName, "the runtime's name in the engine (docker --runtime, the Kubernetes RuntimeClass handler); nvidia to replace NVIDIA's toolkit")
	pathFlag := flags.String("runtime-path", "", "configure: the gpu-runtime executable (default: next to gpu-ctk, else on PATH, else /usr/local/bin/gpu-runtime); unconfigure: a runtime with this path is gpu-runtime's too")
	setAsDefault := flags.Bool("set-as-default", false, "configure: make the runtime the engine's default")
	configPath := flags.String("config", "", "the engine's config file: daemon.json, containerd's main config, or the cri-o drop-in")
	dropIn := flags.String("drop-in", "", "containerd: the drop-in file gpu-ctk owns")
	dryRun := flags.Bool("dry-run", false, "print the resulting files to stdout and write nothing")
	flags.SetOutput(io.Discard)
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = io.WriteString(stdout, runtimeUsage)
			flags.SetOutput(stdout)
			flags.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w: gpu-ctk runtime %s: %w (see gpu-ctk runtime --help)", ErrUsage, verb, err)
	}
	set := map[string]bool{}
	flags.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	usage := func(format string, a ...any) error {
		return fmt.Errorf("%w: gpu-ctk runtime %s: %s (see gpu-ctk runtime --help)", ErrUsage, verb, fmt.Sprintf(format, a...))
	}
	if flags.NArg() > 0 {
		return usage("unexpected argument %q", flags.Arg(0))
	}
	if *engineName == "" {
		return usage("--runtime is required: docker, containerd or crio (podman: --runtime=podman says what it needs)")
	}
	if strings.EqualFold(*engineName, "podman") {
		return podmanNote(configure, *pathFlag, stdout, h)
	}
	eng, err := engine.ParseEngine(*engineName)
	if err != nil {
		return usage("--runtime: %v", err)
	}
	if set["drop-in"] && eng != engine.Containerd {
		return usage("--drop-in applies to containerd; for cri-o, --config names the drop-in")
	}
	if !configure && set["set-as-default"] {
		return usage("--set-as-default applies to configure")
	}

	opts := engine.Options{RuntimeName: *name, SetAsDefault: *setAsDefault, ConfigPath: *configPath, DropInPath: *dropIn}
	if !configure && !set["runtime-name"] {
		opts.RuntimeName = "" // every runtime of gpu-runtime's, whatever its name
	}
	if !configure && *pathFlag != "" {
		if opts.RuntimePath, err = filepath.Abs(*pathFlag); err != nil {
			return fmt.Errorf("resolve --runtime-path %s: %w", *pathFlag, err)
		}
	}
	planFor := engine.PlanUnconfigure
	if configure {
		planFor = engine.PlanConfigure
		if opts.RuntimePath, err = runtimePath(*pathFlag, h); err != nil {
			return err
		}
		if err := checkExecutable(opts.RuntimePath); err != nil {
			fmt.Fprintf(stderr, "warning: %v; containers of runtime %q will fail to start until gpu-runtime is installed there (or pass --runtime-path)\n", err, opts.RuntimeName)
		}
		if eng == engine.Containerd {
			opts.ContainerdConfigVersion = containerdConfigVersion(h)
		}
	}

	plan, err := planFor(eng, opts)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, eng, err)
	}
	writeLines(stderr, "warning: ", plan.Warnings)

	report := stdout
	if *dryRun {
		report = stderr // stdout holds the files
	}
	if !plan.Changed() {
		state := "already configured"
		if !configure {
			state = "not configured"
		}
		fmt.Fprintf(report, "%s: runtime %q %s in %s; nothing written\n", eng, *name, state, strings.Join(plan.Files, " and "))
		writeLines(report, "note: ", plan.Notes)
		if configure && eng == engine.Docker {
			dockerHookNote(report, opts.RuntimePath, h)
		}
		return nil
	}
	if *dryRun {
		if err := plan.WriteDryRun(stdout); err != nil {
			return err
		}
		writeLines(report, "note: ", plan.Notes)
		fmt.Fprintln(report, "dry run: nothing written")
		return nil
	}

	backups, err := plan.Apply(h.now())
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, eng, err)
	}
	if configure {
		fmt.Fprintf(report, "configured %s: runtime %q -> %s\n", eng, opts.RuntimeName, opts.RuntimePath)
	} else {
		removed := plan.Runtimes
		if len(removed) == 0 {
			removed = []string{*name}
		}
		fmt.Fprintf(report, "unconfigured %s: %s removed\n", eng, runtimeNames(removed))
	}
	for _, c := range plan.Changes {
		switch {
		case c.Remove:
			fmt.Fprintf(report, "  removed %s\n", c.Path)
		case c.RestoredFrom != "":
			fmt.Fprintf(report, "  restored %s as it was before configure, from %s (removed)\n", c.Path, c.RestoredFrom)
		default:
			backup := ""
			if i := slices.IndexFunc(backups, func(b string) bool { return strings.HasPrefix(b, c.Path+".bak.") }); i >= 0 {
				backup = " (previous content: " + backups[i] + ")"
			}
			fmt.Fprintf(report, "  wrote %s%s\n", c.Path, backup)
		}
	}
	writeLines(report, "note: ", plan.Notes)
	writeLines(report, "next: ", plan.Next)
	if configure && eng == engine.Docker {
		if opts.SetAsDefault {
			fmt.Fprintln(report, "next: docker run --gpus all IMAGE, or docker run -e NVIDIA_VISIBLE_DEVICES=all IMAGE")
		} else {
			fmt.Fprintf(report, "next: docker run --runtime=%s --gpus all IMAGE, or docker run --runtime=%s -e NVIDIA_VISIBLE_DEVICES=all IMAGE (--gpus without --runtime needs --set-as-default)\n", opts.RuntimeName, opts.RuntimeName)
		}
		dockerHookNote(report, opts.RuntimePath, h)
	}
	return nil
}

// runtimePath returns flagValue made absolute, or where gpu-runtime is installed: next to
// this executable, else on PATH, else /usr/local/bin/gpu-runtime.
func runtimePath(flagValue string, h host) (string, error) {
	if flagValue != "" {
		p, err := filepath.Abs(flagValue)
		if err != nil {
			return "", fmt.Errorf("resolve --runtime-path %s: %w", flagValue, err)
		}
		return p, nil
	}
	if exe, err := h.executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "gpu-runtime")
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	if p, err := h.lookPath("gpu-runtime"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
	}
	return "/usr/local/bin/gpu-runtime", nil
}

// checkExecutable says why path is not an executable file.
func checkExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err // names path
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file: %w", path, fs.ErrPermission)
	}
	return nil
}

// containerdConfigVersion is the config version for a new containerd config: 3 when the
// installed containerd is 2.x, else 2 (which 2.x reads too).
func containerdConfigVersion(h host) int {
	if out, err := h.containerdVersion(); err == nil {
		if v, err := engine.ContainerdConfigVersionFor(out); err == nil {
			return v
		}
	}
	return 2
}

// dockerHookNote explains what docker --gpus needs, and whether this host has it. The hook
// found on PATH may be NVIDIA's (nvidia-container-toolkit ships a binary of that name); it is
// never to be replaced, and works alongside gpu-runtime.
func dockerHookNote(w io.Writer, runtimePath string, h host) {
	fmt.Fprintf(w, "note: docker --gpus works only when an executable named %s is on dockerd's PATH when dockerd starts; gpu-runtime drops that hook from the spec and injects the GPUs itself\n", request.DockerHookName)
	found, err := h.lookPath(request.DockerHookName)
	if err != nil {
		dir := filepath.Dir(runtimePath)
		fmt.Fprintf(w, "warning: %s is not on PATH: docker run --gpus fails with 'could not select device driver \"\" with capabilities: [[gpu]]'; link it to gpu-hook with: ln -s gpu-hook %s, then restart dockerd\n", request.DockerHookName, filepath.Join(dir, request.DockerHookName))
		return
	}
	if isGPUHook(found) {
		return
	}
	fmt.Fprintf(w, "note: %s is not gpu-hook (NVIDIA Container Toolkit's?); leave it: dockerd accepts --gpus with it, containers of the gpu runtime get their GPUs from gpu-runtime, and containers of runc keep NVIDIA's hook\n", found)
}

// isGPUHook reports whether the executable at p is gpu-hook (docker's hook name linked to it,
// as packaging makes it), not NVIDIA's hook of the same name.
func isGPUHook(p string) bool {
	target, err := filepath.EvalSymlinks(p)
	return err == nil && filepath.Base(target) == plan.HookName
}

// runtimeNames is `runtime "a"` or `runtimes "a", "b"`.
func runtimeNames(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	if len(names) == 1 {
		return "runtime " + quoted[0]
	}
	return "runtimes " + strings.Join(quoted, ", ")
}

func writeLines(w io.Writer, prefix string, lines []string) {
	for _, l := range lines {
		fmt.Fprintln(w, prefix+l)
	}
}

// podmanNote answers --runtime=podman: podman has no runtime registry to edit, so gpu-ctk
// says what podman needs instead of calling it an unknown engine.
func podmanNote(configure bool, pathFlag string, w io.Writer, h host) error {
	if !configure {
		_, err := fmt.Fprintln(w, "podman: nothing to unconfigure: gpu-ctk never edits podman's configuration (remove the lines below from containers.conf if you added them)")
		return err
	}
	runtimePath, err := runtimePath(pathFlag, h)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, `podman: nothing written: podman takes its runtime per container or from containers.conf, and needs no restart.
  per container:  podman run --runtime %[1]s -e NVIDIA_VISIBLE_DEVICES=0 IMAGE
  for every container, in /etc/containers/containers.conf (or ~/.config/containers/containers.conf):
    [engine]
    runtime = "gpu"
    [engine.runtimes]
    gpu = [%[2]q]
  or without gpu-runtime in the path, by CDI: gpu-ctk cdi generate --output /etc/cdi/nvidia.yaml, then
    podman run --device nvidia.com/gpu=0 IMAGE
`, runtimePath, runtimePath)
	return err
}

package edits

import (
	"fmt"
	"strings"
)

// RemovedHookWhy says why a hook named in RemoveHooks is dropped.
const RemovedHookWhy = "docker's --gpus hook: gpu-runtime honours its request through the spec instead"

// Describe lists e's edits for people, one a line and in the order Apply makes them: hook
// removals, environment, each device node followed by its cgroup rule, mounts, hooks. Each
// line ends with why the edit is there (" — why"). gpu-ctk explain prints these lines and
// the runtime's debug log carries them, so the two never disagree.
func (e Edits) Describe() []string {
	var out []string
	add := func(what, why string) {
		if why != "" {
			what += " — " + why
		}
		out = append(out, what)
	}
	for _, name := range e.RemoveHooks {
		add("remove hook "+name+" (any stage)", RemovedHookWhy)
	}
	for _, n := range e.UnsetEnv {
		add("unset env "+n, e.EnvWhy)
	}
	for _, kv := range e.Env {
		add("env "+kv, e.EnvWhy)
	}
	for _, n := range e.DeviceNodes {
		what := fmt.Sprintf("device %s %s %d:%d mode %04o uid %d gid %d", n.Path, n.Type, n.Major, n.Minor, n.FileMode.Perm(), n.UID, n.GID)
		if n.HostPath != "" {
			what += " (host " + n.HostPath + ")"
		}
		add(what, n.Why)
		add(fmt.Sprintf("cgroup allow %s %d:%d rwm", n.Type, n.Major, n.Minor), "the rule of "+n.Path)
	}
	for _, m := range e.Mounts {
		add(fmt.Sprintf("mount %s <- %s (%s)", m.ContainerPath, m.HostPath, strings.Join(m.Options, ",")), m.Why)
	}
	for _, h := range e.Hooks {
		what := "hook " + h.Stage + " " + h.Path
		if len(h.Args) > 1 { // Args[0] is the program's name
			what += " " + strings.Join(h.Args[1:], " ")
		}
		if h.Timeout > 0 {
			what += fmt.Sprintf(" (timeout %ds)", h.Timeout)
		}
		add(what, h.Why)
	}
	return out
}

package ctk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// maxEngineFile bounds what doctor reads of one engine configuration file, maxDropIns how
// many drop-ins of a directory.
const (
	maxEngineFile = 1 << 20
	maxDropIns    = 64
)

// checkDevChar: with the systemd cgroup driver, every NVIDIA node needs its /dev/char link,
// or a systemctl daemon-reload revokes running GPU containers' device access.
func (d *doctor) checkDevChar() {
	engines, problems := systemdCgroupEngines(d.engineRoot, d.findProgram("crio") != "")
	for _, p := range problems {
		d.add("/dev/char links", statusWarn, p, "correct the file named")
	}
	root := d.cfg.Driver.DevRoot
	links, err := devCharLinks(root)
	if err != nil {
		d.add("/dev/char links", statusWarn, err.Error(), "check driver.dev-root")
		return
	}
	var missing []string
	for _, l := range links {
		if l.State != stateOK {
			missing = append(missing, fmt.Sprintf("%s (%d:%d)", l.Node.Path, l.Node.Major, l.Node.Minor))
		}
	}
	switch {
	case len(engines) == 0:
		d.add("/dev/char links", statusOK, fmt.Sprintf("no engine under %s uses the systemd cgroup driver: the links are not needed (%d of %d NVIDIA nodes linked)",
			d.engineRoot, len(links)-len(missing), len(links)), "")
	case len(missing) == 0:
		d.add("/dev/char links", statusOK, fmt.Sprintf("%s: every NVIDIA node (%d) has its /dev/char link under dev root %q", strings.Join(engines, ", "), len(links), root), "")
	default:
		d.add("/dev/char links", statusWarn, fmt.Sprintf("%s; no /dev/char link under dev root %q for %s: a systemctl daemon-reload takes these devices from running GPU containers (\"Failed to initialize NVML: Unknown Error\")",
			strings.Join(engines, ", "), root, strings.Join(missing, ", ")),
			"gpu-ctk system create-dev-char-symlinks, and at every boot: systemctl enable gpu-runtime-dev-char-symlinks.service")
	}
}

// systemdCgroupEngines names the engines under root configured with the systemd cgroup
// driver, each with where it says so: containerd (SystemdCgroup = true in its config or a
// drop-in), cri-o (cgroup_manager = "systemd", its default when installed and not set),
// docker (exec-opts native.cgroupdriver=systemd). Files it cannot read or parse are problems.
func systemdCgroupEngines(root string, crioInstalled bool) ([]string, []string) {
	var out, problems []string
	// containerd: any runtime's runc options.
	for _, f := range withDropIns(root, "/etc/containerd/config.toml", "/etc/containerd/conf.d", ".toml") {
		var doc map[string]any
		if err := readTOML(filepath.Join(root, f), &doc); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				problems = append(problems, err.Error())
			}
			continue
		}
		if hasTOMLKey(doc, "SystemdCgroup", true) {
			out = append(out, "containerd uses the systemd cgroup driver (SystemdCgroup = true in "+f+")")
			break
		}
	}
	// cri-o: the last file that sets cgroup_manager wins; systemd is its default.
	if crioInstalled {
		manager, where := "systemd", "cri-o's default"
		for _, f := range withDropIns(root, "/etc/crio/crio.conf", "/etc/crio/crio.conf.d", "") {
			var doc map[string]any
			if err := readTOML(filepath.Join(root, f), &doc); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					problems = append(problems, err.Error())
				}
				continue
			}
			crio, _ := doc["crio"].(map[string]any)
			if rt, ok := crio["runtime"].(map[string]any); ok {
				if m, ok := rt["cgroup_manager"].(string); ok {
					manager, where = m, `cgroup_manager = "`+m+`" in `+f
				}
			}
		}
		if manager == "systemd" {
			out = append(out, "cri-o uses the systemd cgroup driver ("+where+")")
		}
	}
	// docker: exec-opts.
	daemon := "/etc/docker/daemon.json"
	data, err := readBounded(filepath.Join(root, daemon))
	if err == nil {
		var cfg struct {
			ExecOpts []string `json:"exec-opts"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", filepath.Join(root, daemon), err))
		} else if slices.ContainsFunc(cfg.ExecOpts, func(o string) bool {
			return strings.ReplaceAll(o, " ", "") == "native.cgroupdriver=systemd"
		}) {
			out = append(out, "docker uses the systemd cgroup driver (exec-opts native.cgroupdriver=systemd in "+daemon+")")
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		problems = append(problems, err.Error())
	}
	return out, problems
}

// withDropIns returns a main file and the drop-ins of dir (with suffix, sorted, at most
// maxDropIns), as paths under root.
func withDropIns(root, main, dir, suffix string) []string {
	files := []string{main}
	entries, _ := os.ReadDir(filepath.Join(root, dir))
	for _, e := range entries {
		if len(files) > maxDropIns {
			break
		}
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), suffix) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return files
}

// readBounded reads a regular file of at most maxEngineFile bytes.
func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxEngineFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(data) > maxEngineFile {
		return nil, fmt.Errorf("%s: larger than %d bytes, not read", p, maxEngineFile)
	}
	return data, nil
}

func readTOML(p string, v any) error {
	data, err := readBounded(p)
	if err != nil {
		return err
	}
	if err := toml.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// hasTOMLKey reports whether a key has value want anywhere in a decoded TOML document.
func hasTOMLKey(doc map[string]any, key string, want any) bool {
	for k, v := range doc {
		if k == key && v == want {
			return true
		}
		if sub, ok := v.(map[string]any); ok && hasTOMLKey(sub, key, want) {
			return true
		}
	}
	return false
}

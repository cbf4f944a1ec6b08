package ctk

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

const systemUsage = `usage:
  gpu-ctk system create-dev-char-symlinks [--dry-run]

create-dev-char-symlinks makes /dev/char/<major>:<minor> a symbolic link to every NVIDIA
character device under driver.dev-root: the GPUs' /dev/nvidia<N>, nvidiactl, nvidia-uvm,
nvidia-modeset, /dev/nvidia-caps/*, the IMEX channels and the DGX/HGX feature nodes
(/dev/nvidia-fs*, /dev/nvidia-nvswitch*, /dev/gdrdrv, /dev/infiniband/uverbs*, rdma_cm).
The NVIDIA driver makes its nodes without udev, so nothing else makes these links. With the
systemd cgroup driver (containerd SystemdCgroup = true, cri-o's default, docker
native.cgroupdriver=systemd) systemd finds a container's devices through them: without them
a systemctl daemon-reload takes the GPUs away from running containers ("Failed to initialize
NVML: Unknown Error"). It is idempotent: a link that names the same device is left alone; a
link to anything else is replaced, saying what it pointed to; something that is not a link is
left alone and reported (exit status 1). --dry-run prints what it would do and changes nothing.
Run it after the driver loads (the package's gpu-runtime-dev-char-symlinks.service does).
`

func runSystem(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, systemUsage)
		return fmt.Errorf("%w: gpu-ctk system needs create-dev-char-symlinks", ErrUsage)
	}
	switch args[0] {
	case "create-dev-char-symlinks":
		return createDevCharSymlinks(args[1:], stdout, stderr)
	case "--help", "-help", "-h", "help":
		_, err := io.WriteString(stdout, systemUsage)
		return err
	}
	return fmt.Errorf("%w: unknown system command %q (gpu-ctk system --help)", ErrUsage, args[0])
}

// DevCharDir holds the links systemd resolves device numbers through.
const DevCharDir = "/dev/char"

// devCharLink is the /dev/char link of one device node, and what is there now.
type devCharLink struct {
	Link   string // /dev/char/195:0, in the device root
	Target string // ../nvidia0: relative, as udev writes them
	Node   discover.DeviceNode
	State  linkState
	Was    string // what is there instead (stateOther, stateBlocked)
}

type linkState int

const (
	stateMissing linkState = iota // no link: create it
	stateOK                       // a link to this node, or to another name of the same device
	stateOther                    // a link to something else, or to nothing: replace it
	stateBlocked                  // not a link: left alone
)

// devCharLinks returns the /dev/char link of every character device FindDeviceNodes finds
// under devRoot, sorted by device number, and what is at each link now.
func devCharLinks(devRoot string) ([]devCharLink, error) {
	nodes, err := discover.FindDeviceNodes(devRoot)
	if err != nil {
		return nil, err
	}
	var out []devCharLink
	for _, n := range nodes.Nodes {
		if n.Type != "c" {
			continue
		}
		l := devCharLink{
			Link:   fmt.Sprintf("%s/%d:%d", DevCharDir, n.Major, n.Minor),
			Target: "../" + strings.TrimPrefix(n.Path, "/dev/"),
			Node:   n,
		}
		l.State, l.Was = linkStateOf(devRoot, l)
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b devCharLink) int {
		if a.Node.Major != b.Node.Major {
			return int(a.Node.Major - b.Node.Major)
		}
		if a.Node.Minor != b.Node.Minor {
			return int(a.Node.Minor - b.Node.Minor)
		}
		return strings.Compare(a.Node.Path, b.Node.Path)
	})
	// Two names of one device (a copy of a node) share a link: the first keeps it.
	out = slices.CompactFunc(out, func(a, b devCharLink) bool { return a.Link == b.Link })
	return out, nil
}

// linkStateOf says what is at a link's place under devRoot. A link that resolves, within
// devRoot, to a character device of the node's number is as good as ours (udev's own links
// name the same devices).
func linkStateOf(devRoot string, l devCharLink) (linkState, string) {
	p := filepath.Join(devRoot, l.Link)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return stateMissing, ""
	}
	if err != nil {
		return stateBlocked, err.Error()
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return stateBlocked, "a " + fileKind(fi.Mode()) + ", not a symbolic link"
	}
	target, err := os.Readlink(p)
	if err != nil {
		return stateBlocked, err.Error()
	}
	if target == l.Target {
		return stateOK, ""
	}
	resolved := path.Join(path.Dir(l.Link), target)
	if path.IsAbs(target) {
		resolved = path.Clean(target)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(devRoot, resolved), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR &&
		int64(unix.Major(uint64(st.Rdev))) == l.Node.Major && int64(unix.Minor(uint64(st.Rdev))) == l.Node.Minor { //nolint:unconvert // Rdev width differs by arch
		return stateOK, target
	}
	return stateOther, target
}

// fileKind names a file type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

func createDevCharSymlinks(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("gpu-ctk system create-dev-char-symlinks", flag.ContinueOnError)
	dryRun := fset.Bool("dry-run", false, "print what would change; change nothing")
	if help, err := parseNoArgs(fset, args, systemUsage, stdout); help || err != nil {
		return err
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	root := cfg.Driver.DevRoot
	links, err := devCharLinks(root)
	if err != nil {
		return err
	}
	if len(links) == 0 {
		return fmt.Errorf("no NVIDIA device node under dev root %q: load the driver first (nvidia-modprobe), or check driver.dev-root", root)
	}
	verb := map[bool]string{true: "would create", false: "created"}[*dryRun]
	replace := map[bool]string{true: "would replace", false: "replaced"}[*dryRun]
	var b strings.Builder
	var blocked []string
	created, kept := 0, 0
	if !*dryRun {
		if err := os.MkdirAll(filepath.Join(root, DevCharDir), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Join(root, DevCharDir), err)
		}
	}
	for _, l := range links {
		p := filepath.Join(root, l.Link)
		switch l.State {
		case stateOK:
			kept++
			continue
		case stateBlocked:
			blocked = append(blocked, fmt.Sprintf("%s is %s: left alone; remove it and run this again to link %s", p, l.Was, l.Node.Path))
			continue
		}
		if !*dryRun {
			if err := symlinkReplace(l.Target, p); err != nil {
				return err
			}
		}
		created++
		if l.State == stateOther {
			fmt.Fprintf(&b, "%s %s -> %s (it pointed to %s, not a node of %d:%d)\n", replace, p, l.Target, l.Was, l.Node.Major, l.Node.Minor)
		} else {
			fmt.Fprintf(&b, "%s %s -> %s\n", verb, p, l.Target)
		}
	}
	if *dryRun {
		fmt.Fprintf(&b, "dry run, nothing changed: %d link(s) to create or replace, %d already in place, under %s\n", created, kept, filepath.Join(root, DevCharDir))
	} else {
		fmt.Fprintf(&b, "%d link(s) created or replaced, %d already in place, under %s\n", created, kept, filepath.Join(root, DevCharDir))
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return err
	}
	if len(blocked) > 0 {
		return errors.New(strings.Join(blocked, "\n"))
	}
	return nil
}

// symlinkReplace makes link a symbolic link to target, replacing what is there in one
// rename: a link beside it, then renamed over it.
func symlinkReplace(target, link string) error {
	tmp := filepath.Join(filepath.Dir(link), ".gpu-ctk-"+filepath.Base(link))
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("create link %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("create link %s: %w", link, err)
	}
	return nil
}

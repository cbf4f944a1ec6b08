package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DeviceNode is a device node found under the device root, as stat reads it.
type DeviceNode struct {
	Path     string // path in a container, e.g. /dev/nvidia0
	HostPath string // where it was found on the host (under the device root)
	Type     string // "c" or "b"
	Major    int64
	Minor    int64
	FileMode fs.FileMode
	UID      uint32
	GID      uint32
}

// DeviceNodes holds the NVIDIA device nodes found under a device root.
type DeviceNodes struct {
	Root string
	// Nodes are valid character devices, by container path (/dev/nvidia0).
	Nodes map[string]DeviceNode
	// Invalid are /dev/nvidia* entries that are not character devices, with the reason.
	Invalid map[string]error
}

// FindDeviceNodes reads <devRoot>/dev/nvidia* (not following symlinks). A missing /dev is
// an empty result, not an error: the planner reports what it needed and did not find.
func FindDeviceNodes(devRoot string) (DeviceNodes, error) {
	dn := DeviceNodes{Root: devRoot, Nodes: map[string]DeviceNode{}, Invalid: map[string]error{}}
	devDir := filepath.Join(devRoot, "dev")
	entries, err := os.ReadDir(devDir)
	if errors.Is(err, fs.ErrNotExist) {
		return dn, nil
	}
	if err != nil {
		return dn, fmt.Errorf("read device directory %s: %w", devDir, err)
	}
	add := func(p string) {
		node, err := StatDeviceNode(devRoot, p)
		switch {
		case err == nil:
			dn.Nodes[p] = node
		case !errors.Is(err, fs.ErrNotExist):
			dn.Invalid[p] = err
		}
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "nvidia") {
			continue
		}
		containerPath := path.Join("/dev", e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "nvidia-caps") {
			add(containerPath)
			continue
		}
		// /dev/nvidia-caps/nvidia-capN and /dev/nvidia-caps-imex-channels/channelN.
		sub, err := os.ReadDir(filepath.Join(devDir, e.Name()))
		if err != nil {
			return dn, fmt.Errorf("read device directory %s: %w", filepath.Join(devDir, e.Name()), err)
		}
		for _, s := range sub {
			add(path.Join(containerPath, s.Name()))
		}
	}
	return dn, nil
}

// StatDeviceNode stats containerPath (/dev/nvidiactl) under devRoot: a symlink or anything
// but a character or block device is ErrDeviceNode.
func StatDeviceNode(devRoot, containerPath string) (DeviceNode, error) {
	hostPath := filepath.Join(devRoot, containerPath)
	var st unix.Stat_t
	if err := unix.Lstat(hostPath, &st); err != nil {
		return DeviceNode{}, fmt.Errorf("stat device node %s: %w", hostPath, err)
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	case unix.S_IFLNK:
		return DeviceNode{}, fmt.Errorf("%w: %s is a symlink, not a device node", ErrDeviceNode, hostPath)
	default:
		return DeviceNode{}, fmt.Errorf("%w: %s is not a device node (mode %#o)", ErrDeviceNode, hostPath, st.Mode&unix.S_IFMT)
	}
	return DeviceNode{
		Path:     containerPath,
		HostPath: hostPath,
		Type:     typ,
		Major:    int64(unix.Major(uint64(st.Rdev))), //nolint:unconvert // Rdev width differs by arch
		Minor:    int64(unix.Minor(uint64(st.Rdev))), //nolint:unconvert // Rdev width differs by arch
		FileMode: fs.FileMode(st.Mode & 0o777),
		UID:      st.Uid,
		GID:      st.Gid,
	}, nil
}

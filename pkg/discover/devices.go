package discover

import (
	"errors"
	"fmt"
	"io"
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

// The device nodes of DGX/HGX features beside the GPUs' (NVIDIA_GDRCOPY, NVIDIA_MOFED): the
// GDRCopy driver's node, and the InfiniBand directory whose uverbs* and rdma_cm nodes MOFED
// gives. GPUDirect Storage's /dev/nvidia-fs* and NVSwitch's /dev/nvidia-nvswitch* are
// /dev/nvidia* nodes.
const (
	GDRCopyNode   = "/dev/gdrdrv"
	InfinibandDir = "/dev/infiniband"
	RDMACMNode    = InfinibandDir + "/rdma_cm"
	UVerbsPrefix  = InfinibandDir + "/uverbs"
	maxDirEntries = 4096 // a device directory is small; a bigger one is not read past this
)

// FindDeviceNodes reads <devRoot>/dev/nvidia* (and the nvidia-caps directories), the GDRCopy
// node and the InfiniBand verbs and RDMA CM nodes, not following symlinks. A missing /dev is
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
		switch {
		case "/dev/"+e.Name() == GDRCopyNode:
			add(GDRCopyNode)
			continue
		case "/dev/"+e.Name() == InfinibandDir && e.IsDir():
			if err := readInfiniband(devRoot, add); err != nil {
				return dn, err
			}
			continue
		case !strings.HasPrefix(e.Name(), "nvidia"):
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

// readInfiniband adds the uverbs* and rdma_cm nodes of <devRoot>/dev/infiniband (the other
// nodes there, umad* and issm*, are for subnet management, not for MOFED's verbs), reading at
// most maxDirEntries entries.
func readInfiniband(devRoot string, add func(string)) error {
	dir := filepath.Join(devRoot, InfinibandDir)
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("read device directory %s: %w", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(maxDirEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read device directory %s: %w", dir, err)
	}
	for _, name := range names {
		p := path.Join(InfinibandDir, name)
		if p == RDMACMNode || strings.HasPrefix(p, UVerbsPrefix) {
			add(p)
		}
	}
	return nil
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

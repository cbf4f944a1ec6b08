package discover

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Topology is where a GPU sits on the host's buses, from sysfs: what a scheduler needs to
// place devices together (one PCIe root, one NUMA node).
type Topology struct {
	// PCIeRoot is the PCI root complex the GPU hangs under, as Kubernetes'
	// resource.kubernetes.io/pcieRoot names it: "pci0000:00".
	PCIeRoot string
	// NUMANode is the GPU's NUMA node; -1 when the platform says none (one node).
	NUMANode int
}

// pcieRootRE is a PCI root complex's sysfs directory name: pci<domain>:<bus>.
var pcieRootRE = regexp.MustCompile(`^pci[0-9a-f]{4,8}:[0-9a-f]{2}$`)

// maxSysfsValue bounds a sysfs attribute read: numa_node is a few bytes.
const maxSysfsValue = 64

// ReadTopology reads the topology of the PCI device busID (NVML's form, "00000000:07:00.0")
// under sysRoot ("/" on a host): /sys/bus/pci/devices/<0000:07:00.0> is a link into
// /sys/devices/pci<domain>:<bus>/…, whose first directory is the root complex, and the
// device's numa_node file its NUMA node. Nothing is followed outside sysRoot/sys/devices.
func ReadTopology(sysRoot, busID string) (Topology, error) {
	bus, ok := ProcBusID(busID)
	if !ok {
		return Topology{}, fmt.Errorf("PCI bus id %q is not of the form 00000000:07:00.0", busID)
	}
	root := filepath.Clean(sysRoot)
	link := filepath.Join(root, "sys/bus/pci/devices", bus)
	target, err := os.Readlink(link)
	if err != nil {
		return Topology{}, fmt.Errorf("PCI device %s: %w: check driver.sys-root", bus, err)
	}
	// Resolved lexically, as sysfs lays it out: ../../../devices/pci0000:00/0000:00:01.0/<bus>.
	if path.IsAbs(target) {
		target = filepath.Join(root, target)
	} else {
		target = filepath.Join(filepath.Dir(link), target)
	}
	rel, err := filepath.Rel(filepath.Join(root, "sys/devices"), target)
	first, _, _ := strings.Cut(rel, "/")
	if err != nil || !pcieRootRE.MatchString(first) || path.Base(rel) != bus {
		return Topology{}, fmt.Errorf("PCI device %s: %s links to %s, not to /sys/devices/pci<domain>:<bus>/…/%s", bus, link, target, bus)
	}
	t := Topology{PCIeRoot: first, NUMANode: -1}
	data, err := readSmall(filepath.Join(target, "numa_node"))
	if err != nil {
		return t, fmt.Errorf("PCI device %s: NUMA node: %w", bus, err)
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(data)))
	if err != nil || n < -1 {
		return t, fmt.Errorf("PCI device %s: NUMA node %q is not a number", bus, bytes.TrimSpace(data))
	}
	t.NUMANode = n
	return t, nil
}

// readSmall reads a sysfs attribute, at most maxSysfsValue bytes, refusing anything but a
// regular file (a FIFO planted there would block the read).
func readSmall(p string) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxSysfsValue+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSysfsValue {
		return nil, errors.New(p + " is longer than a sysfs attribute")
	}
	return data, nil
}

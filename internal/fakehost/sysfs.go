package fakehost

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// pcieRootRE is a PCI root complex's sysfs name.
var pcieRootRE = regexp.MustCompile(`^pci[0-9a-f]{4}:[0-9a-f]{2}$`)

// DefaultPCIeRoot is the PCI root complex of GPU index i when GPU.PCIeRoot does not say: two
// GPUs per root, as on a DGX A100 (pci0000:00 for GPUs 0 and 1, pci0000:40 for 2 and 3, …),
// in the PCI domain of its bus id (defaultBusID).
func DefaultPCIeRoot(i int) string {
	return fmt.Sprintf("pci%04x:%02x", i/8, ((i%8)/2)*0x40)
}

// PCIeRootOf is the PCIe root GPU g hangs under in the fake sysfs.
func PCIeRootOf(g GPU) string {
	if g.PCIeRoot != "" {
		return g.PCIeRoot
	}
	return DefaultPCIeRoot(g.Index)
}

// writeSysfs lays out each GPU's PCI device as the kernel does: the device directory
// sys/devices/<root>/<port>/<bus id> with its numa_node, below a root port that stands for
// the PCIe switches, and the link sys/bus/pci/devices/<bus id> to it (relative, as sysfs's).
func (h *Host) writeSysfs() error {
	links := filepath.Join(h.SysRoot, "sys/bus/pci/devices")
	if err := os.MkdirAll(links, 0o755); err != nil {
		return err
	}
	for _, g := range h.Options.GPUs {
		b, err := parseBusID(g.BusID)
		if err != nil {
			return err
		}
		bus := fmt.Sprintf("%04x:%02x:%02x.%x", b.domain, b.bus, b.device, b.function)
		root := PCIeRootOf(g)
		port := fmt.Sprintf("%s:%02x.0", root[len("pci"):], g.Index%32+1)
		dev := filepath.Join(h.SysRoot, "sys/devices", root, port, bus)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dev, "numa_node"), []byte(strconv.Itoa(g.NUMANode)+"\n"), 0o444); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join("../../../devices", root, port, bus), filepath.Join(links, bus)); err != nil {
			return err
		}
	}
	return nil
}

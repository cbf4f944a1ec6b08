package discover

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The driver's /proc files about MIG capabilities, relative to the proc root.
const (
	ProcDevices      = "proc/devices"
	ProcMIGMinors    = "proc/driver/nvidia-caps/mig-minors"
	ProcCapabilities = "proc/driver/nvidia/capabilities"
)

// ErrProcFormat marks a driver /proc file this package cannot read.
var ErrProcFormat = errors.New("unexpected driver /proc file")

// CapPath is the capability, relative to ProcCapabilities, of a GPU instance or (ci >= 0) a
// compute instance of the GPU with minor gpuMinor: "gpu0/mig/gi1/access", "gpu0/mig/gi1/ci0/access".
func CapPath(gpuMinor, gi, ci int) string {
	p := fmt.Sprintf("gpu%d/mig/gi%d", gpuMinor, gi)
	if ci >= 0 {
		p += fmt.Sprintf("/ci%d", ci)
	}
	return p + "/access"
}

// ReadMIGCaps reads how the driver under procRoot exposes MIG capabilities and fills in the
// capability minors of gpus' MIG devices (in place): the nvidia-caps major from /proc/devices,
// the minors of the capabilities that exist (/proc/driver/nvidia/capabilities/…/access) from
// mig-minors, which lists every possible one, else from their DeviceFileMinor line. A malformed
// file is an error naming file and line; an unlisted capability gets minor 0, never a MIG
// capability's. Hosts without MIG read nothing.
func ReadMIGCaps(procRoot string, gpus []GPU) (MIGCaps, error) {
	var caps MIGCaps
	needed := false
	for _, g := range gpus {
		needed = needed || g.MIGCapable || len(g.MIGDevices) > 0
	}
	if !needed {
		return caps, nil
	}
	var err error
	if caps.Major, err = charMajor(filepath.Join(procRoot, ProcDevices), "nvidia-caps"); err != nil {
		return caps, err
	}
	minors, err := readMIGMinors(filepath.Join(procRoot, ProcMIGMinors))
	if err != nil {
		return caps, err
	}
	capsDir := filepath.Join(procRoot, ProcCapabilities)
	minor := func(name string) (int, error) {
		file := filepath.Join(capsDir, filepath.FromSlash(name))
		if _, err := os.Stat(file); err != nil {
			return 0, nil // the capability does not exist (yet): mig-minors lists every possible one
		}
		if m, ok := minors[name]; ok {
			return m, nil
		}
		return accessMinor(file)
	}
	set := func(dst *int, name string) { // until the first error
		if err == nil {
			*dst, err = minor(name)
		}
	}
	set(&caps.Config, "mig/config")
	set(&caps.Monitor, "mig/monitor")
	for i := range gpus {
		for j := range gpus[i].MIGDevices {
			d := &gpus[i].MIGDevices[j]
			set(&d.GICap, CapPath(gpus[i].Minor, d.GI, -1))
			set(&d.CICap, CapPath(gpus[i].Minor, d.GI, d.CI))
		}
	}
	return caps, err
}

// charMajor returns the major of the character device driver named name in /proc/devices,
// 0 when it is not listed.
func charMajor(file, name string) (int, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", file, err)
	}
	inChar := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case text == "":
			continue
		case text == "Character devices:":
			inChar = true
			continue
		case strings.HasSuffix(text, "devices:"):
			inChar = false
			continue
		}
		fields := strings.Fields(text)
		major := -1
		if len(fields) == 2 {
			major, err = strconv.Atoi(fields[0])
		}
		if major < 0 || err != nil {
			return 0, fmt.Errorf("%w: %s line %d: %q is not \"<major> <name>\"", ErrProcFormat, file, line, text)
		}
		if inChar && fields[1] == name {
			return major, nil
		}
	}
	return 0, nil
}

// readMIGMinors reads mig-minors ("config 1", "gpu0/gi1/access 12"), keyed by the path under
// ProcCapabilities ("mig/config", "gpu0/mig/gi1/access"); a missing file is an empty map.
func readMIGMinors(file string) (map[string]int, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	minors := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		fields := strings.Fields(text)
		var minor int
		if len(fields) == 2 {
			minor, err = strconv.Atoi(fields[1])
		}
		if len(fields) != 2 || err != nil || minor < 0 {
			return nil, fmt.Errorf("%w: %s line %d: %q is not \"<capability> <minor>\"", ErrProcFormat, file, line, text)
		}
		name := fields[0]
		switch name {
		case "config", "monitor":
			name = "mig/" + name
		default:
			gpu, rest, ok := strings.Cut(name, "/")
			if !ok || !strings.HasPrefix(gpu, "gpu") || !strings.HasPrefix(rest, "gi") || !strings.HasSuffix(rest, "/access") {
				continue // a capability this version does not use (a newer driver's): not an error
			}
			name = gpu + "/mig/" + rest
		}
		minors[name] = minor
	}
	return minors, nil
}

// accessMinor reads the DeviceFileMinor line of a capability's access file.
func accessMinor(file string) (int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", file, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			return 0, fmt.Errorf("%w: %s line %d: %q is not \"<key>: <value>\"", ErrProcFormat, file, line, sc.Text())
		}
		if strings.TrimSpace(key) != "DeviceFileMinor" {
			continue
		}
		minor, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || minor <= 0 {
			return 0, fmt.Errorf("%w: %s line %d: DeviceFileMinor %q is not a capability's minor", ErrProcFormat, file, line, strings.TrimSpace(value))
		}
		return minor, nil
	}
	return 0, fmt.Errorf("%w: %s has no DeviceFileMinor line", ErrProcFormat, file)
}

package fakehost

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// readProc reads a file under the host's proc root.
func readProc(t *testing.T, h *Host, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(h.ProcRoot, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(data)
}

// procDevicesMajors parses /proc/devices as consumers do: "<major> <name>" lines of the
// "Character devices:" section.
func procDevicesMajors(t *testing.T, text string) map[string]int {
	t.Helper()
	majors := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(text))
	section := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, ":") {
			section = line
			continue
		}
		if section != "Character devices:" || line == "" {
			continue
		}
		var major int
		var name string
		if n, err := fmt.Sscanf(line, "%d %s", &major, &name); n != 2 || err != nil {
			t.Fatalf("/proc/devices line %q: %v", line, err)
		}
		if _, dup := majors[name]; dup && strings.HasPrefix(name, "nvidia") {
			t.Errorf("/proc/devices lists %s twice", name)
		}
		majors[name] = major
	}
	return majors
}

// keyValues parses "Key: \t value" lines (information and capability files).
func keyValues(text string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		k, v, _ := strings.Cut(line, ":")
		kv[k] = strings.TrimSpace(v)
	}
	return kv
}

// capNode is a MIG capability as the proc files and device nodes describe it.
type capNode struct {
	Name         string // mig-minors name: "config", "gpu0/gi1/access"
	Minor, Mode  int
	NodeMinor    int // -1 without a node
	NodeMode     int
	NodeMajorsOK bool
}

func TestProc(t *testing.T) {
	requireBuildable(t)
	excludedMIG := migHost(t)
	excludedMIG.GPUs[3].Excluded = true
	excludedMIG.GPUs[3].Minor, excludedMIG.GPUs[4].Minor = 9, 3 // minors need not follow indexes
	excludedMIG.CapsMajor = 508
	procInterface := migHost(t)
	procInterface.MIGCapsProcInterface = true
	testCases := []struct {
		description string
		opts        Options
		wantCaps    int // nvidia-caps major, 0 for none
	}{
		{"MIG devices, an excluded GPU, another caps major", excludedMIG, 508},
		{"the /proc interface for MIG capabilities", procInterface, 0},
		{"no GPU in MIG mode", Default(2), DefaultCapsMajor},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := buildHost(t, tc.opts)
			checkProc(t, h, tc.wantCaps)
		})
	}
}

func checkProc(t *testing.T, h *Host, wantCaps int) {
	t.Helper()
	majors := procDevicesMajors(t, readProc(t, h, ProcDevicesRel))
	for name, want := range map[string]int{"nvidia-frontend": NVIDIAMajor, "nvidia-uvm": UVMMajor,
		"nvidia-caps-imex-channels": IMEXChannelsMajor, "nvidia-caps": wantCaps} {
		if got := majors[name]; got != want {
			t.Errorf("/proc/devices: %s major %d, want %d", name, got, want)
		}
	}
	if h.CapsMajor != wantCaps {
		t.Errorf("Host.CapsMajor = %d, want %d", h.CapsMajor, wantCaps)
	}

	version := readProc(t, h, ProcVersionRel)
	versionRE := regexp.MustCompile(`^NVRM version: NVIDIA UNIX x86_64 Kernel Module  ` + regexp.QuoteMeta(h.Options.DriverVersion) +
		`  [A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d UTC \d{4}\nGCC version:  gcc version .+\n$`)
	if !versionRE.MatchString(version) {
		t.Errorf("version file:\n%s", version)
	}

	// One information file per GPU, named by its bus id in lower case with a 4-digit domain.
	entries, err := os.ReadDir(filepath.Join(h.ProcRoot, ProcGPUsRel))
	if err != nil {
		t.Fatal(err)
	}
	var dirs, wantDirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	for _, g := range h.Options.GPUs {
		b, _ := parseBusID(g.BusID)
		dir := strings.ToLower(b.legacy)
		wantDirs = append(wantDirs, dir)
		info := keyValues(readProc(t, h, filepath.Join(ProcGPUsRel, dir, "information")))
		excluded := map[bool]string{false: "No", true: "Yes"}[g.Excluded]
		if info["Model"] != g.Name || info["Device Minor"] != strconv.Itoa(g.Minor) || info["Bus Location"] != dir ||
			info["GPU Excluded"] != excluded {
			t.Errorf("GPU %d information = %q, want model %q, minor %d, bus %s, excluded %s", g.Index, info, g.Name, g.Minor, dir, excluded)
		}
		if _, hasUUID := info["GPU UUID"]; hasUUID == g.Excluded || (!g.Excluded && info["GPU UUID"] != g.UUID) {
			t.Errorf("GPU %d information: UUID %q for an excluded GPU: %v", g.Index, info["GPU UUID"], g.Excluded)
		}
	}
	sort.Strings(wantDirs)
	if !reflect.DeepEqual(dirs, wantDirs) {
		t.Errorf("proc/driver/nvidia/gpus holds %v, want %v", dirs, wantDirs)
	}

	// mig-minors: every capability of 32 GPUs, numbered in order.
	minors := map[string]int{}
	migMinorsText, err := os.ReadFile(filepath.Join(h.ProcRoot, ProcMIGMinorsRel))
	switch {
	case wantCaps == 0:
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("mig-minors with the /proc interface: %v", err)
		}
	case err != nil:
		t.Fatal(err)
	default:
		lines := strings.Split(strings.TrimSuffix(string(migMinorsText), "\n"), "\n")
		if len(lines) != 4322 || lines[0] != "config 1" || lines[1] != "monitor 2" || lines[2] != "gpu0/gi0/access 3" ||
			lines[3] != "gpu0/gi0/ci0/access 4" || lines[len(lines)-1] != "gpu31/gi14/ci7/access 4322" {
			t.Errorf("mig-minors: %d lines, first %q, last %q", len(lines), lines[:4], lines[len(lines)-1])
		}
		for i, line := range lines {
			name, minor, ok := strings.Cut(line, " ")
			if n, err := strconv.Atoi(minor); !ok || err != nil || n != i+1 {
				t.Fatalf("mig-minors line %d: %q", i+1, line)
			}
			minors[name] = i + 1
		}
	}

	// The capability files agree with mig-minors and with the device nodes.
	got := map[string]capNode{}
	capsDir := filepath.Join(h.ProcRoot, ProcCapabilitiesRel)
	err = filepath.WalkDir(capsDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(capsDir, path)
		name := strings.TrimPrefix(strings.Replace(rel, "/mig/", "/", 1), "mig/") // mig-minors' naming
		kv := keyValues(readProc(t, h, filepath.Join(ProcCapabilitiesRel, rel)))
		c := capNode{Name: name, NodeMinor: -1}
		c.Minor, _ = strconv.Atoi(kv["DeviceFileMinor"])
		c.Mode, _ = strconv.Atoi(kv["DeviceFileMode"])
		if kv["DeviceFileModify"] != "1" || len(kv) != 3 {
			t.Errorf("%s: %q", rel, kv)
		}
		if fi, err := os.Stat(path); err != nil || int(fi.Mode().Perm()) != c.Mode {
			t.Errorf("%s: file mode %v, want %o", rel, fi.Mode(), c.Mode)
		}
		if wantCaps != 0 && minors[name] != c.Minor {
			t.Errorf("%s: minor %d, mig-minors says %d", rel, c.Minor, minors[name])
		}
		var st unix.Stat_t
		node := filepath.Join(h.DevRoot, "dev/nvidia-caps/nvidia-cap"+strconv.Itoa(c.Minor))
		if err := unix.Stat(node, &st); err == nil {
			c.NodeMinor, c.NodeMode = int(unix.Minor(st.Rdev)), int(st.Mode&0o777)
			c.NodeMajorsOK = st.Mode&unix.S_IFMT == unix.S_IFCHR && int(unix.Major(st.Rdev)) == majors["nvidia-caps"]
		}
		got[name] = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// What must exist: config, monitor, and the access capabilities of the existing instances,
	// with nodes when MIG is in use and the driver has device nodes for capabilities.
	inMIGMode := false
	for _, g := range h.Options.GPUs {
		inMIGMode = inMIGMode || g.MIGCurrent
	}
	withNodes := inMIGMode && wantCaps != 0
	want := map[string]capNode{}
	add := func(name string, minor, mode int) {
		c := capNode{Name: name, Minor: minor, Mode: mode, NodeMinor: -1}
		if withNodes {
			c.NodeMinor, c.NodeMode, c.NodeMajorsOK = minor, mode, true
		}
		want[name] = c
	}
	add("config", 1, 0o400)
	add("monitor", 2, 0o444)
	for _, m := range h.MIGDevices() {
		add(fmt.Sprintf("gpu%d/gi%d/access", m.GPUMinor, m.GI), m.GICapMinor, 0o444)
		add(fmt.Sprintf("gpu%d/gi%d/ci%d/access", m.GPUMinor, m.GI, m.CI), m.CICapMinor, 0o444)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("capabilities:\n%s\nwant:\n%s", jsonString(got), jsonString(want))
	}

	// Every managed GPU has its capabilities/gpu<minor>/mig directory; excluded GPUs none.
	for _, g := range h.Options.GPUs {
		_, err := os.Stat(filepath.Join(capsDir, "gpu"+strconv.Itoa(g.Minor), "mig"))
		if (err == nil) == g.Excluded {
			t.Errorf("GPU %d (excluded %v): capabilities/gpu%d/mig: %v", g.Index, g.Excluded, g.Minor, err)
		}
	}

	// The caps nodes are exactly those, and CapDeviceNodes lists them.
	nodes, err := os.ReadDir(filepath.Join(h.DevRoot, "dev/nvidia-caps"))
	if !withNodes {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("dev/nvidia-caps exists: %v, %v", nodes, err)
		}
	} else if len(nodes) != len(want) {
		t.Errorf("dev/nvidia-caps holds %d nodes, want %d", len(nodes), len(want))
	}
	var listed []string
	for _, n := range h.CapDeviceNodes() {
		listed = append(listed, fmt.Sprintf("%s %d:%d %o", n.RelPath, n.Major, n.Minor, n.Mode))
	}
	var wantListed []string
	for _, c := range want {
		if withNodes {
			wantListed = append(wantListed, fmt.Sprintf("dev/nvidia-caps/nvidia-cap%d %d:%d %o", c.Minor, wantCaps, c.Minor, c.Mode))
		}
	}
	sort.Strings(wantListed)
	sort.Slice(listed, func(i, j int) bool { return listed[i] < listed[j] })
	if !reflect.DeepEqual(listed, wantListed) {
		t.Errorf("CapDeviceNodes = %q, want %q", listed, wantListed)
	}
}

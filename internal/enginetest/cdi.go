package enginetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// CDIProbe is the command a container given CDI devices runs. Besides Probe's facts it lists
// the MIG capability nodes and every character-device cgroup rule, and prints each mount:
//
//	dev <path> <major-hex> <minor-hex>   every /dev/nvidia* and /dev/nvidia-caps/* character device
//	cgroup-readable                      the container sees its devices cgroup (cgroup v1)
//	cgroup <rule>                        every character-device cgroup rule (c M:m access)
//	mount <path> <options>               every mount point, with its per-mount options
//	ldcache-libcuda                      the container's /etc/ld.so.cache lists libcuda.so.1
//	soname-libcuda                       /usr/lib/x86_64-linux-gnu/libcuda.so.1 exists
//	probe-done                           the last line: the script ran to the end
const CDIProbe = `for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -c "$f" ] && echo "dev $f $(stat -c '%t %T' "$f")"; done
if [ -r /sys/fs/cgroup/devices/devices.list ]; then echo cgroup-readable; grep -E '^c [0-9]+:[0-9]+ ' /sys/fs/cgroup/devices/devices.list | sed 's/^/cgroup /'; fi
awk '{print "mount", $5, $6}' /proc/self/mountinfo
grep -q libcuda.so.1 /etc/ld.so.cache 2>/dev/null && echo ldcache-libcuda
[ -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] && echo soname-libcuda
echo probe-done`

// CDIWant is what a container given devices from a spec `gpu-ctk cdi generate` wrote for a
// fake host must see: the whole GPUs (by GPU.Index) and MIG devices (of Host.MIGDevices) the
// devices name, and the spec's mounts. Empty GPUs and MIGs: no GPU at all.
type CDIWant struct {
	GPUs []int
	MIGs []fakehost.MIGInfo
	// Mounts are the container paths of the spec's mounts (every one read-only); checked only
	// when the container gets a GPU.
	Mounts []string
}

// WantCDIDevices checks a CDIProbe's output against the fake host: exactly the device nodes,
// with the host's numbers, of the GPUs and MIG devices wanted (a MIG device: its parent's node
// and its GPU and compute instance capability nodes) plus the control, UVM and modeset nodes
// (the spec carries every capability's edits), a cgroup allow rule for each on cgroup v1,
// every spec mount read-only, and libcuda in the loader cache (the spec's createContainer
// hook ran).
func WantCDIDevices(t testing.TB, host *fakehost.Host, out string, want CDIWant) {
	t.Helper()
	f := parseFacts(out)
	if !f["probe-done"] {
		t.Fatalf("the probe did not run to the end:\n%s", out)
	}
	gpu := len(want.GPUs)+len(want.MIGs) > 0
	var devs, rules []string
	node := func(path string, major, minor int) {
		d := fmt.Sprintf("dev %s %x %x", path, major, minor)
		if !slices.Contains(devs, d) {
			devs = append(devs, d)
			rules = append(rules, fmt.Sprintf("cgroup c %d:%d rwm", major, minor))
		}
	}
	for _, i := range want.GPUs {
		g := host.Options.GPUs[i]
		node(fmt.Sprintf("/dev/nvidia%d", g.Minor), fakehost.NVIDIAMajor, g.Minor)
	}
	for _, m := range want.MIGs {
		node(fmt.Sprintf("/dev/nvidia%d", m.GPUMinor), fakehost.NVIDIAMajor, m.GPUMinor)
		node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m.GICapMinor), host.CapsMajor, m.GICapMinor)
		node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m.CICapMinor), host.CapsMajor, m.CICapMinor)
	}
	if gpu {
		node("/dev/nvidiactl", fakehost.NVIDIAMajor, fakehost.NVIDIACtlMinor)
		node("/dev/nvidia-modeset", fakehost.NVIDIAMajor, fakehost.NVIDIAModesetMinor)
		node("/dev/nvidia-uvm", host.UVMMajor, 0)
		node("/dev/nvidia-uvm-tools", host.UVMMajor, 1)
	}
	slices.Sort(devs)
	slices.Sort(rules)
	if got := f.prefixed("dev "); !slices.Equal(got, devs) {
		t.Errorf("device nodes in the container:\n  got  %q\n  want %q\nprobe output:\n%s", got, devs, out)
	}
	if cgroupV1Devices() {
		if !f["cgroup-readable"] {
			t.Errorf("the container cannot read /sys/fs/cgroup/devices/devices.list: its device cgroup rules are not checked\nprobe output:\n%s", out)
		} else {
			var got []string
			for _, r := range f.prefixed("cgroup ") {
				var major int
				if _, err := fmt.Sscanf(r, "cgroup c %d:", &major); err == nil &&
					(major == fakehost.NVIDIAMajor || major == host.UVMMajor || major == host.CapsMajor) {
					got = append(got, r)
				}
			}
			if !slices.Equal(got, rules) {
				t.Errorf("device cgroup rules for NVIDIA majors:\n  got  %q\n  want %q\nprobe output:\n%s", got, rules, out)
			}
		}
	}
	mounts := map[string]string{}
	for _, l := range f.prefixed("mount ") {
		if fields := strings.Fields(l); len(fields) == 3 {
			mounts[fields[1]] = fields[2]
		}
	}
	if gpu {
		if len(want.Mounts) == 0 {
			t.Errorf("the spec has no mounts: the test has nothing to check them against")
		}
		for _, m := range want.Mounts {
			opts, ok := mounts[m]
			switch {
			case !ok:
				t.Errorf("the spec's mount %s is not mounted in the container", m)
			case !slices.Contains(strings.Split(opts, ","), "ro"):
				t.Errorf("the spec's mount %s is mounted %s, not read-only", m, opts)
			}
		}
	} else {
		for m := range mounts {
			if strings.Contains(m, "nvidia") || strings.Contains(m, "libcuda") {
				t.Errorf("a container without GPUs has the driver mount %s", m)
			}
		}
	}
	for _, marker := range []string{"ldcache-libcuda", "soname-libcuda"} {
		if f[marker] != gpu {
			t.Errorf("%s = %v, want %v (libcuda.so.1 in the container's ld.so.cache / on disk: the spec's createContainer hook ran)\nprobe output:\n%s", marker, f[marker], gpu, out)
		}
	}
}

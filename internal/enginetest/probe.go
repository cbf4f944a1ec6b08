package enginetest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// Probe is the command a suite's containers run. It prints facts about the container, one a line:
//
//	dev <path> <major-hex> <minor-hex>   every /dev/nvidia* character device
//	cgroup-readable                      the container sees its devices cgroup (cgroup v1)
//	cgroup <rule>                        every device cgroup rule naming major 195 or 235
//	ldcache-libcuda                      the container's /etc/ld.so.cache lists libcuda.so.1
//	soname-libcuda                       /usr/lib/x86_64-linux-gnu/libcuda.so.1 exists
//	probe-done                           the last line: the script ran to the end
const Probe = `for f in /dev/nvidia*; do [ -c "$f" ] && echo "dev $f $(stat -c '%t %T' "$f")"; done
if [ -r /sys/fs/cgroup/devices/devices.list ]; then echo cgroup-readable; grep -E '^c (195|235):' /sys/fs/cgroup/devices/devices.list | sed 's/^/cgroup /'; fi
grep -q libcuda.so.1 /etc/ld.so.cache 2>/dev/null && echo ldcache-libcuda
[ -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] && echo soname-libcuda
echo probe-done`

// facts is a probe's output as a set of lines.
type facts map[string]bool

func parseFacts(out string) facts {
	f := facts{}
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			f[l] = true
		}
	}
	return f
}

func (f facts) prefixed(prefix string) []string {
	var out []string
	for l := range f {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// WantGPUs checks, from a Probe's output, that the container got exactly the GPUs with the
// given indexes of the fake host (with the control and UVM nodes, default capabilities), or no
// GPU at all when gpus is empty.
func WantGPUs(t testing.TB, host *fakehost.Host, out string, gpus ...int) {
	t.Helper()
	f := parseFacts(out)
	if !f["probe-done"] {
		t.Fatalf("the probe did not run to the end:\n%s", out)
	}
	var devs, rules []string
	if len(gpus) > 0 {
		for _, i := range gpus {
			g := host.Options.GPUs[i]
			devs = append(devs, fmt.Sprintf("dev /dev/nvidia%d c3 %x", g.Minor, g.Minor))
			rules = append(rules, fmt.Sprintf("cgroup c %d:%d rwm", fakehost.NVIDIAMajor, g.Minor))
		}
		devs = append(devs, "dev /dev/nvidiactl c3 ff", fmt.Sprintf("dev /dev/nvidia-uvm %x 0", host.UVMMajor), fmt.Sprintf("dev /dev/nvidia-uvm-tools %x 1", host.UVMMajor))
		rules = append(rules, fmt.Sprintf("cgroup c %d:%d rwm", fakehost.NVIDIAMajor, fakehost.NVIDIACtlMinor),
			fmt.Sprintf("cgroup c %d:0 rwm", host.UVMMajor), fmt.Sprintf("cgroup c %d:1 rwm", host.UVMMajor))
	}
	slices.Sort(devs)
	slices.Sort(rules)
	if got := f.prefixed("dev "); !slices.Equal(got, devs) {
		t.Errorf("device nodes in the container:\n  got  %q\n  want %q\nprobe output:\n%s", got, devs, out)
	}
	// Device cgroup rules can be read only on cgroup v1 (devices.list); every engine here
	// mounts the container's own devices cgroup there (ctr when asked: see ctrRun).
	if cgroupV1Devices() {
		if !f["cgroup-readable"] {
			t.Errorf("the container cannot read /sys/fs/cgroup/devices/devices.list: its device cgroup rules are not checked\nprobe output:\n%s", out)
		} else if got := f.prefixed("cgroup "); !slices.Equal(got, rules) {
			t.Errorf("device cgroup rules for NVIDIA majors:\n  got  %q\n  want %q\nprobe output:\n%s", got, rules, out)
		}
	}
	for _, marker := range []string{"ldcache-libcuda", "soname-libcuda"} {
		if f[marker] != (len(gpus) > 0) {
			t.Errorf("%s = %v, want %v (libcuda.so.1 in the container's ld.so.cache / on disk)\nprobe output:\n%s", marker, f[marker], len(gpus) > 0, out)
		}
	}
}

// cgroupV1Devices reports whether the host has cgroup v1's devices controller, whose rules a
// container can read (devices.list); cgroup v2 keeps them in a BPF program.
func cgroupV1Devices() bool {
	_, err := os.Stat("/sys/fs/cgroup/devices/devices.list")
	return err == nil
}

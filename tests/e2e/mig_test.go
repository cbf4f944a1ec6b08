package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// migProbe prints every NVIDIA node as "dev <path> <major>:<minor>" (decimal), whether each
// can be opened ("open <path> <error>": a node the cgroup allows fails with "No such device
// or address" on a fake host, one it denies with "Operation not permitted"), and the cgroup v1
// rules for the GPU majors where devices.list exists.
const migProbe = `
for f in /dev/nvidia* /dev/nvidia-caps/*; do
  [ -c "$f" ] || continue
  set -- $(stat -c '%t %T' "$f")
  echo "dev $f $((0x$1)):$((0x$2))"
  echo "open $f $(dd if="$f" of=/dev/null bs=1 count=0 2>&1 | sed 's/.*: //' | head -1)"
done
if [ -r /sys/fs/cgroup/devices/devices.list ]; then
  grep -E '^c (195|235|237):' /sys/fs/cgroup/devices/devices.list | sed 's/^/cgroup /'
fi
echo probe-done
`

var (
	migHostOnce sync.Once
	migHostVal  *fakehost.Host
	migHostErr  error
)

// migHost is a fake host with two GPUs: GPU 0 in MIG mode with three MIG devices, GPU 1 whole.
func migHost(t *testing.T) *fakehost.Host {
	t.Helper()
	requireE2E(t)
	migHostOnce.Do(func() {
		opts := fakehost.Default(2)
		if migHostErr = opts.GPUs[0].AddMIGDevices("3g.40gb", "2g.20gb", "1g.10gb"); migHostErr == nil {
			migHostVal, migHostErr = fakehost.Build(filepath.Join(workDir, "mig-host"), opts)
		}
	})
	if migHostErr != nil {
		t.Fatalf("build the MIG host: %v", migHostErr)
	}
	return migHostVal
}

func newMIGEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, 1)
	e.host = migHost(t)
	e.writeConfig(t, "")
	return e
}

// capNode is the probe's line for a MIG capability node of the fake host.
func capNode(h *fakehost.Host, minor int) string {
	return fmt.Sprintf("dev /dev/nvidia-caps/nvidia-cap%d %d:%d", minor, h.CapsMajor, minor)
}

func grantSysAdmin(t *testing.T, b string) {
	t.Helper()
	editSpec(t, b, func(s map[string]any) {
		caps := s["process"].(map[string]any)["capabilities"].(map[string]any)
		caps["bounding"] = append(caps["bounding"].([]any), "CAP_SYS_ADMIN")
	})
}

func TestMIG(t *testing.T) {
	h := migHost(t)
	mig := h.MIGDevices()
	gpu0, gpu1 := "dev /dev/nvidia0 195:0", "dev /dev/nvidia1 195:1"
	ctl := []string{"dev /dev/nvidiactl 195:255", "dev /dev/nvidia-uvm 235:0", "dev /dev/nvidia-uvm-tools 235:1"}
	caps := func(m fakehost.MIGInfo) []string { return []string{capNode(h, m.GICapMinor), capNode(h, m.CICapMinor)} }
	testCases := []struct {
		description string
		env         []string
		sysAdmin    bool
		volumes     []string // device-plugin volume mounts instead of the env var
		want        []string // every NVIDIA node the container has, nothing more
	}{
		{description: "G:I", env: []string{"NVIDIA_VISIBLE_DEVICES=0:1"}, want: join([]string{gpu0}, caps(mig[1]), ctl)},
		{description: "MIG UUID", env: []string{"NVIDIA_VISIBLE_DEVICES=" + mig[2].UUID}, want: join([]string{gpu0}, caps(mig[2]), ctl)},
		{description: "legacy MIG-GPU-<uuid>/<gi>/<ci>", env: []string{fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=MIG-%s/%d/%d", h.Options.GPUs[0].UUID, mig[0].GI, mig[0].CI)},
			want: join([]string{gpu0}, caps(mig[0]), ctl)},
		{description: "a MIG device and a whole GPU", env: []string{"NVIDIA_VISIBLE_DEVICES=0:0,1"}, want: join([]string{gpu0, gpu1}, caps(mig[0]), ctl)},
		{description: "all: GPU 1 and the three MIG devices, not GPU 0 whole", env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			want: join([]string{gpu0, gpu1}, caps(mig[0]), caps(mig[1]), caps(mig[2]), ctl)},
		{description: "MIG config with CAP_SYS_ADMIN", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"}, sysAdmin: true,
			want: join([]string{gpu0, capNode(h, fakehost.CapMinorMIGConfig)}, caps(mig[0]), caps(mig[1]), caps(mig[2]), ctl)},
		{description: "MIG monitor with CAP_SYS_ADMIN", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"}, sysAdmin: true,
			want: join([]string{gpu0, capNode(h, fakehost.CapMinorMIGMonitor)}, caps(mig[0]), caps(mig[1]), caps(mig[2]), ctl)},
		{description: "the device plugin's volume mounts with MIG UUIDs", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, volumes: []string{mig[1].UUID, mig[2].UUID},
			want: join([]string{gpu0}, caps(mig[1]), caps(mig[2]), ctl)},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newMIGEnv(t)
			if tc.volumes != nil {
				e.writeConfig(t, "[request]\naccept-device-list-as-volume-mounts = true\n")
			}
			b := e.bundle(t, tc.env, migProbe)
			if tc.sysAdmin {
				grantSysAdmin(t, b)
			}
			for _, v := range tc.volumes {
				addMountRaw(t, b, "/dev/null", "/var/run/nvidia-container-devices/"+v)
			}
			got, stdout := nodesAndOutput(t, e, b)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the container's NVIDIA nodes:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// Where cgroup v1 shows the rules, there is one per node.
			if strings.Contains(stdout, "cgroup ") {
				for _, n := range want {
					f := strings.Fields(n)
					if !strings.Contains(stdout, "cgroup c "+f[2]+" rwm") {
						t.Errorf("no cgroup rule for %s:\n%s", n, stdout)
					}
				}
			}
		})
	}
}

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// TestMIGErrors: each refusal reaches runc's --log and leaves config.json as it was.
func TestMIGErrors(t *testing.T) {
	h := migHost(t)
	mig := h.MIGDevices()
	list := fmt.Sprintf("0:0 (%s, 3g.40gb), 0:1 (%s, 2g.20gb), 0:2 (%s, 1g.10gb)", mig[0].UUID, mig[1].UUID, mig[2].UUID)
	testCases := []struct {
		description string
		env         []string
		wantMsg     string
	}{
		{"a GPU in MIG mode asked for whole", []string{"NVIDIA_VISIBLE_DEVICES=0"},
			`GPU in MIG mode requested whole: "0" in NVIDIA_VISIBLE_DEVICES names GPU 0 (` + h.Options.GPUs[0].UUID + `), which is in MIG mode: it cannot be given whole; ask for its MIG devices: ` + list},
		{"an unknown MIG device", []string{"NVIDIA_VISIBLE_DEVICES=0:7"},
			`unknown device: MIG device "0:7" in NVIDIA_VISIBLE_DEVICES: this host has MIG devices ` + list},
		{"a MIG device named twice", []string{"NVIDIA_VISIBLE_DEVICES=0:1," + mig[1].UUID},
			`"0:1" and "` + mig[1].UUID + `" in NVIDIA_VISIBLE_DEVICES both name MIG device 0:1`},
		{"MIG config without CAP_SYS_ADMIN", []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"},
			"NVIDIA_MIG_CONFIG_DEVICES=all needs CAP_SYS_ADMIN in the container's bounding set"},
		{"MIG monitor without CAP_SYS_ADMIN", []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"},
			"NVIDIA_MIG_MONITOR_DEVICES=all needs CAP_SYS_ADMIN in the container's bounding set"},
		{"arch of a MIG device is its parent's", []string{"NVIDIA_VISIBLE_DEVICES=0:1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"},
			"unsatisfied condition: arch>=9.0 (host: cuda 12.4, driver 550.54.15; GPU 0:1: arch 8.0, brand tesla)"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newMIGEnv(t)
			b := e.bundle(t, tc.env, "echo should-not-run")
			before, _ := os.ReadFile(filepath.Join(b, "config.json"))
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, b, "--log", logPath, "--log-format", "json")
			if r.code == 0 || strings.Contains(r.stdout, "should-not-run") {
				t.Fatalf("the container ran:\n%s", r.stdout)
			}
			if !strings.Contains(r.stderr, tc.wantMsg) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantMsg, r.stderr)
			}
			if msg := lastJSONError(t, logPath); !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("--log lacks %q:\n%s", tc.wantMsg, msg)
			}
			if strings.Contains(tc.description, "arch") {
				return // the prestart hook fails after the create edited the spec
			}
			wantSpecUnchanged(t, b, before)
		})
	}
}

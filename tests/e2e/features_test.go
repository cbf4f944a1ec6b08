package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

var featureHostOnce struct {
	sync.Once
	h   *fakehost.Host
	err error
}

// newFeatureEnv is newEnv on a one-GPU fake host that also has every DGX/HGX feature's nodes:
// two nvidia-fs, two InfiniBand verbs nodes and rdma_cm, gdrdrv, two NVSwitches and their
// control node.
func newFeatureEnv(t *testing.T) *env {
	t.Helper()
	requireE2E(t)
	featureHostOnce.Do(func() {
		opts := fakehost.Default(1)
		opts.Features = fakehost.Features{GDS: 2, MOFED: 2, GDRCopy: true, NVSwitches: 2}
		featureHostOnce.h, featureHostOnce.err = fakehost.Build(filepath.Join(workDir, "host-features"), opts)
	})
	if featureHostOnce.err != nil {
		t.Fatalf("build fake host with feature nodes: %v", featureHostOnce.err)
	}
	dir := t.TempDir()
	e := &env{host: featureHostOnce.h, dir: dir, config: filepath.Join(dir, "config.toml"), stateRoot: filepath.Join(dir, "runc-state")}
	e.writeConfig(t, "")
	return e
}

// featureProbe prints, for every feature node the container has, "dev <path> <major>:<minor>"
// and whether opening it is allowed (a fake node with no driver fails with ENXIO or ENODEV)
// or denied (EPERM), and where cgroup v1 lists rules, those of the features' majors.
const featureProbe = `
for f in /dev/nvidia-fs* /dev/infiniband/* /dev/gdrdrv /dev/nvidia-nvswitch*; do
  [ -c "$f" ] || continue
  set -- $(stat -c '%t %T' "$f")
  echo "dev $f $((0x$1)):$((0x$2))"
  case "$(dd if="$f" of=/dev/null bs=1 count=0 2>&1)" in
    *"No such device"*) echo "access $((0x$1)):$((0x$2)) allowed" ;;
    *"Operation not permitted"*) echo "access $((0x$1)):$((0x$2)) denied" ;;
  esac
done
if [ -r /sys/fs/cgroup/devices/devices.list ]; then
  echo devices-list
  grep -E '^c (10|231|232|233|234):' /sys/fs/cgroup/devices/devices.list | sed 's/^/cgroup /'
fi
echo probe-done
`

// TestFeatureDevices: NVIDIA_GDS, NVIDIA_MOFED, NVIDIA_GDRCOPY and NVIDIA_NVSWITCH=enabled give
// a GPU container exactly their host nodes, each opened through its cgroup rule, and nothing
// without them.
func TestFeatureDevices(t *testing.T) {
	gds := []string{"dev /dev/nvidia-fs0 233:0", "dev /dev/nvidia-fs1 233:1"}
	mofed := []string{"dev /dev/infiniband/rdma_cm 10:58", "dev /dev/infiniband/uverbs0 231:192", "dev /dev/infiniband/uverbs1 231:193"}
	gdrcopy := []string{"dev /dev/gdrdrv 232:0"}
	nvswitch := []string{"dev /dev/nvidia-nvswitch0 234:0", "dev /dev/nvidia-nvswitch1 234:1", "dev /dev/nvidia-nvswitchctl 234:255"}
	testCases := []struct {
		description string
		env         []string
		want        []string
	}{
		{description: "a GPU container without features: none of their nodes", env: []string{"NVIDIA_VISIBLE_DEVICES=0"}},
		{description: "GDS", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled"}, want: gds},
		{description: "MOFED and GDRCopy", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MOFED=enabled", "NVIDIA_GDRCOPY=enabled"}, want: append(append([]string{}, mofed...), gdrcopy...)},
		{description: "all four", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled", "NVIDIA_MOFED=enabled", "NVIDIA_GDRCOPY=enabled", "NVIDIA_NVSWITCH=enabled"},
			want: slices.Concat(gds, mofed, gdrcopy, nvswitch)},
		{description: "a value other than enabled: nothing", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDRCOPY=1"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newFeatureEnv(t)
			r := e.run(t, e.bundle(t, tc.env, featureProbe))
			if r.code != 0 || !strings.Contains(r.stdout, "probe-done") {
				t.Fatalf("container failed: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			f := facts(lines(r.stdout))
			var devs []string
			for l := range f {
				if strings.HasPrefix(l, "dev ") {
					devs = append(devs, l)
				}
			}
			slices.Sort(devs)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(devs, want) {
				t.Errorf("feature nodes in the container:\n got %q\nwant %q", devs, want)
			}
			for _, d := range tc.want {
				numbers := strings.Fields(d)[2]
				if rule := "cgroup c " + numbers + " rwm"; !f.has(rule) {
					t.Errorf("%s: no working cgroup rule %s:\n%s", d, rule, r.stdout)
				}
			}
		})
	}
}

// TestFeatureExplainAndDevChar: gpu-ctk explain gives each feature node its reason and says
// what the host lacks; create-dev-char-symlinks links the feature nodes too.
func TestFeatureExplainAndDevChar(t *testing.T) {
	e := newFeatureEnv(t)
	ctk := func(args ...string) string {
		cmd := exec.Command(filepath.Join(binDir, "gpu-ctk"), args...)
		cmd.Env = append(cmd.Environ(), "GPU_RUNTIME_CONFIG="+e.config)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("gpu-ctk %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := ctk("explain", "--env", "NVIDIA_VISIBLE_DEVICES=0", "--env", "NVIDIA_GDRCOPY=enabled")
	for _, want := range []string{
		"device /dev/gdrdrv c 232:0 mode 0666 uid 0 gid 0 (host " + e.host.DevRoot + "/dev/gdrdrv) — NVIDIA_GDRCOPY=enabled: GDRCopy",
		"cgroup allow c 232:0 rwm — the rule of /dev/gdrdrv",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	out = ctk("system", "create-dev-char-symlinks", "--dry-run")
	for _, want := range []string{"would create " + e.host.DevRoot + "/dev/char/231:192 -> ../infiniband/uverbs0", "would create " + e.host.DevRoot + "/dev/char/234:255 -> ../nvidia-nvswitchctl"} {
		if !strings.Contains(out, want) {
			t.Errorf("create-dev-char-symlinks --dry-run lacks %q:\n%s", want, out)
		}
	}
}

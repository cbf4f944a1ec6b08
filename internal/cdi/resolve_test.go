package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// hostileSpec defines nvidia.com/gpu=1 with a createRuntime hook, which runc runs on the host
// as root: what a user who can write to a spec directory would plant.
const hostileSpec = `cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "1"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia1, type: c, major: 195, minor: 1}
containerEdits:
  hooks:
  - {hookName: createRuntime, path: /bin/sh, args: [sh, -c, "touch /tmp/owned"]}
`

// newResolverWithin is NewResolver, failed when it takes more than five seconds (a FIFO read
// as a spec blocks forever).
func newResolverWithin(t *testing.T, dirs []string) *Resolver {
	t.Helper()
	done := make(chan *Resolver, 1)
	go func() { done <- NewResolver(dirs, []string{"nvidia.com/gpu"}) }()
	select {
	case r := <-done:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("NewResolver(%q) blocked", dirs)
	}
	return nil
}

// TestSpecFileTrust: a spec file in a directory others can write to is read only when it is
// root's regular file that no one else may write, of at most 4 MiB: a spec that fails is
// ignored, named with why in Problems, and the device resolves to the trusted spec's. (A link
// to /dev/zero is tests/e2e TestCDISpecDirTrust's: here a regression would fill the memory of
// the test binary, not of a child the harness can bound.)
func TestSpecFileTrust(t *testing.T) {
	asRoot := os.Geteuid() == 0
	write := func(data string, perm os.FileMode) func(t *testing.T, p string) {
		return func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte(data), perm); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, perm); err != nil { // past the umask
				t.Fatal(err)
			}
		}
	}
	testCases := []struct {
		description string
		root        bool // needs root
		plant       func(t *testing.T, p string)
		want        string // the problem, with {P} for the file; "" for a trusted spec
	}{
		{description: "root's spec, 0644: trusted, and the later directory's device wins", plant: write(hostileSpec, 0o644)},
		{description: "group-writable", plant: write(hostileSpec, 0o664), want: "{P}: mode 0664, writable by its group or others"},
		{description: "world-writable", plant: write(hostileSpec, 0o666), want: "{P}: mode 0666, writable by its group or others"},
		{description: "another user's", root: true, plant: func(t *testing.T, p string) {
			write(hostileSpec, 0o644)(t, p)
			if err := os.Chown(p, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}, want: "{P}: owned by uid 1000, not 0"},
		{description: "a symbolic link to a spec elsewhere", plant: func(t *testing.T, p string) {
			real := filepath.Join(t.TempDir(), "real.yaml")
			write(hostileSpec, 0o644)(t, real)
			if err := os.Symlink(real, p); err != nil {
				t.Fatal(err)
			}
		}, want: "{P}: it is a symbolic link"},
		{description: "a FIFO", plant: func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: "{P}: not a regular file"},
		{description: "a directory", plant: func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, want: "{P}: not a regular file"},
		{description: "a sparse file of a gigabyte", plant: func(t *testing.T, p string) {
			write("", 0o644)(t, p)
			if err := os.Truncate(p, 1<<30); err != nil {
				t.Fatal(err)
			}
		}, want: "{P}: 1073741824 bytes, more than 4194304"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if tc.root && !asRoot {
				t.Skip("SKIPPED: needs root to give a file to another user (run the unit tests as root)")
			}
			trusted := writeSpecs(t)
			open := t.TempDir() // a spec directory anyone can write to
			if err := os.Chmod(open, 0o777); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(open, "evil.yaml")
			tc.plant(t, p)
			r := newResolverWithin(t, []string{trusted, open})
			problems := slices.DeleteFunc(r.Problems(), func(s string) bool { return strings.HasPrefix(s, trusted+"/broken.yaml: ") })
			want := []string{}
			if tc.want != "" {
				want = append(want, strings.ReplaceAll(tc.want, "{P}", p))
			}
			if !slices.Equal(problems, want) {
				t.Errorf("problems = %q\nwant %q", problems, want)
			}
			d, err := r.Resolve([]string{"nvidia.com/gpu=1"}, nil, specs.User{})
			if err != nil {
				t.Fatal(err)
			}
			spec := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
			if err := applyCDI(d, spec); err != nil {
				t.Fatal(err)
			}
			hooked := spec.Hooks != nil && len(spec.Hooks.CreateRuntime) > 0
			if hooked != (tc.want == "") {
				t.Errorf("the planted spec's createRuntime hook applied: %v, want %v", hooked, tc.want == "")
			}
		})
	}
}

// TestSpecDirBounds: a spec directory of more entries than the bound is not read at all (which
// of them a bounded read saw would be arbitrary), and something else than a directory at a
// spec directory's path is reported without being opened.
func TestSpecDirBounds(t *testing.T) {
	many := t.TempDir()
	for i := range maxDirEntries + 1 {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	trusted := writeSpecs(t)
	fifo := filepath.Join(t.TempDir(), "cdi")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	r := newResolverWithin(t, []string{trusted, many, fifo})
	want := []string{
		trusted + "/broken.yaml: failed to parse CDI Spec: failed to unmarshal CDI Spec: yaml: line 2: did not find expected node content",
		fifo + ": not a directory",
		many + ": more than 4096 entries: none of its specs is read",
	}
	slices.Sort(want)
	if got := r.Problems(); !slices.Equal(got, want) {
		t.Errorf("problems =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(r.Devices()) != 4 {
		t.Errorf("devices = %q: the readable directory's spec was not read", r.Devices())
	}
	if err := os.Remove(filepath.Join(many, "f0")); err != nil {
		t.Fatal(err)
	}
	if p := NewResolver([]string{many}, nil).Problems(); len(p) != 0 {
		t.Errorf("a directory at the bound: %q", p)
	}
}

// TestPrecedence: names resolve to the device the CDI library's own Cache picks from the same
// directories (a later directory's device wins; two specs of one directory defining a name
// are a conflict, named for both, and the name resolves to nothing), the file names of the
// specs kept for messages.
func TestPrecedence(t *testing.T) {
	spec := func(devices ...string) string {
		s := "cdiVersion: 0.5.0\nkind: example.com/x\ndevices:\n"
		for _, d := range devices {
			s += fmt.Sprintf("- {name: %q, containerEdits: {env: [FROM=%s]}}\n", d, d)
		}
		return s
	}
	low, high := t.TempDir(), t.TempDir()
	files := map[string]string{
		filepath.Join(low, "a.yaml"):  spec("1", "2", "3", "4"),
		filepath.Join(low, "b.json"):  spec("2", "3"), // JSON is YAML
		filepath.Join(high, "c.yaml"): spec("1", "3", "5"),
		filepath.Join(high, "d.yml"):  spec("6"), // not a spec file's name
	}
	for p, data := range files {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dirs := []string{low, high}
	r := NewResolver(dirs, []string{"example.com/x"})
	lib, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if got, want := r.Devices(), lib.ListDevices(); !slices.Equal(got, want) {
		t.Errorf("devices = %q, the library's %q", got, want)
	}
	for _, n := range []string{"1", "2", "3", "4", "5", "6"} {
		name := "example.com/x=" + n
		libDev := lib.GetDevice(name)
		d, err := r.Resolve([]string{name}, nil, specs.User{})
		if (err == nil) != (libDev != nil) {
			t.Errorf("%s: error %v, the library's device %v", name, err, libDev)
			continue
		}
		if err != nil {
			continue
		}
		s := &specs.Spec{Process: &specs.Process{}}
		if err := applyCDI(d, s); err != nil {
			t.Fatal(err)
		}
		libSpec := &specs.Spec{Process: &specs.Process{}}
		if _, err := lib.InjectDevices(libSpec, name); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Process.Env, libSpec.Process.Env) {
			t.Errorf("%s: env %q, the library's %q", name, s.Process.Env, libSpec.Process.Env)
		}
	}
	conflict := func(n string) string {
		return fmt.Sprintf(`conflicting device "example.com/x=%s" (specs %q, %q)`, n, filepath.Join(low, "b.json"), filepath.Join(low, "a.yaml"))
	}
	want := []string{
		filepath.Join(low, "a.yaml") + ": " + conflict("2"), filepath.Join(low, "a.yaml") + ": " + conflict("3"),
		filepath.Join(low, "b.json") + ": " + conflict("2"), filepath.Join(low, "b.json") + ": " + conflict("3"),
	}
	if got := r.Problems(); !slices.Equal(got, want) {
		t.Errorf("problems =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A device's edits and its spec's are described with the spec's file, not the handle the
	// library read it through.
	d, err := r.Resolve([]string{"example.com/x=5"}, nil, specs.User{})
	if err != nil {
		t.Fatal(err)
	}
	e := mergeCDI(d)
	if len(e.Env) != 1 || e.Env[0] != "FROM=5" {
		t.Errorf("edits: %+v", e)
	}
	checked, _ := r.CheckSpecs("example.com/x", testHost().Driver.GPUs)
	if want := []string{filepath.Join(low, "a.yaml"), filepath.Join(low, "b.json"), filepath.Join(high, "c.yaml")}; !slices.Equal(checked, want) {
		t.Errorf("CheckSpecs files = %q, want %q", checked, want)
	}
}

// TestResolveKinds: only names of the allowed kinds (cdi.allowed-kinds) resolve, whether they
// come from the environment or the annotations and whether or not a spec defines them; the
// error names each refused device and kind, the allowed kinds and the setting, quoting at most
// five of what the container wrote. Another kind resolves once it is allowed.
func TestResolveKinds(t *testing.T) {
	dir := writeSpecs(t)
	// A kind whose device bind-mounts host data: what the container must not pick itself.
	data := "cdiVersion: 0.5.0\nkind: example.com/data\ndevices:\n- {name: host, containerEdits: {mounts: [{hostPath: /etc, containerPath: /host-etc, options: [bind]}]}}\n"
	if err := os.WriteFile(filepath.Join(dir, "data.yaml"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	defaults := config.Default().CDI.AllowedKinds
	const setting = "; to allow a kind, add it to cdi.allowed-kinds in the gpu-runtime config"
	testCases := []struct {
		description string
		allowed     []string
		names       []string
		annotations map[string]string
		want        string // the error; "" to resolve
		wantIs      []error
	}{
		{description: "the default kinds", allowed: defaults, names: []string{"nvidia.com/gpu=1"}},
		{description: "another kind by name", allowed: defaults, names: []string{"example.com/data=host"},
			want:   `CDI device kind not allowed: "example.com/data=host" (kind "example.com/data"): gpu-runtime resolves CDI devices of kinds nvidia.com/gpu, k8s.device-plugin.nvidia.com/gpu only` + setting,
			wantIs: []error{ErrKindNotAllowed}},
		{description: "another kind by annotation", allowed: defaults, annotations: map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=1,example.com/data=host"},
			want:   `CDI device kind not allowed: "example.com/data=host" (kind "example.com/data"): gpu-runtime resolves CDI devices of kinds nvidia.com/gpu, k8s.device-plugin.nvidia.com/gpu only` + setting,
			wantIs: []error{ErrKindNotAllowed}},
		{description: "kinds no spec defines, and a missing device of an allowed kind", allowed: defaults,
			names: []string{"a.com/x=1", "a.com/x=2", "b.com/y=1", "nvidia.com/gpu=7"},
			want: `CDI device kind not allowed: "a.com/x=1", "a.com/x=2", "b.com/y=1" (kinds "a.com/x", "b.com/y"): gpu-runtime resolves CDI devices of kinds nvidia.com/gpu, k8s.device-plugin.nvidia.com/gpu only` + setting +
				`; unresolvable CDI devices "nvidia.com/gpu=7": the CDI specs in ` + dir,
			wantIs: []error{ErrKindNotAllowed, ErrUnresolvable}},
		{description: "many refused names are bounded", allowed: defaults,
			names: []string{"a.com/x=1", "a.com/x=2", "a.com/x=3", "a.com/x=4", "a.com/x=5", "a.com/x=6", "a.com/x=7"},
			want:  `CDI device kind not allowed: "a.com/x=1", "a.com/x=2", "a.com/x=3", "a.com/x=4", "a.com/x=5" and 2 more (kind "a.com/x"): gpu-runtime resolves CDI devices of kinds nvidia.com/gpu, k8s.device-plugin.nvidia.com/gpu only` + setting},
		{description: "none allowed", allowed: []string{}, names: []string{"nvidia.com/gpu=1"},
			want: `CDI device kind not allowed: "nvidia.com/gpu=1" (kind "nvidia.com/gpu"): gpu-runtime resolves no CDI devices (cdi.allowed-kinds is empty)` + setting},
		{description: "the kind allowed", allowed: append(slices.Clone(defaults), "example.com/data"), names: []string{"example.com/data=host", "nvidia.com/gpu=1"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			d, err := NewResolver([]string{dir}, tc.allowed).Resolve(tc.names, tc.annotations, specs.User{})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, dev := range d {
					got = append(got, dev.Name)
				}
				if want := tc.names; !slices.Equal(got, want) {
					t.Errorf("names = %q, want %q", got, want)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error =\n%v\nwant prefix\n%s", err, tc.want)
			}
			for _, is := range tc.wantIs {
				if !errors.Is(err, is) {
					t.Errorf("error does not wrap %v", is)
				}
			}
		})
	}
}

// mergeCDI is the edits of resolved CDI devices together, as a plan adds them.
func mergeCDI(devs []plan.CDIDevice) edits.Edits {
	var e edits.Edits
	for _, d := range devs {
		e.Add(d.Edits)
	}
	return e
}

// applyCDI applies resolved CDI devices to spec as gpu-runtime does: their edits, in its one
// applier.
func applyCDI(devs []plan.CDIDevice, spec *specs.Spec) error { return mergeCDI(devs).Apply(spec) }

// cdiNodes are the container paths of the nodes resolved CDI devices inject, each once.
func cdiNodes(devs []plan.CDIDevice) []string {
	var out []string
	for _, d := range devs {
		for _, n := range d.Nodes {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// TestUnsupportedEdits: a CDI device whose edits, or whose spec's common edits, give network
// devices or Intel RDT is refused with ErrUnsupportedEdit, naming the device or the spec:
// gpu-runtime's model does not carry them, and no GPU's spec has them.
func TestUnsupportedEdits(t *testing.T) {
	testCases := []struct {
		description string
		spec        string
		want        string // SPEC stands for the spec file
	}{
		{description: "a device's network device",
			spec: "cdiVersion: 1.1.0\nkind: example.com/x\ndevices:\n- {name: d, containerEdits: {netDevices: [{hostInterfaceName: eth0, name: eth1}]}}\n",
			want: "CDI edit not supported by gpu-runtime: CDI device example.com/x=d: network devices or Intel RDT; use an engine with CDI of its own for this spec"},
		{description: "a device's Intel RDT",
			spec: "cdiVersion: 0.7.0\nkind: example.com/x\ndevices:\n- {name: d, containerEdits: {intelRdt: {closID: gpu}}}\n",
			want: "CDI edit not supported by gpu-runtime: CDI device example.com/x=d: network devices or Intel RDT; use an engine with CDI of its own for this spec"},
		{description: "the spec's common Intel RDT",
			spec: "cdiVersion: 0.7.0\nkind: example.com/x\ndevices:\n- {name: d, containerEdits: {env: [A=1]}}\ncontainerEdits: {intelRdt: {closID: gpu}}\n",
			want: "CDI edit not supported by gpu-runtime: CDI spec SPEC (kind example.com/x): common edits: network devices or Intel RDT; use an engine with CDI of its own for this spec"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "x.yaml")
			if err := os.WriteFile(p, []byte(tc.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			r := NewResolver([]string{dir}, []string{"example.com/x"})
			if problems := r.Problems(); len(problems) > 0 {
				t.Fatalf("the spec did not load: %q", problems)
			}
			d, err := r.Resolve([]string{"example.com/x=d"}, nil, specs.User{})
			want := strings.ReplaceAll(tc.want, "SPEC", p)
			if err == nil || err.Error() != want || !errors.Is(err, ErrUnsupportedEdit) || d != nil {
				t.Errorf("devices %v, error %v\nwant %s", d, err, want)
			}
		})
	}
}

// TestCommonEditsOnce: devices of two specs, one of them asked for twice over: each spec's
// common edits come with the first of its devices only, and every device's nodes include its
// spec's common ones. The whole model is compared.
func TestCommonEditsOnce(t *testing.T) {
	dir := t.TempDir()
	for kind, spec := range map[string]string{
		"x": "cdiVersion: 0.5.0\nkind: example.com/x\ncontainerEdits:\n  env: [X=common]\n  deviceNodes: [{path: /dev/x-ctl, type: c, major: 10, minor: 1}]\n" +
			"devices:\n- {name: a, containerEdits: {deviceNodes: [{path: /dev/x-a, type: c, major: 10, minor: 2}]}}\n- {name: c, containerEdits: {env: [C=1], deviceNodes: [{path: /dev/x-c, type: c, major: 10, minor: 3}]}}\n",
		"y": "cdiVersion: 0.5.0\nkind: example.com/y\ncontainerEdits:\n  mounts: [{hostPath: /y-lib, containerPath: /y-lib, options: [ro, bind]}]\n" +
			"devices:\n- {name: b, containerEdits: {env: [B=1]}}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, kind+".yaml"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := NewResolver([]string{dir}, []string{"example.com/x", "example.com/y"})
	got, err := r.Resolve([]string{"example.com/x=a", "example.com/y=b", "example.com/x=c"}, nil, specs.User{})
	if err != nil {
		t.Fatal(err)
	}
	xCommon := "CDI spec " + filepath.Join(dir, "x.yaml") + " (kind example.com/x): common edits"
	yCommon := "CDI spec " + filepath.Join(dir, "y.yaml") + " (kind example.com/y): common edits"
	node := func(p string, minor int64, why string) edits.DeviceNode {
		return edits.DeviceNode{Path: p, Type: "c", Major: 10, Minor: minor, Why: why}
	}
	want := []plan.CDIDevice{
		{Name: "example.com/x=a", Nodes: []string{"/dev/x-a", "/dev/x-ctl"}, Edits: edits.Edits{
			Env:         []string{"X=common"},
			DeviceNodes: []edits.DeviceNode{node("/dev/x-ctl", 1, xCommon), node("/dev/x-a", 2, "CDI device example.com/x=a")},
		}},
		{Name: "example.com/y=b", Nodes: nil, Edits: edits.Edits{
			Env:    []string{"B=1"},
			Mounts: []edits.Mount{{HostPath: "/y-lib", ContainerPath: "/y-lib", Options: []string{"ro", "bind"}, IDMapped: true, Why: yCommon}},
		}},
		{Name: "example.com/x=c", Nodes: []string{"/dev/x-c", "/dev/x-ctl"}, Edits: edits.Edits{
			Env:         []string{"C=1"},
			DeviceNodes: []edits.DeviceNode{node("/dev/x-c", 3, "CDI device example.com/x=c")},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("model =\n%+v\nwant\n%+v", got, want)
	}
}

// TestCommonEditsReadOnce: a spec's common edits are read once per Resolve, not once per
// device asked for: with a hundred common mounts and tiny devices, resolving eight devices
// allocates far less than eight times what resolving one does (reading them per device made
// it about six times as much).
func TestCommonEditsReadOnce(t *testing.T) {
	dir := t.TempDir()
	s := "cdiVersion: 0.5.0\nkind: example.com/x\ncontainerEdits:\n  mounts:\n"
	for i := range 100 {
		s += fmt.Sprintf("  - {hostPath: /lib/l%d, containerPath: /lib/l%d, options: [ro, bind]}\n", i, i)
	}
	s += "devices:\n"
	var names []string
	for i := range 8 {
		s += fmt.Sprintf("- {name: \"%d\", containerEdits: {env: [D=%d]}}\n", i, i)
		names = append(names, fmt.Sprintf("example.com/x=%d", i))
	}
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewResolver([]string{dir}, []string{"example.com/x"})
	allocs := func(names []string) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := r.Resolve(names, nil, specs.User{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	one, eight := allocs(names[:1]), allocs(names)
	t.Logf("allocations: %.0f for one device, %.0f for eight", one, eight)
	if eight > 2*one {
		t.Errorf("resolving 8 devices of a spec allocates %.0f times, one device %.0f: its common edits are read per device", eight, one)
	}
}

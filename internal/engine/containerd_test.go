package engine

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

const (
	testMainPath   = "/etc/containerd/config.toml"
	testDropInPath = "/etc/containerd/conf.d/99-gpu-runtime.toml"
)

func containerdOptions() Options {
	o := testOptions()
	o.ConfigPath = testMainPath
	o.DropInPath = testDropInPath
	return o
}

// mainV2 is a version 2 main config with comments, CRI settings and no imports.
const mainV2 = `# containerd config, edited by hand
version = 2
root = "/var/lib/containerd" # where images live
oom_score = -999

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/bin/runc"
          SystemdCgroup = true
`

// mainV3 is a version 3 main config (containerd 2.x).
const mainV3 = `version = 3

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
`

func TestConfigureContainerdMain(t *testing.T) {
	testCases := []struct {
		description string
		current     string
		nilCurrent  bool
		version     int // Options.ContainerdConfigVersion
		want        string
		golden      string
		wantChanged bool
		wantErr     error
		wantErrText []string
	}{
		{
			description: "no file: a version 2 config",
			nilCurrent:  true,
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
			wantChanged: true,
		},
		{
			description: "no file, containerd 2.x: a version 3 config",
			nilCurrent:  true,
			version:     3,
			want:        "version = 3\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
			wantChanged: true,
		},
		{
			description: "empty file",
			current:     "",
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
			wantChanged: true,
		},
		{
			description: "comments only: kept after the new keys",
			current:     "# nothing here yet\n",
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n\n# nothing here yet\n",
			wantChanged: true,
		},
		{
			description: "v2 with other keys: imports inserted after version, nothing else touched",
			current:     mainV2,
			golden:      "containerd/main-v2.toml",
			wantChanged: true,
		},
		{
			description: "v3",
			current:     mainV3,
			golden:      "containerd/main-v3.toml",
			wantChanged: true,
		},
		{
			description: "version line without a final newline",
			current:     "version = 2",
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
			wantChanged: true,
		},
		{
			description: "existing imports on one line: appended",
			current:     "version = 2\nimports = [\"/etc/containerd/registries.toml\"] # mirrors\n",
			want:        "version = 2\nimports = [\"/etc/containerd/registries.toml\", \"/etc/containerd/conf.d/99-gpu-runtime.toml\"] # mirrors\n",
			wantChanged: true,
		},
		{
			description: "existing imports over lines with comments and a trailing comma",
			current:     "imports = [\n  \"a.toml\", # first\n  \"b.toml\",\n]\nversion = 2\n",
			want:        "imports = [\n  \"a.toml\", # first\n  \"b.toml\", \"/etc/containerd/conf.d/99-gpu-runtime.toml\",\n]\nversion = 2\n",
			wantChanged: true,
		},
		{
			description: "empty imports",
			current:     "version = 2\nimports = []\n",
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
			wantChanged: true,
		},
		{
			description: "already imported",
			current:     "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
		},
		{
			description: "already imported through a relative glob",
			current:     "version = 2\nimports = ['conf.d/*.toml']\n",
			want:        "version = 2\nimports = ['conf.d/*.toml']\n",
		},
		{
			description: "a glob that misses the drop-in does not count",
			current:     "version = 2\nimports = [\"/etc/containerd/conf.d/*.conf\"]\n",
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/*.conf\", \"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n",
			wantChanged: true,
		},
		{
			description: "no version key: containerd reads version 1",
			current:     "disabled_plugins = [\"cri\"]\n[plugins.cri.containerd]\n  snapshotter = \"overlayfs\"\n",
			wantErr:     ErrUnsupportedVersion,
			wantErrText: []string{`no "version" key`, "version 1", "version = 2", "--runtime=docker"},
		},
		{
			description: "version 1",
			current:     "version = 1\n",
			wantErr:     ErrUnsupportedVersion,
			wantErrText: []string{"version 1", "containerd config migrate"},
		},
		{
			description: "version 4",
			current:     "version = 4\n",
			wantErr:     ErrUnsupportedVersion,
			wantErrText: []string{"version 4"},
		},
		{
			description: "CRI plugin disabled",
			current:     "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n",
			wantErr:     ErrCRIDisabled,
			wantErrText: []string{`"io.containerd.grpc.v1.cri"`, "remove it from disabled_plugins"},
		},
		{
			description: "imports is not an array",
			current:     "version = 2\nimports = \"/etc/x.toml\"\n",
			wantErr:     ErrUnexpected,
			wantErrText: []string{`"imports" is a string, not an array`},
		},

		{
			description: "malformed",
			current:     "version = 2\n[plugins\n",
			wantErr:     ErrMalformed,
			wantErrText: []string{"line 2, column"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			opts := containerdOptions()
			opts.ContainerdConfigVersion = tc.version
			current := []byte(tc.current)
			if tc.nilCurrent {
				current = nil
			}
			got, changed, err := pure(t, configureContainerdMain, current, opts)
			checkErr(t, err, tc.wantErr, tc.wantErrText...)
			if tc.wantErr != nil {
				return
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if tc.want != "" && string(got) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
			if tc.golden != "" {
				checkGolden(t, tc.golden, got)
				// Only our line was added.
				line := "imports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\n"
				if string(bytes.Replace(got, []byte(line), nil, 1)) != tc.current {
					t.Errorf("more than the imports line changed:\n%s", got)
				}
			}
			if !changed && !bytes.Equal(got, current) {
				t.Errorf("unchanged, but the content differs:\n%s", got)
			}
		})
	}
}

func TestUnconfigureContainerdMain(t *testing.T) {
	testCases := []struct {
		description string
		current     string
		want        string
		wantChanged bool
		wantErr     error
	}{
		{
			description: "no imports",
			current:     mainV2,
			want:        mainV2,
		},
		{
			description: "ours only: the line goes",
			current:     "version = 2\nimports = [\"/etc/containerd/conf.d/99-gpu-runtime.toml\"]\nroot = \"/x\"\n",
			want:        "version = 2\nroot = \"/x\"\n",
			wantChanged: true,
		},
		{
			description: "ours among others",
			current:     "version = 2\nimports = ['/etc/a.toml', \"/etc/containerd/conf.d/99-gpu-runtime.toml\", \"b.toml\"] # keep\n",
			want:        "version = 2\nimports = ['/etc/a.toml', \"b.toml\"] # keep\n",
			wantChanged: true,
		},
		{
			description: "a relative entry naming the drop-in goes too",
			current:     "version = 2\nimports = [\"conf.d/99-gpu-runtime.toml\"]\n",
			want:        "version = 2\n",
			wantChanged: true,
		},
		{
			description: "a glob is someone else's",
			current:     "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
			want:        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
		},
		{
			description: "a version 1 config without our import is not our business",
			current:     "[plugins.cri]\n",
			want:        "[plugins.cri]\n",
		},
		{
			description: "malformed",
			current:     "imports = [\"a\"\n",
			wantErr:     ErrMalformed,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, changed, err := pure(t, unconfigureContainerdMain, []byte(tc.current), containerdOptions())
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				return
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if string(got) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestContainerdMainRoundTrip checks that unconfigure gives back the very bytes configure
// started from.
func TestContainerdMainRoundTrip(t *testing.T) {
	testCases := []struct {
		description string
		current     string
	}{
		{description: "v2 with comments", current: mainV2},
		{description: "v3", current: mainV3},
		{description: "one-line imports", current: "version = 2\nimports = [\"/etc/a.toml\"]\n"},
		{description: "no final newline", current: "version = 3"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			configured, changed, err := pure(t, configureContainerdMain, []byte(tc.current), containerdOptions())
			if err != nil || !changed {
				t.Fatalf("configure: changed %v, err %v", changed, err)
			}
			again, changed, err := pure(t, configureContainerdMain, configured, containerdOptions())
			if err != nil || changed || !bytes.Equal(again, configured) {
				t.Fatalf("configure twice: changed %v, err %v", changed, err)
			}
			back, changed, err := pure(t, unconfigureContainerdMain, configured, containerdOptions())
			if err != nil || !changed {
				t.Fatalf("unconfigure: changed %v, err %v", changed, err)
			}
			want := tc.current
			if !strings.HasSuffix(want, "\n") {
				want += "\n" // the newline configure added before its line stays
			}
			if string(back) != want {
				t.Errorf("round trip:\n%s\nwant:\n%s", back, want)
			}
		})
	}
}

func TestContainerdDropIn(t *testing.T) {
	// Every gpu runtime passes the CDI annotations through the CRI (see containerdDropIn).
	cdiAnnotations := []any{"cdi.k8s.io/*"}
	importedCRI := configFile{path: "/etc/containerd/cri.toml", content: []byte(`version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "mirror.example/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
      BinaryName = "/usr/bin/crun"
`)}
	importedV3 := configFile{path: "/etc/containerd/conf.d/10-mirror.toml", content: []byte(`version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  NoPivotRoot = true
`)}
	testCases := []struct {
		description  string
		files        []configFile
		version      int
		setAsDefault bool
		golden       string
		// wantRuntime is runtimes.gpu; wantRuntimes the runtime names; wantDefault default_runtime_name.
		wantRuntime  map[string]any
		wantRuntimes []string
		wantDefault  string
		wantKept     map[string]any // keys of the CRI section that must come through
		wantNote     string
		wantErr      error
		wantErrText  []string
	}{
		{
			description:  "v2, no main config: runc named next to ours",
			files:        []configFile{{path: testMainPath}},
			golden:       "containerd/dropin-v2-no-main.toml",
			wantRuntime:  map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath}},
			wantRuntimes: []string{"gpu", "runc"},
		},
		{
			description: "v2: the CRI section is carried, runc's options are the base",
			files:       []configFile{{path: testMainPath, content: []byte(mainV2)}},
			golden:      "containerd/dropin-v2.toml",
			wantRuntime: map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath, "SystemdCgroup": true}},
			wantKept: map[string]any{
				"sandbox_image": "registry.k8s.io/pause:3.9",
				"cni":           map[string]any{"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"},
			},
			wantRuntimes: []string{"gpu", "runc"},
			wantDefault:  "runc",
			wantNote:     `starts from the settings of runtime "runc"`,
		},
		{
			description:  "v2 set as default replaces runc",
			files:        []configFile{{path: testMainPath, content: []byte(mainV2)}},
			setAsDefault: true,
			golden:       "containerd/dropin-v2-default.toml",
			wantRuntime:  map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath, "SystemdCgroup": true}},
			wantRuntimes: []string{"gpu", "runc"},
			wantDefault:  "gpu",
			wantNote:     `default_runtime_name was "runc"`,
		},
		{
			description:  "v2: a later import's CRI section replaces the main config's, as in containerd 1.x",
			files:        []configFile{{path: testMainPath, content: []byte(mainV2)}, importedCRI},
			wantRuntime:  map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath}},
			wantKept:     map[string]any{"sandbox_image": "mirror.example/pause:3.9"},
			wantRuntimes: []string{"crun", "gpu"},
			wantNote:     "/etc/containerd/cri.toml also sets the CRI plugin section",
		},
		{
			description:  "v3: only our runtime, runc's options as the base",
			files:        []configFile{{path: testMainPath, content: []byte(mainV3)}},
			golden:       "containerd/dropin-v3.toml",
			wantRuntime:  map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath, "SystemdCgroup": true}},
			wantRuntimes: []string{"gpu"},
		},
		{
			description:  "v3: imports merge key by key, as in containerd 2.x",
			files:        []configFile{{path: testMainPath, content: []byte(mainV3)}, importedV3},
			setAsDefault: true,
			golden:       "containerd/dropin-v3-default.toml",
			wantRuntime:  map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath, "SystemdCgroup": true, "NoPivotRoot": true}},
			wantRuntimes: []string{"gpu"},
			wantDefault:  "gpu",
		},
		{
			description:  "v3, no main config",
			files:        []configFile{{path: testMainPath}},
			version:      3,
			wantRuntime:  map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath}},
			wantRuntimes: []string{"gpu"},
		},
		{
			description: "a non-runc default is no base",
			files: []configFile{{path: testMainPath, content: []byte(`version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "kata"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
    runtime_type = "io.containerd.kata.v2"
`)}},
			wantRuntime:  map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "options": map[string]any{"BinaryName": testRuntimePath}},
			wantRuntimes: []string{"gpu", "kata"},
			wantDefault:  "kata",
		},
		{
			description: "the base runtime's container_annotations are kept, cdi.k8s.io/* added",
			files: []configFile{{path: testMainPath, content: []byte(`version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
  container_annotations = ['io.kubernetes.cri.*']
`)}},
			wantRuntime: map[string]any{"runtime_type": runcShim, "container_annotations": []any{"io.kubernetes.cri.*", "cdi.k8s.io/*"},
				"options": map[string]any{"BinaryName": testRuntimePath}},
			wantRuntimes: []string{"gpu"},
		},
		{
			description: "cdi.k8s.io/* already listed by the base runtime is not repeated",
			files: []configFile{{path: testMainPath, content: []byte(`version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  container_annotations = ["cdi.k8s.io/*"]
  pod_annotations = ["example.com/*"]
`)}},
			wantRuntime: map[string]any{"runtime_type": runcShim, "container_annotations": cdiAnnotations, "pod_annotations": []any{"example.com/*"},
				"options": map[string]any{"BinaryName": testRuntimePath}},
			wantRuntimes: []string{"gpu", "runc"},
		},
		{
			description: "plugins that is no table",
			files:       []configFile{{path: testMainPath, content: []byte("version = 2\nplugins = [1, 2]\n")}},
			wantErr:     ErrUnexpected,
			wantErrText: []string{"plugins is an array, not a table"},
		},
		{
			description: "container_annotations that is no array",
			files: []configFile{{path: testMainPath, content: []byte(`version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  container_annotations = "cdi.k8s.io/*"
`)}},
			wantErr:     ErrUnexpected,
			wantErrText: []string{"container_annotations is a string, not an array"},
		},
		{
			description: "version 1 main config",
			files:       []configFile{{path: testMainPath, content: []byte("[plugins.cri]\n")}},
			wantErr:     ErrUnsupportedVersion,
			wantErrText: []string{testMainPath},
		},
		{
			description: "malformed import",
			files:       []configFile{{path: testMainPath, content: []byte(mainV2)}, {path: "/etc/containerd/bad.toml", content: []byte("x = \n")}},
			wantErr:     ErrMalformed,
			wantErrText: []string{"parse /etc/containerd/bad.toml at line 1"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			opts := containerdOptions()
			opts.SetAsDefault = tc.setAsDefault
			opts.ContainerdConfigVersion = tc.version
			e, err := containerdDropIn(tc.files, completed(t, opts))
			checkErr(t, err, tc.wantErr, tc.wantErrText...)
			if tc.wantErr != nil {
				return
			}
			if !owned(e.content) {
				t.Errorf("the drop-in lacks the marker line:\n%s", e.content)
			}
			if tc.golden != "" {
				checkGolden(t, tc.golden, e.content)
			}
			doc, err := parseTOML(e.content)
			if err != nil {
				t.Fatalf("the drop-in does not parse: %v\n%s", err, e.content)
			}
			version := doc["version"].(int64)
			section, ok, err := subTable(doc, "plugins", criPlugin(int(version)))
			if err != nil || !ok {
				t.Fatalf("no CRI section (%v):\n%s", err, e.content)
			}
			runtimes, _, _ := subTable(section, "containerd", "runtimes")
			if !reflect.DeepEqual(runtimes["gpu"], tc.wantRuntime) {
				t.Errorf("runtime gpu = %#v, want %#v", runtimes["gpu"], tc.wantRuntime)
			}
			var names []string
			for name := range runtimes {
				names = append(names, name)
			}
			if !sameSet(names, tc.wantRuntimes) {
				t.Errorf("runtimes %v, want %v", names, tc.wantRuntimes)
			}
			if def, _ := stringAt(section, "containerd", "default_runtime_name"); def != tc.wantDefault {
				t.Errorf("default_runtime_name = %q, want %q", def, tc.wantDefault)
			}
			for k, v := range tc.wantKept {
				if !reflect.DeepEqual(section[k], v) {
					t.Errorf("CRI %s = %#v, want %#v", k, section[k], v)
				}
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(e.notes, "\n"), tc.wantNote) {
				t.Errorf("notes %q lack %q", e.notes, tc.wantNote)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestContainerdConfigVersionFor(t *testing.T) {
	testCases := []struct {
		description string
		output      string
		want        int
		wantErr     bool
	}{
		{description: "debian 1.6", output: "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", want: 2},
		{description: "docker's containerd.io 1.7", output: "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", want: 2},
		{description: "containerd 2.0", output: "containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd375a01713109a8a197d197ff6542\n", want: 3},
		{description: "garbage", output: "hello\n", wantErr: true},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := ContainerdConfigVersionFor(tc.output)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

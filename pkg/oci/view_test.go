package oci

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// gpuEdits is the shape of a real injection: device nodes with their rules, driver mounts,
// a hook, docker's hook removed, an env entry.
func gpuEdits() []SpecOpt {
	hookEnv := []string{"PATH=/usr/bin"}
	return []SpecOpt{
		WithDevices(Device{LinuxDevice: specs.LinuxDevice{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}}),
		WithDevices(Device{LinuxDevice: specs.LinuxDevice{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}),
		WithMounts(specs.Mount{Destination: "/usr/lib/libcuda.so.550.54.15", Source: "/usr/lib/libcuda.so.550.54.15", Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}}),
		WithMounts(specs.Mount{Destination: "/usr/bin/nvidia-smi", Source: "/usr/bin/nvidia-smi", Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}}),
		WithHook(StageCreateContainer, specs.Hook{Path: "/usr/bin/gpu-hook", Args: []string{"gpu-hook", "update-ldcache"}, Env: hookEnv}),
		WithoutHooksNamed("nvidia-container-runtime-hook"),
		WithEnv("NVIDIA_GPU_INJECTED=1"),
	}
}

// cdiLikeEdits changes the members gpu-runtime decodes only for CDI's Apply, as it would.
func cdiLikeEdits(s *specs.Spec) error {
	if s.Process == nil {
		s.Process = &specs.Process{}
	}
	s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, 44)
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	if s.Linux.NetDevices == nil {
		s.Linux.NetDevices = map[string]specs.LinuxNetDevice{}
	}
	s.Linux.NetDevices["eth7"] = specs.LinuxNetDevice{Name: "gpu-net0"}
	s.Linux.IntelRdt = &specs.LinuxIntelRdt{ClosID: "gpu"}
	return nil
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestEncodeMatchesFullDecode: whatever the spec and the edits, the file written from the
// partial view decodes to exactly the spec a full decode plus the same edits gives, and
// every member the view does not decode is carried over as read.
func TestEncodeMatchesFullDecode(t *testing.T) {
	testCases := []struct {
		description string
		spec        string
		edits       []SpecOpt
	}{
		{description: "podman's spec (seccomp, annotations, sysctl), GPU edits", spec: readTestdata(t, "podman-config.json"), edits: gpuEdits()},
		{description: "runc spec's default, GPU edits", spec: readTestdata(t, "runc-spec.json"), edits: gpuEdits()},
		{description: "runc spec's default, no edits", spec: readTestdata(t, "runc-spec.json")},
		{description: "empty object: every parent created", spec: `{}`, edits: gpuEdits()},
		{description: "no linux object", spec: `{"ociVersion":"1.0.2","process":{"args":["sh"]}}`, edits: gpuEdits()},
		{description: "linux without resources", spec: `{"linux":{"namespaces":[{"type":"pid"}]}}`, edits: gpuEdits()},
		{description: "null members", spec: `{"process":null,"mounts":null,"hooks":null,"linux":{"resources":null,"devices":null}}`, edits: gpuEdits()},
		{description: "docker hook only stage removed", spec: `{"hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]}}`, edits: []SpecOpt{WithoutHooksNamed("nvidia-container-runtime-hook")}},
		{description: "unknown keys throughout", spec: specWithUnknown, edits: gpuEdits()},
		{description: "what CDI's edits may change: additional GIDs, net devices, Intel RDT", spec: readTestdata(t, "podman-config.json"), edits: []SpecOpt{cdiLikeEdits}},
		{description: "CDI-like edits on an empty spec", spec: `{}`, edits: []SpecOpt{cdiLikeEdits}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var want specs.Spec
			if err := json.Unmarshal([]byte(tc.spec), &want); err != nil {
				t.Fatal(err)
			}
			if err := Apply(&want, tc.edits...); err != nil {
				t.Fatal(err)
			}
			sf, err := ParseSpec(writeSpec(t, tc.spec, 0o644), []byte(tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(sf.Spec, tc.edits...); err != nil {
				t.Fatal(err)
			}
			out, err := sf.Encode()
			if err != nil {
				t.Fatal(err)
			}
			var got specs.Spec
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("output does not decode: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Errorf("spec differs from full decode + edits\ngot  %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
			}
			assertUntouchedKept(t, []byte(tc.spec), out)
		})
	}
}

// normalize maps the empty forms that JSON cannot tell apart (nil vs empty) to one.
func normalize(s specs.Spec) specs.Spec {
	data, _ := json.Marshal(s)
	var n specs.Spec
	_ = json.Unmarshal(data, &n)
	if n.Process != nil && reflect.ValueOf(*n.Process).IsZero() {
		n.Process = nil
	}
	if n.Linux != nil && n.Linux.Resources != nil && reflect.ValueOf(*n.Linux.Resources).IsZero() {
		n.Linux.Resources = nil
	}
	if n.Linux != nil && reflect.ValueOf(*n.Linux).IsZero() {
		n.Linux = nil
	}
	return n
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// assertUntouchedKept checks that every member outside the decoded ones has the original's
// bytes in out, at the top level and inside process, linux and linux.resources.
func assertUntouchedKept(t *testing.T, orig, out []byte) {
	t.Helper()
	// Objects on the way to decoded members are walked; decoded members are the edits' own.
	parents := map[string]bool{"process": true, "linux": true, "linux.resources": true}
	decoded := map[string]bool{"mounts": true, "hooks": true, "process.env": true, "process.capabilities": true,
		"linux.devices": true, "linux.resources.devices": true}
	// Decoded for CDI's edits, and kept as read unless they changed.
	for _, p := range []string{"process.user", "annotations", "linux.namespaces", "linux.netDevices", "linux.intelRdt"} {
		var o, n map[string]json.RawMessage
		_ = json.Unmarshal(orig, &o)
		_ = json.Unmarshal(out, &n)
		parts := strings.Split(p, ".")
		for _, part := range parts[:len(parts)-1] {
			var oc, nc map[string]json.RawMessage
			_ = json.Unmarshal(o[part], &oc)
			_ = json.Unmarshal(n[part], &nc)
			o, n = oc, nc
		}
		if !bytes.Equal(o[parts[len(parts)-1]], n[parts[len(parts)-1]]) {
			decoded[p] = true // changed by the edits: the full-decode comparison covers it
		}
	}
	var walk func(prefix string, o, n map[string]json.RawMessage)
	walk = func(prefix string, o, n map[string]json.RawMessage) {
		for k, ov := range o {
			path := strings.TrimPrefix(prefix+"."+k, ".")
			if decoded[path] {
				continue
			}
			if !parents[path] {
				if !bytes.Equal(n[k], ov) {
					t.Errorf("member %s changed:\n got  %s\n want %s", path, n[k], ov)
				}
				continue
			}
			var oc, nc map[string]json.RawMessage
			if json.Unmarshal(ov, &oc) == nil && oc != nil && json.Unmarshal(n[k], &nc) == nil {
				walk(path, oc, nc)
			}
		}
	}
	var o, n map[string]json.RawMessage
	if err := json.Unmarshal(orig, &o); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &n); err != nil {
		t.Fatal(err)
	}
	walk("", o, n)
}

func TestEncodeKeepsUnknownKeysInDecodedMembers(t *testing.T) {
	spec := `{
	  "process": {"env": ["A=1"], "capabilities": {"bounding": ["CAP_KILL"], "futureSet": ["CAP_X"]}},
	  "mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "futureMount": {"n": 1.50}}],
	  "hooks": {"futureStage": [{"path": "/bin/x"}], "prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "futureHook": 1}]},
	  "linux": {"devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "futureDevice": "d"}],
	            "resources": {"devices": [{"allow": false, "access": "rwm", "futureRule": 18446744073709551615}]}}
	}`
	sf, err := ParseSpec(writeSpec(t, spec, 0o644), []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(sf.Spec, gpuEdits()...); err != nil {
		t.Fatal(err)
	}
	out, err := sf.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"futureSet":["CAP_X"]`,
		`"futureStage":[{"path":"/bin/x"}]`,
		`"futureDevice":"d"`,
		`"futureRule":18446744073709551615`,
		`"futureMount":{"n":1.50}`,
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("lost %s:\n%s", want, out)
		}
	}
	// The edits are there too, and the docker hook (with its unknown key) is gone.
	for _, want := range []string{`"/dev/nvidia0"`, `"/usr/bin/nvidia-smi"`, `"gpu-hook"`, `"NVIDIA_GPU_INJECTED=1"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("edit missing %s:\n%s", want, out)
		}
	}
	if bytes.Contains(out, []byte("nvidia-container-runtime-hook")) || bytes.Contains(out, []byte("futureHook")) {
		t.Errorf("removed hook still there:\n%s", out)
	}
}

// TestEncodeEmptiedHooksKeepUnknownStages: removing the last known hook keeps a stage this
// runtime-spec version does not know.
func TestEncodeEmptiedHooksKeepUnknownStages(t *testing.T) {
	spec := `{"hooks":{"futureStage":[{"path":"/bin/x"}],"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook"}]}}`
	sf, err := ParseSpec(writeSpec(t, spec, 0o644), []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(sf.Spec, WithoutHooksNamed("nvidia-container-runtime-hook")); err != nil {
		t.Fatal(err)
	}
	out, err := sf.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"hooks":{"futureStage":[{"path":"/bin/x"}]}}`; string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
}

// TestEncodeRefusesEditsOutsideView: a member the view does not decode cannot be edited
// through it; Encode says so instead of dropping the change.
func TestEncodeRefusesEditsOutsideView(t *testing.T) {
	testCases := []struct {
		description string
		edit        SpecOpt
		want        string
	}{
		{"process.args", func(s *specs.Spec) error { s.Process.Args = []string{"x"}; return nil },
			"encode spec: members of process outside those gpu-runtime decodes were set; they would be lost"},
		{"root", func(s *specs.Spec) error { s.Root = &specs.Root{Path: "x"}; return nil },
			"encode spec: members of the top level outside those gpu-runtime decodes were set; they would be lost"},
		{"linux.seccomp and linux.resources.memory", func(s *specs.Spec) error {
			s.Linux.Seccomp = &specs.LinuxSeccomp{}
			s.Linux.Resources.Memory = &specs.LinuxMemory{}
			return nil
		}, "encode spec: members of linux.resources, linux outside those gpu-runtime decodes were set; they would be lost"},
	}
	spec := readTestdata(t, "runc-spec.json")
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			sf, err := ParseSpec(writeSpec(t, spec, 0o644), []byte(spec))
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(sf.Spec, tc.edit); err != nil {
				t.Fatal(err)
			}
			if _, err := sf.Encode(); err == nil || err.Error() != tc.want {
				t.Errorf("error = %v\nwant    %s", err, tc.want)
			}
			if err := sf.Write(); err == nil {
				t.Error("Write succeeded")
			}
		})
	}
}

// TestParseSpecDecodesOnlyTheView: members outside the view are not decoded, so a value
// there that this runtime-spec version cannot read is runc's to judge, not ours.
func TestParseSpecDecodesOnlyTheView(t *testing.T) {
	spec := `{"root": "not an object", "linux": {"seccomp": 7, "devices": [{"path": "/dev/x", "type": "c"}]}, "process": {"args": {}, "env": ["A=1"]}}`
	sf, err := ParseSpec(writeSpec(t, spec, 0o644), []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	want := &specs.Spec{Process: &specs.Process{Env: []string{"A=1"}}, Linux: &specs.Linux{Devices: []specs.LinuxDevice{{Path: "/dev/x", Type: "c"}}}}
	if !reflect.DeepEqual(sf.Spec, want) {
		t.Errorf("view = %+v", sf.Spec)
	}
}

// TestEncodeUnknownKeysStayWithTheirElement: replacing a list element (same length, new
// order) neither gives its unknown keys to a neighbour nor keeps them on the replacement.
func TestEncodeUnknownKeysStayWithTheirElement(t *testing.T) {
	spec := `{"mounts":[{"destination":"/a","source":"/a","type":"bind","futureA":1},{"destination":"/b","source":"/b","type":"bind","futureB":2}]}`
	sf, err := ParseSpec(writeSpec(t, spec, 0o644), []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(sf.Spec, WithMounts(specs.Mount{Destination: "/a", Source: "/new", Type: "bind"})); err != nil {
		t.Fatal(err)
	}
	out, err := sf.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mounts":[{"destination":"/b","futureB":2,"source":"/b","type":"bind"},{"destination":"/a","source":"/new","type":"bind"}]}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
}

// TestParseSpecRefusesAmbiguousMembers: members Go's JSON decoder (runc's) would merge are
// refused, with the member named, rather than edited one way and read another.
func TestParseSpecRefusesAmbiguousMembers(t *testing.T) {
	testCases := []struct {
		description, spec, want string
	}{
		{"top-level case variant", `{"linux":{},"Linux":{"devices":[]}}`, `: ambiguous members: "Linux" differs from "linux" only in case`},
		{"nested case variant", `{"linux":{"resources":{"DEVICES":[]}}}`, `: linux.resources: ambiguous members: "DEVICES" differs from "devices" only in case`},
		{"duplicate view member", `{"process":{"env":["A=1"],"env":["B=2"]}}`, `: process: ambiguous members: "env" appears twice`},
		{"duplicate member kept as read", `{"root":{"path":"a","readonly":true},"root":{"path":"b"}}`, `: ambiguous members: "root" appears twice`},
		{"duplicate hook stage", `{"hooks":{"prestart":[],"prestart":[{"path":"/x"}]}}`, `: hooks: ambiguous members: "prestart" appears twice`},
		{"case variant hook stage", `{"hooks":{"createContainer":[],"CreateContainer":[{"path":"/x"}]}}`, `: hooks: ambiguous members: "createContainer" and "CreateContainer" name the same field`},
		{"duplicate key in a hook", `{"hooks":{"prestart":[{"path":"/a","path":"/b"}]}}`, `: hooks.prestart[0]: ambiguous members: "path" appears twice`},
		{"case variant in a capability set", `{"process":{"capabilities":{"bounding":[],"Bounding":["CAP_SYS_ADMIN"]}}}`, `: process.capabilities: ambiguous members: "bounding" and "Bounding" name the same field`},
		{"case variant in a mount", `{"mounts":[{"destination":"/a"},{"destination":"/b","Destination":"/c"}]}`, `: mounts[1]: ambiguous members: "destination" and "Destination" name the same field`},
		{"duplicate in a device rule", `{"linux":{"resources":{"devices":[{"allow":false,"allow":true}]}}}`, `: linux.resources.devices[0]: ambiguous members: "allow" appears twice`},
		{"null document", `null`, `: not a JSON object`},
		{"not an object", `[]`, `: want a JSON object, got an array`},
		{"process not an object", `{"process": "abc"}`, `: process: want a JSON object, got a string`},
		{"linux not an object", `{"linux": 7}`, `: linux: want a JSON object, got a number`},
		{"trailing data", `{} {}`, `: data after the JSON value`},
		{"view member of the wrong type", `{"linux":{"devices":{}}}`, `: linux.devices: json: cannot unmarshal object into Go value of type []specs.LinuxDevice`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p := writeSpec(t, tc.spec, 0o644)
			_, err := ParseSpec(p, []byte(tc.spec))
			if want := "decode spec " + p + tc.want; err == nil || err.Error() != want {
				t.Errorf("error = %v\nwant    %s", err, want)
			}
		})
	}
	// Case variants of members gpu-runtime does not decode are copied as read, and so are
	// keys this runtime-spec version does not know, however they are spelled.
	spec := `{"Root":{"path":"a"},"root":{"path":"a"},"mounts":[{"destination":"/a","futureKey":1,"FUTUREKEY":2}]}`
	if _, err := ParseSpec(writeSpec(t, spec, 0o644), []byte(spec)); err != nil {
		t.Errorf("case variant of an undecoded member: %v", err)
	}
}

func TestParseSpecTruncated(t *testing.T) {
	for _, spec := range []string{``, `{"process": `, `{"linux": {"resources": {"devices": [`} {
		p := writeSpec(t, spec, 0o644)
		_, err := ParseSpec(p, []byte(spec))
		if want := "decode spec " + p + ": unexpected end of JSON input"; err == nil || err.Error() != want {
			t.Errorf("%q: error = %v\nwant %s", spec, err, want)
		}
	}
}

// TestSpecRoot: the root is read as runc's decoder reads it — whatever the case of its
// name — and two members it would merge are an error, not a guess.
func TestSpecRoot(t *testing.T) {
	for _, c := range []struct{ spec, want, err string }{
		{spec: `{"root":{"path":"rootfs","readonly":true}}`, want: "rootfs"},
		{spec: `{"ROOT":{"path":"/abs"}}`, want: "/abs"},
		{spec: `{"mounts":[]}`, want: "<nil>"},
		{spec: `{"root":null}`, want: "<nil>"},
		{spec: `{"Root":{"path":"a"},"root":{"path":"b"}}`, err: `root: ambiguous members: more than one member named "root" in any case`},
		{spec: `{"root":{"path":1}}`, err: "root: json: cannot unmarshal number into Go struct field Root.path of type string"},
	} {
		f, err := ParseSpec(writeSpec(t, c.spec, 0o644), []byte(c.spec))
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		r, err := f.Root()
		got := "<nil>"
		if r != nil {
			got = r.Path
		}
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: error %v, want %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: root %q (%v), want %q", c.spec, got, err, c.want)
		}
	}
}

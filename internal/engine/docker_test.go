package engine

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// otherDaemonJSON holds keys gpu-ctk must keep as they are: numbers a float64 would change,
// escapes, HTML characters, nested values, another runtime.
const otherDaemonJSON = `{
  "log-level": "warn",
  "max-concurrent-downloads": 12345678901234567890,
  "shutdown-timeout": 1e3,
  "ratio": 0.10,
  "labels": ["a=<b>&c", "caf\u00e9"],
  "log-opts": {"max-size": "10m", "max-file": "3"},
  "runtimes": {
    "nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": ["--debug"]}
  },
  "unknown-to-us": {"deep": [1, 2.50, {"x": null}]}
}
`

// decodeJSON decodes with UseNumber so numbers compare by text.
func decodeJSON(t *testing.T, data []byte) map[string]any {
	t.Helper()
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

func TestConfigureDocker(t *testing.T) {
	configured, _, err := pure(t, configureDocker, []byte(otherDaemonJSON), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description  string
		current      string
		nilCurrent   bool
		setAsDefault bool
		runtimePath  string
		golden       string // compare the result with testdata/<golden>
		wantChanged  bool
		wantRuntime  map[string]any // runtimes.gpu in the result
		wantDefault  string
		wantNote     string
		wantErr      error
		wantErrText  []string
	}{
		{
			description: "no file",
			nilCurrent:  true,
			golden:      "docker/no-file.json",
			wantChanged: true,
			wantRuntime: map[string]any{"path": testRuntimePath, "runtimeArgs": []any{}},
		},
		{
			description: "empty file",
			current:     " \n",
			golden:      "docker/no-file.json",
			wantChanged: true,
			wantRuntime: map[string]any{"path": testRuntimePath, "runtimeArgs": []any{}},
		},
		{
			description: "other keys and runtimes kept",
			current:     otherDaemonJSON,
			golden:      "docker/other-keys.json",
			wantChanged: true,
			wantRuntime: map[string]any{"path": testRuntimePath, "runtimeArgs": []any{}},
		},
		{
			description: "already configured",
			current:     string(configured),
			wantChanged: false,
			wantRuntime: map[string]any{"path": testRuntimePath, "runtimeArgs": []any{}},
		},
		{
			description: "already configured, compact layout left alone",
			current:     `{"runtimes":{"gpu":{"path":"/usr/local/bin/gpu-runtime"}}}`,
			wantChanged: false,
			wantRuntime: map[string]any{"path": testRuntimePath},
		},
		{
			description:  "set as default",
			current:      otherDaemonJSON,
			setAsDefault: true,
			golden:       "docker/set-as-default.json",
			wantChanged:  true,
			wantRuntime:  map[string]any{"path": testRuntimePath, "runtimeArgs": []any{}},
			wantDefault:  "gpu",
		},
		{
			description:  "set as default when configured but not default",
			current:      string(configured),
			setAsDefault: true,
			wantChanged:  true,
			wantRuntime:  map[string]any{"path": testRuntimePath, "runtimeArgs": []any{}},
			wantDefault:  "gpu",
		},
		{
			description:  "set as default replaces another default",
			current:      `{"default-runtime": "runc", "runtimes": {"gpu": {"path": "/usr/local/bin/gpu-runtime"}}}`,
			setAsDefault: true,
			wantChanged:  true,
			wantRuntime:  map[string]any{"path": testRuntimePath},
			wantDefault:  "gpu",
			wantNote:     `default-runtime was "runc"`,
		},
		{
			description: "without set as default, another default stays",
			current:     `{"default-runtime": "runc"}`,
			wantChanged: true,
			wantRuntime: map[string]any{"path": testRuntimePath, "runtimeArgs": []any{}},
			wantDefault: "runc",
		},
		{
			description: "a new path updates the entry and keeps its arguments",
			current:     `{"runtimes": {"gpu": {"runtimeArgs": ["--debug"], "path": "/opt/old/gpu-runtime"}}}`,
			runtimePath: "/usr/bin/gpu-runtime",
			wantChanged: true,
			wantRuntime: map[string]any{"path": "/usr/bin/gpu-runtime", "runtimeArgs": []any{"--debug"}},
			wantNote:    `pointed at "/opt/old/gpu-runtime"`,
		},
		{
			description: "malformed: trailing comma",
			current:     "{\n  \"log-level\": \"warn\",\n}\n",
			wantErr:     ErrMalformed,
			wantErrText: []string{"line 3, column 1", "invalid character '}'"},
		},
		{
			description: "malformed: truncated",
			current:     "{\"runtimes\": {",
			wantErr:     ErrMalformed,
			wantErrText: []string{"line 1", "unexpected end of JSON input"},
		},
		{
			description: "malformed: two values",
			current:     "{}\n{}",
			wantErr:     ErrMalformed,
			wantErrText: []string{"unexpected data after the top-level value"},
		},
		{
			description: "not an object",
			current:     `["runtimes"]`,
			wantErr:     ErrMalformed,
			wantErrText: []string{"not a JSON object"},
		},
		{
			description: "runtimes is not an object",
			current:     `{"runtimes": ["gpu"]}`,
			wantErr:     ErrUnexpected,
			wantErrText: []string{`"runtimes" is not a JSON object`},
		},
		{
			description: "relative runtime path",
			current:     `{}`,
			runtimePath: "gpu-runtime",
			wantErr:     ErrInvalidOptions,
			wantErrText: []string{`"gpu-runtime" is not absolute`},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			opts := testOptions()
			opts.SetAsDefault = tc.setAsDefault
			if tc.runtimePath != "" {
				opts.RuntimePath = tc.runtimePath
			}
			current := []byte(tc.current)
			if tc.nilCurrent {
				current = nil
			}
			opts, err := opts.withDefaults(Docker, true)
			var e edit
			if err == nil {
				e, err = configureDocker(current, opts)
			}
			checkErr(t, err, tc.wantErr, tc.wantErrText...)
			if tc.wantErr != nil {
				return
			}
			if e.changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", e.changed, tc.wantChanged)
			}
			if !e.changed && !bytes.Equal(e.content, current) {
				t.Errorf("unchanged, but the content differs:\n%s", e.content)
			}
			if tc.golden != "" {
				checkGolden(t, tc.golden, e.content)
			}
			got := decodeJSON(t, e.content)
			rts, _ := got["runtimes"].(map[string]any)
			gotRuntime, _ := rts["gpu"].(map[string]any)
			if !reflect.DeepEqual(gotRuntime, tc.wantRuntime) {
				t.Errorf("runtimes.gpu = %#v, want %#v", gotRuntime, tc.wantRuntime)
			}
			if def, _ := got["default-runtime"].(string); def != tc.wantDefault {
				t.Errorf("default-runtime = %q, want %q", def, tc.wantDefault)
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(e.notes, "\n"), tc.wantNote) {
				t.Errorf("notes %q lack %q", e.notes, tc.wantNote)
			}
			// Every key but ours keeps its value.
			before := decodeJSON(t, current)
			for _, m := range []map[string]any{before, got} {
				if rts, ok := m["runtimes"].(map[string]any); ok {
					delete(rts, "gpu")
					if len(rts) == 0 {
						delete(m, "runtimes")
					}
				}
				if tc.setAsDefault {
					delete(m, "default-runtime")
				}
			}
			if !reflect.DeepEqual(before, got) {
				t.Errorf("other keys changed:\nbefore %#v\nafter  %#v", before, got)
			}
		})
	}
}

// TestConfigureDockerKeepsValueText checks the promise that values keep their text: numbers
// are not reformatted and escapes stay escapes.
func TestConfigureDockerKeepsValueText(t *testing.T) {
	out, changed, err := pure(t, configureDocker, []byte(otherDaemonJSON), testOptions())
	if err != nil || !changed {
		t.Fatalf("ConfigureDocker: changed %v, err %v", changed, err)
	}
	for _, text := range []string{`12345678901234567890`, `1e3`, `0.10`, `2.50`, `"caf\u00e9"`, `"a=<b>&c"`, `null`} {
		if !bytes.Contains(out, []byte(text)) {
			t.Errorf("result lost the text %s:\n%s", text, out)
		}
	}
	// Key order is kept: ours come last.
	keys := []string{`"log-level"`, `"max-concurrent-downloads"`, `"ratio"`, `"nvidia"`, `"gpu"`, `"unknown-to-us"`}
	last := -1
	for _, k := range keys {
		i := bytes.Index(out, []byte(k))
		if i < last {
			t.Errorf("key %s moved:\n%s", k, out)
		}
		last = i
	}
}

func TestUnconfigureDocker(t *testing.T) {
	configuredDefault, _, err := pure(t, configureDocker, []byte(otherDaemonJSON), Options{RuntimePath: testRuntimePath, SetAsDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		current     string
		nilCurrent  bool
		wantChanged bool
		want        string // the result, compared decoded; "" skips
		golden      string
		wantNote    string
		wantErr     error
		wantErrText []string
	}{
		{
			description: "no file",
			nilCurrent:  true,
		},
		{
			description: "empty file",
			current:     "",
		},
		{
			description: "not configured",
			current:     otherDaemonJSON,
			want:        otherDaemonJSON,
		},
		{
			description: "configured as default: entry and default removed, the rest as before",
			current:     string(configuredDefault),
			wantChanged: true,
			want:        otherDaemonJSON,
			golden:      "docker/unconfigured.json",
		},
		{
			description: "last runtime removed takes the runtimes key with it",
			current:     `{"runtimes": {"gpu": {"path": "/usr/local/bin/gpu-runtime"}}, "debug": true}`,
			wantChanged: true,
			want:        `{"debug": true}`,
		},
		{
			description: "someone else's default is left alone",
			current:     `{"runtimes": {"gpu": {"path": "/opt/x/gpu-runtime"}, "kata": {"path": "/k"}}, "default-runtime": "kata"}`,
			wantChanged: true,
			want:        `{"runtimes": {"kata": {"path": "/k"}}, "default-runtime": "kata"}`,
			wantNote:    `default-runtime "kata" is not ours`,
		},
		{
			description: "a dangling default naming us is removed",
			current:     `{"default-runtime": "gpu"}`,
			wantChanged: true,
			want:        `{}`,
		},
		{
			description: "malformed",
			current:     `{"runtimes": {"gpu": }}`,
			wantErr:     ErrMalformed,
			wantErrText: []string{"line 1, column 22", "invalid character '}'"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			current := []byte(tc.current)
			if tc.nilCurrent {
				current = nil
			}
			e, err := unconfigureDocker(current, completed(t, testOptions()))
			checkErr(t, err, tc.wantErr, tc.wantErrText...)
			if tc.wantErr != nil {
				return
			}
			if e.changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", e.changed, tc.wantChanged)
			}
			if !e.changed && !bytes.Equal(e.content, current) {
				t.Errorf("unchanged, but the content differs:\n%s", e.content)
			}
			if tc.want != "" {
				if got, want := decodeJSON(t, e.content), decodeJSON(t, []byte(tc.want)); !reflect.DeepEqual(got, want) {
					t.Errorf("got %#v\nwant %#v", got, want)
				}
			}
			if tc.golden != "" {
				checkGolden(t, tc.golden, e.content)
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(e.notes, "\n"), tc.wantNote) {
				t.Errorf("notes %q lack %q", e.notes, tc.wantNote)
			}
		})
	}
}

// TestUnconfigureDockerOurs: unconfigure tells gpu-runtime's runtimes by their path, not their
// name: with no name, every runtime of ours goes (each with what configure displaced put
// back); a name that is not ours (NVIDIA's "nvidia") is left, with a note saying whose it is.
func TestUnconfigureDockerOurs(t *testing.T) {
	const nvidia = `{"path": "nvidia-container-runtime", "runtimeArgs": []}`
	// The host before configure --runtime-name nvidia --set-as-default: NVIDIA's runtime, the default.
	before := `{"runtimes": {"nvidia": ` + nvidia + `}, "default-runtime": "nvidia", "debug": true}`
	testCases := []struct {
		description string
		current     string
		backups     []string // newest first
		name        string   // --runtime-name; "" for every runtime of ours
		runtimePath string   // --runtime-path
		want        string
		wantNames   []string
		wantNotes   []string
	}{
		{
			description: "gpu only",
			current:     `{"runtimes": {"gpu": {"path": "/usr/bin/gpu-runtime"}, "runc2": {"path": "/usr/bin/runc"}}, "default-runtime": "gpu"}`,
			want:        `{"runtimes": {"runc2": {"path": "/usr/bin/runc"}}}`,
			wantNames:   []string{"gpu"},
		},
		{
			description: "nvidia ours as default, NVIDIA's displaced: both put back",
			current:     `{"runtimes": {"nvidia": {"path": "/usr/bin/gpu-runtime", "runtimeArgs": []}}, "default-runtime": "nvidia", "debug": true}`,
			backups:     []string{before},
			want:        before,
			wantNames:   []string{"nvidia"},
			wantNotes:   []string{`docker runtime "nvidia" is again what it was before configure: {"path":"nvidia-container-runtime","runtimeArgs":[]}`},
		},
		{
			description: "nvidia ours as default, named: the same",
			current:     `{"runtimes": {"nvidia": {"path": "/usr/bin/gpu-runtime", "runtimeArgs": []}}, "default-runtime": "nvidia", "debug": true}`,
			backups:     []string{before},
			name:        "nvidia",
			want:        before,
			wantNames:   []string{"nvidia"},
		},
		{
			description: "nvidia is NVIDIA's own, named: left",
			current:     before,
			name:        "nvidia",
			want:        before,
			wantNotes:   []string{`docker runtime "nvidia" is not gpu-runtime's (its path is "nvidia-container-runtime"); left as it is`},
		},
		{
			description: "nvidia is NVIDIA's own, gpu ours: only gpu goes",
			current:     `{"runtimes": {"nvidia": ` + nvidia + `, "gpu": {"path": "/usr/local/bin/gpu-runtime"}}, "default-runtime": "nvidia"}`,
			want:        `{"runtimes": {"nvidia": ` + nvidia + `}, "default-runtime": "nvidia"}`,
			wantNames:   []string{"gpu"},
			wantNotes:   []string{`docker default-runtime "nvidia" is not ours; left as it is`},
		},
		{
			description: "gpu is someone else's: left, and said",
			current:     `{"runtimes": {"gpu": {"path": "/opt/other/runtime"}}}`,
			want:        `{"runtimes": {"gpu": {"path": "/opt/other/runtime"}}}`,
			wantNotes:   []string{`docker runtime "gpu" is not gpu-runtime's (its path is "/opt/other/runtime"); left as it is`},
		},
		{
			description: "two names of ours, the second the default: both go, the default put back",
			current:     `{"runtimes": {"gpu": {"path": "/usr/bin/gpu-runtime"}, "nvidia": {"path": "/usr/bin/gpu-runtime"}}, "default-runtime": "nvidia"}`,
			backups: []string{
				`{"runtimes": {"gpu": {"path": "/usr/bin/gpu-runtime"}}, "default-runtime": "runc"}`,
				`{"default-runtime": "runc"}`,
			},
			want:      `{"default-runtime": "runc"}`,
			wantNames: []string{"gpu", "nvidia"},
		},
		{
			description: "a runtime path of another name, given: ours",
			current:     `{"runtimes": {"gpu": {"path": "/opt/gr/runtime"}}}`,
			runtimePath: "/opt/gr/runtime",
			want:        `{}`,
			wantNames:   []string{"gpu"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			opts := Options{RuntimeName: tc.name, RuntimePath: tc.runtimePath}
			opts, err := opts.withDefaults(Docker, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range tc.backups {
				opts.backups = append(opts.backups, []byte(b))
			}
			e, err := unconfigureDocker([]byte(tc.current), opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := decodeJSON(t, e.content), decodeJSON(t, []byte(tc.want)); !reflect.DeepEqual(got, want) {
				t.Errorf("got %s\nwant %s", e.content, tc.want)
			}
			if e.changed != (tc.current != tc.want) {
				t.Errorf("changed = %v", e.changed)
			}
			if !reflect.DeepEqual(e.names, tc.wantNames) {
				t.Errorf("names %q, want %q", e.names, tc.wantNames)
			}
			for _, n := range tc.wantNotes {
				if !slices.Contains(e.notes, n) {
					t.Errorf("notes %q lack %q", e.notes, n)
				}
			}
		})
	}
}

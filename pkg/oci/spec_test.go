package oci

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

const specWithUnknown = `{
  "ociVersion": "1.0.2-dev",
  "futureTopLevel": {"a": [1, 2, 3]},
  "process": {"terminal": false, "cwd": "/", "args": ["sh"], "env": ["A=1"], "futureProcess": "keep me",
              "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 18446744073709551615, "soft": 1024, "futureRlimit": true}]},
  "root": {"path": "rootfs", "futureRoot": 7},
  "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}]},
  "linux": {"futureLinux": {"nested": null}, "resources": {"devices": [{"allow": false, "access": "rwm"}], "futureResources": 1}}
}`

func writeSpec(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteKeepsUnknownFields(t *testing.T) {
	p := writeSpec(t, specWithUnknown, 0o600)
	sf, err := readSpec(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(sf.Spec, WithEnv("B=2"), WithoutHooksNamed("nvidia-container-runtime-hook")); err != nil {
		t.Fatal(err)
	}
	if err := sf.Write(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	process := got["process"].(map[string]any)
	linux := got["linux"].(map[string]any)
	checks := []struct {
		description string
		got, want   any
	}{
		{"top-level unknown", got["futureTopLevel"], map[string]any{"a": []any{1.0, 2.0, 3.0}}},
		{"nested unknown", process["futureProcess"], "keep me"},
		{"unknown in unchanged array element", process["rlimits"].([]any)[0].(map[string]any)["futureRlimit"], true},
		{"unknown in root", got["root"].(map[string]any)["futureRoot"], 7.0},
		{"unknown null kept", linux["futureLinux"], map[string]any{"nested": nil}},
		{"unknown under resources", linux["resources"].(map[string]any)["futureResources"], 1.0},
		{"edit applied", process["env"], []any{"A=1", "B=2"}},
		{"removed hook stage stays removed", got["hooks"], nil},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v want %#v", c.description, c.got, c.want)
		}
	}
	// uint64 max must survive as written (no float rounding).
	if !json.Valid(data) || !bytes.Contains(data, []byte("18446744073709551615")) {
		t.Errorf("rlimit value lost: %s", data)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// readSpec reads and decodes the spec at p, as a create does.
func readSpec(t *testing.T, p string) (*SpecFile, error) {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return ParseSpec(p, raw)
}

func TestParseSpecErrors(t *testing.T) {
	testCases := []struct {
		description string
		content     *string
		wantPrefix  string
	}{
		{description: "missing file", content: nil, wantPrefix: "stat spec: "},
		{description: "malformed json", content: ptr(`{"process": `), wantPrefix: "decode spec "},
		{description: "wrong type", content: ptr(`{"process": {"env": "A=1"}}`), wantPrefix: "decode spec "},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.json")
			if tc.content != nil {
				if err := os.WriteFile(p, []byte(*tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var raw []byte
			if tc.content != nil {
				raw = []byte(*tc.content)
			}
			_, err := ParseSpec(p, raw)
			if err == nil || len(err.Error()) < len(tc.wantPrefix) || err.Error()[:len(tc.wantPrefix)] != tc.wantPrefix {
				t.Fatalf("error = %v, want prefix %q", err, tc.wantPrefix)
			}
		})
	}
}

func ptr(s string) *string { return &s }

package config

import (
	"strings"
	"testing"
)

// TestSuggest (issue 25 item 11): an unknown key gets the nearest known one when it is a
// likely typo, and nothing when none is near; a huge key is not compared at all.
func TestSuggest(t *testing.T) {
	testCases := []struct {
		description string
		key, want   string
	}{
		{description: "a letter missing", key: "driver.rot", want: "driver.root"},
		{description: "two letters swapped", key: "runtime.log-levle", want: "runtime.log-level"},
		{description: "another case", key: "Driver.Root", want: "driver.root"},
		{description: "a section", key: "drivr", want: "driver"},
		{description: "a share's key keeps the share's name", key: "mps.shares.small.devics", want: "mps.shares.small.devices"},
		{description: "a share's key with a dotted name", key: `mps.shares."a.b".ui`, want: `mps.shares."a.b".uid`},
		{description: "a known key is no typo", key: "driver.root"},
		{description: "too far off", key: "driver.typo"},
		{description: "a short key is not guessed at", key: "cdi.x"},
		{description: "huge", key: "driver." + strings.Repeat("r", 100000)},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, ok := Suggest(tc.key)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("Suggest(%.40q) = %q, %v; want %q", tc.key, got, ok, tc.want)
			}
		})
	}
	// In a file: the warning names the key and the nearest known one.
	_, warnings, err := Parse([]byte("[mps.shares.a]\ndevices = [\"0\"]\ndevics = [\"1\"]\n[drivr]\nroot = \"/\"\n"), "f.toml")
	want := []string{`config f.toml: unknown key "mps.shares.a.devics" ignored (did you mean "mps.shares.a.devices"?)`,
		`config f.toml: unknown key "drivr" ignored (did you mean "driver"?)`}
	if err != nil || strings.Join(warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("Parse: %v, warnings\n%s\nwant\n%s", err, strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
}

package requirements

import (
	"errors"
	"testing"
)

func TestCompareVersions(t *testing.T) {
	testCases := []struct {
		description string
		a, b        string
		want        int
	}{
		{description: "equal", a: "12.4", b: "12.4", want: 0},
		{description: "trailing zero component", a: "12", b: "12.0", want: 0},
		{description: "several trailing zero components", a: "12.0.0", b: "12", want: 0},
		{description: "zero equals zero", a: "0", b: "0.0", want: 0},
		{description: "leading zeros in a driver component", a: "580.159.04", b: "580.159.4", want: 0},
		{description: "leading zeros everywhere", a: "00012.004", b: "12.4", want: 0},
		{description: "numeric, not lexical", a: "12.10", b: "12.4", want: 1},
		{description: "more digits is larger", a: "9", b: "10", want: -1},
		{description: "extra non-zero component is larger", a: "1.0.1", b: "1", want: 1},
		{description: "shorter is smaller when the other goes on non-zero", a: "550.54", b: "550.54.15", want: -1},
		{description: "major decides", a: "13.0", b: "12.9.9", want: 1},
		{description: "components beyond 64 bits", a: "99999999999999999999999", b: "1", want: 1},
		{description: "components beyond 64 bits, same length", a: "100000000000000000000", b: "100000000000000000001", want: -1},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := CompareVersions(tc.a, tc.b)
			if err != nil {
				t.Fatalf("CompareVersions(%q, %q): %v", tc.a, tc.b, err)
			}
			if got != tc.want {
				t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
			back, err := CompareVersions(tc.b, tc.a)
			if err != nil || back != -tc.want {
				t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d (antisymmetry)", tc.b, tc.a, back, err, -tc.want)
			}
		})
	}
}

func TestCompareVersionsInvalid(t *testing.T) {
	testCases := []struct {
		description string
		version     string
		wantErr     string
	}{
		{description: "empty", version: "", wantErr: `invalid version "": empty`},
		{description: "empty middle component", version: "12..0", wantErr: `invalid version "12..0": empty component`},
		{description: "leading dot", version: ".1", wantErr: `invalid version ".1": empty component`},
		{description: "trailing dot", version: "1.", wantErr: `invalid version "1.": empty component`},
		{description: "letters", version: "a.b", wantErr: `invalid version "a.b": component "a" is not a number`},
		{description: "suffix", version: "12.4-rc1", wantErr: `invalid version "12.4-rc1": component "4-rc1" is not a number`},
		{description: "sign", version: "+1", wantErr: `invalid version "+1": component "+1" is not a number`},
		{description: "negative", version: "-1", wantErr: `invalid version "-1": component "-1" is not a number`},
		{description: "space", version: " 1", wantErr: `invalid version " 1": component " 1" is not a number`},
		{description: "exponent", version: "1e3", wantErr: `invalid version "1e3": component "1e3" is not a number`},
		{description: "non-ASCII digit", version: "١٢", wantErr: `invalid version "١٢": component "١٢" is not a number`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			for _, args := range [][2]string{{tc.version, "1"}, {"1", tc.version}} {
				_, err := CompareVersions(args[0], args[1])
				if !errors.Is(err, ErrInvalidVersion) {
					t.Fatalf("CompareVersions(%q, %q) error = %v, want ErrInvalidVersion", args[0], args[1], err)
				}
				if err.Error() != tc.wantErr {
					t.Errorf("CompareVersions(%q, %q) error = %q, want %q", args[0], args[1], err, tc.wantErr)
				}
			}
		})
	}
}

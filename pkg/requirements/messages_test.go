package requirements

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// maxMessage bounds every error and warning about an expression, however long (up to
// MaxExpressionLength): a message quotes a few values of at most 256 bytes each.
const maxMessage = 8 << 10

// cutQuoted is how a message shows a value longer than 256 bytes.
func cutQuoted(s string) string {
	return strconv.Quote(s[:256]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// TestMessagesBounded: an expression of 16 KiB whose one factor fills it is named, with
// the factor, its operator, value or version component, each quoted cut; before, each was
// quoted whole, nested, so one factor appeared three times in one message.
func TestMessagesBounded(t *testing.T) {
	const n = 16000
	ones, xs := strings.Repeat("1", n), strings.Repeat("x", n)
	testCases := []struct {
		description string
		expr        string
		host        Host
		wantErr     string // the error's text; "" for none
		wantWarning string // the one warning's text; "" for none
	}{
		{description: "unknown operator", expr: "cuda" + strings.Repeat("<", n) + "1",
			wantErr: "malformed requirement NVIDIA_REQUIRE_X=" + cutQuoted("cuda"+strings.Repeat("<", n)+"1") + ": factor " + cutQuoted("cuda"+strings.Repeat("<", n)+"1") +
				": unknown operator " + cutQuoted(strings.Repeat("<", n)) + " (want one of = != < <= > >=)"},
		{description: "a version component that is not a number", expr: "cuda>=1." + xs,
			wantErr: "malformed requirement NVIDIA_REQUIRE_X=" + cutQuoted("cuda>=1."+xs) + ": factor " + cutQuoted("cuda>=1."+xs) +
				": invalid version " + cutQuoted("1."+xs) + ": component " + cutQuoted(xs) + " is not a number"},
		{description: "an operator in the value", expr: "cuda>=1" + xs + ">2",
			wantErr: "malformed requirement NVIDIA_REQUIRE_X=" + cutQuoted("cuda>=1"+xs+">2") + ": factor " + cutQuoted("cuda>=1"+xs+">2") +
				": value " + cutQuoted("1"+xs+">2") + " contains an operator character"},
		{description: "an empty factor", expr: "foo=" + ones + ",,",
			wantErr: "malformed requirement NVIDIA_REQUIRE_X=" + cutQuoted("foo="+ones+",,") + ": term " + cutQuoted("foo="+ones+",,") + ": empty factor"},
		{description: "an unknown key", expr: "foo=" + ones, host: defHost,
			wantWarning: "NVIDIA_REQUIRE_X=" + cutQuoted("foo="+ones) + `: unknown key "foo" in factor ` + cutQuoted("foo="+ones) + " (known keys: arch, brand, cuda, driver); treated as satisfied"},
		{description: "a host value that is not a version", expr: "cuda>=1,foo=" + ones, host: host("", "550.54.15"),
			wantErr:     "check NVIDIA_REQUIRE_X=" + cutQuoted("cuda>=1,foo="+ones) + ": evaluate " + cutQuoted("cuda>=1,foo="+ones) + `: host cuda version: invalid version "": empty`,
			wantWarning: "NVIDIA_REQUIRE_X=" + cutQuoted("cuda>=1,foo="+ones) + `: unknown key "foo" in factor ` + cutQuoted("foo="+ones) + " (known keys: arch, brand, cuda, driver); treated as satisfied"},
		{description: "unsatisfied: the first term as written, cut", expr: "cuda>=" + ones, host: defHost,
			wantErr: "unsatisfied condition: cuda>=" + ones[:250] + "… (16006 bytes), please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if len(tc.expr) > MaxExpressionLength {
				t.Fatalf("the expression is %d bytes, more than parsed", len(tc.expr))
			}
			warnings, err := Check([]Requirement{{Name: "NVIDIA_REQUIRE_X", Expression: tc.expr}}, tc.host)
			for _, w := range warnings {
				if len(w) > maxMessage {
					t.Errorf("a warning of %d bytes", len(w))
				}
			}
			if err != nil && len(err.Error()) > maxMessage {
				t.Errorf("an error of %d bytes", len(err.Error()))
			}
			if got := errText(err); got != tc.wantErr {
				t.Errorf("error =\n%.1000s\nwant\n%.1000s", got, tc.wantErr)
			}
			if tc.wantWarning == "" && len(warnings) > 0 || tc.wantWarning != "" && (len(warnings) != 1 || warnings[0] != tc.wantWarning) {
				t.Errorf("warnings =\n%.1000q\nwant\n%.1000q", warnings, tc.wantWarning)
			}
			if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidVersion) && !errors.Is(err, ErrUnsatisfied) {
				t.Errorf("error %v wraps none of the sentinels", err)
			}
		})
	}
}

package requirements

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// CompareVersions compares two dotted numeric versions and returns -1, 0 or +1 as a is less
// than, equal to or greater than b.
//
// Components are compared as unbounded decimal numbers, so leading zeros do not count
// ("580.159.04" == "580.159.4") and no component overflows. Missing and trailing zero
// components are equal ("12" == "12.0" == "12.0.0"). A version that is empty, has an empty
// component ("12..0", ".1", "1.") or a component that is not made of ASCII digits ("a.b",
// "12-rc", "+1") is rejected with an error wrapping ErrInvalidVersion.
func CompareVersions(a, b string) (int, error) {
	va, err := ParseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := ParseVersion(b)
	if err != nil {
		return 0, err
	}
	return va.Compare(vb), nil
}

// Version holds the components of a dotted version with leading zeros removed ("0" for zero).
// Comparison reads missing components as "0", which makes trailing zero components irrelevant.
type Version []string

// ParseVersion parses a dotted numeric version as CompareVersions does, for callers that
// compare one version many times (a sort parses each once).
func ParseVersion(s string) (Version, error) {
	if s == "" {
		return nil, fmt.Errorf("%w %s: empty", ErrInvalidVersion, quote.Value(s))
	}
	parts := strings.Split(s, ".")
	v := make(Version, 0, len(parts))
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("%w %s: empty component", ErrInvalidVersion, quote.Value(s))
		}
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return nil, fmt.Errorf("%w %s: component %s is not a number", ErrInvalidVersion, quote.Value(s), quote.Value(p))
			}
		}
		p = strings.TrimLeft(p, "0")
		if p == "" {
			p = "0"
		}
		v = append(v, p)
	}
	return v, nil
}

// Compare returns -1, 0 or +1 as v is less than, equal to or greater than w.
func (v Version) Compare(w Version) int {
	for i := range max(len(v), len(w)) {
		// Decimal numbers without leading zeros: the longer is larger, equal lengths
		// compare digit by digit.
		a, b := component(v, i), component(w, i)
		if c := cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)); c != 0 {
			return c
		}
	}
	return 0
}

func component(v Version, i int) string {
	if i < len(v) {
		return v[i]
	}
	return "0"
}

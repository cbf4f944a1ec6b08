package requirements

import (
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
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	return compareParsed(va, vb), nil
}

// ParseVersion parses a dotted numeric version as CompareVersions does, for callers that
// compare one version many times (a sort parses each once).
func ParseVersion(s string) (Version, error) { return parseVersion(s) }

// Compare returns -1, 0 or +1 as v is less than, equal to or greater than w.
func (v Version) Compare(w Version) int { return compareParsed(v, w) }

// Version holds the components of a dotted version with leading zeros removed ("0" for zero).
// Comparison reads missing components as "0", which makes trailing zero components irrelevant.
type Version []string

func parseVersion(s string) (Version, error) {
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

func compareParsed(a, b Version) int {
	n := max(len(a), len(b))
	for i := 0; i < n; i++ {
		if c := compareComponent(component(a, i), component(b, i)); c != 0 {
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

// compareComponent compares two decimal numbers without leading zeros: the longer is larger,
// and equal lengths compare digit by digit.
func compareComponent(a, b string) int {
	switch {
	case len(a) != len(b):
		if len(a) < len(b) {
			return -1
		}
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

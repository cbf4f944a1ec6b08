// Package capabilities defines the NVIDIA driver capabilities a container can ask for
// (NVIDIA_DRIVER_CAPABILITIES) and the driver files each one brings into the container.
// It is pure data: it never touches the host.
package capabilities

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// Capability is one value of NVIDIA_DRIVER_CAPABILITIES.
type Capability string

// The capabilities users can name.
const (
	Compute  Capability = "compute"
	Compat32 Capability = "compat32"
	Graphics Capability = "graphics"
	Utility  Capability = "utility"
	Video    Capability = "video"
	Display  Capability = "display"
	NGX      Capability = "ngx"
)

// All lists every capability in a stable order.
var All = []Capability{Compute, Compat32, Display, Graphics, NGX, Utility, Video}

// ErrUnknown is returned when a capability name is not one of All.
var ErrUnknown = errors.New("unknown driver capability")

// Set is a set of capabilities.
type Set map[Capability]bool

// Default is what a container gets when NVIDIA_DRIVER_CAPABILITIES is unset or empty.
func Default() Set { return Set{Utility: true, Compute: true} }

// Everything is what "all" means.
func Everything() Set {
	s := Set{}
	for _, c := range All {
		s[c] = true
	}
	return s
}

// Parse reads a NVIDIA_DRIVER_CAPABILITIES value. Tokens are comma-separated and trimmed;
// empty tokens are dropped; "all" anywhere selects everything. An empty value yields Default().
func Parse(value string) (Set, error) {
	s := Set{}
	var unknown []string
	for _, tok := range strings.Split(value, ",") {
		tok = strings.TrimSpace(tok)
		switch {
		case tok == "":
			continue
		case tok == "all":
			return Everything(), nil
		case slices.Contains(All, Capability(tok)):
			s[Capability(tok)] = true
		default:
			unknown = append(unknown, tok)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w %s in %s: allowed are all, %s",
			ErrUnknown, quote.List(unknown), quote.Var("NVIDIA_DRIVER_CAPABILITIES", value), joinAll())
	}
	if len(s) == 0 {
		return Default(), nil
	}
	return s, nil
}

func joinAll() string {
	names := make([]string, len(All))
	for i, c := range All {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// Has reports whether c is in the set, taking implications into account:
// video needs the compute libraries and display needs the graphics ones.
func (s Set) Has(c Capability) bool {
	switch c {
	case Compute:
		return s[Compute] || s[Video]
	case Graphics:
		return s[Graphics] || s[Display]
	}
	return s[c]
}

// String lists the set in a stable order, comma-separated.
func (s Set) String() string {
	var names []string
	for c, ok := range s {
		if ok {
			names = append(names, string(c))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

package capabilities

import (
	"testing"
)

func TestParseAndHas(t *testing.T) {
	testCases := []struct {
		description string
		value       string
		has         []Capability
		hasNot      []Capability
	}{
		{description: "empty is utility,compute", value: "", has: []Capability{Utility, Compute}, hasNot: []Capability{Graphics, Video, Compat32}},
		{description: "compute alone", value: "compute", has: []Capability{Compute}, hasNot: []Capability{Utility}},
		{description: "utility alone", value: "utility", has: []Capability{Utility}, hasNot: []Capability{Compute}},
		{description: "video implies compute", value: "video", has: []Capability{Video, Compute}, hasNot: []Capability{Utility, Graphics}},
		{description: "display implies graphics", value: "display", has: []Capability{Display, Graphics}, hasNot: []Capability{Compute}},
		{description: "all", value: " all ", has: All},
		{description: "all among others", value: "compute,all", has: All},
		{description: "spaces and empty tokens", value: " ngx , ,compat32", has: []Capability{NGX, Compat32}, hasNot: []Capability{Compute}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			s, err := Parse(tc.value)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.has {
				if !s.Has(c) {
					t.Errorf("%q: missing %s (set %s)", tc.value, c, s)
				}
			}
			for _, c := range tc.hasNot {
				if s.Has(c) {
					t.Errorf("%q: unexpected %s (set %s)", tc.value, c, s)
				}
			}
		})
	}
}

func TestTableCoversEveryLibraryCapability(t *testing.T) {
	for _, c := range []Capability{Utility, Compute, Video, Graphics, NGX} {
		if len(FilesOf(c).Libraries) == 0 {
			t.Errorf("capability %s has no libraries", c)
		}
	}
	seen := map[string]Capability{}
	for _, c := range All {
		for _, l := range FilesOf(c).Libraries {
			if prev, dup := seen[l]; dup {
				t.Errorf("library %s listed under %s and %s", l, prev, c)
			}
			seen[l] = c
		}
	}
}

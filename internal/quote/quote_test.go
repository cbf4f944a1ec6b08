package quote

import (
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	if got := Value("0,1"); got != `"0,1"` {
		t.Errorf("short: %s", got)
	}
	long := strings.Repeat("x", 1000)
	if got, want := Value(long), `"`+strings.Repeat("x", 256)+`"… (1000 bytes)`; got != want {
		t.Errorf("long: %s", got)
	}
	if got := Var("NVIDIA_VISIBLE_DEVICES", "0"); got != `NVIDIA_VISIBLE_DEVICES="0"` {
		t.Errorf("var: %s", got)
	}
}

func TestList(t *testing.T) {
	testCases := []struct {
		items []string
		want  string
	}{
		{[]string{"a"}, `"a"`},
		{[]string{"a", "b", "c", "d", "e"}, `"a", "b", "c", "d", "e"`},
		{[]string{"a", "b", "c", "d", "e", "f", "g"}, `"a", "b", "c", "d", "e" and 2 more`},
	}
	for _, tc := range testCases {
		if got := List(tc.items); got != tc.want {
			t.Errorf("List(%q) = %s, want %s", tc.items, got, tc.want)
		}
	}
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		items []string
		max   int
		want  string
	}{
		{nil, 3, ""},
		{[]string{"a", "b", "c"}, 3, "a, b, c"},
		{[]string{"a", "b", "c", "d", "e"}, 3, "a, b, c and 2 more"},
	} {
		if got := Join(tc.items, tc.max); got != tc.want {
			t.Errorf("Join(%q, %d) = %q, want %q", tc.items, tc.max, got, tc.want)
		}
	}
}

package quote

import (
	"errors"
	"strconv"
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

func TestCut(t *testing.T) {
	if got := Cut("short"); got != "short" {
		t.Errorf("short: %s", got)
	}
	long := strings.Repeat("x", 1000)
	if got, want := Cut(long), strings.Repeat("x", 256)+"… (1000 bytes)"; got != want {
		t.Errorf("long: %s", got)
	}
	// A character across the cut is left out whole: the text stays valid UTF-8.
	mixed := strings.Repeat("x", 255) + "é" + strings.Repeat("x", 100)
	if got, want := Cut(mixed), strings.Repeat("x", 255)+"… (357 bytes)"; got != want {
		t.Errorf("rune at the cut: %q", got)
	}
}

func TestError(t *testing.T) {
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	inner := errors.New("invalid device " + strconv.Quote(strings.Repeat("y", 1<<20)))
	err := Error(inner)
	if len(err.Error()) > MaxValue+32 || !strings.HasPrefix(err.Error(), `invalid device "yyy`) || !strings.HasSuffix(err.Error(), "… (1048593 bytes)") {
		t.Errorf("text %.300q… (%d bytes)", err.Error(), len(err.Error()))
	}
	if !errors.Is(err, inner) {
		t.Error("the cut error does not unwrap to the library's")
	}
}

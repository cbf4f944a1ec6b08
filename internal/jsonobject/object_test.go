package jsonobject

import (
	"encoding/json"
	"testing"
)

// TestRoundTrip: members come back in order with their values' text as read (spacing,
// number spelling, escapes), duplicates included; names are written without HTML escaping.
func TestRoundTrip(t *testing.T) {
	in := `{"b": 1.50, "a":{"x" : [1, 2]}, "b":"\u00e9", "<tag>":true}`
	o, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"b":1.50,"a":{"x" : [1, 2]},"b":"\u00e9","<tag>":true}`
	if got := string(o.Encode()); got != want {
		t.Errorf("Encode = %s, want %s", got, want)
	}
	if v, ok := o.Get("b"); !ok || string(v) != `"\u00e9"` {
		t.Errorf(`Get("b") = %s, %v; want the last one, as encoding/json decodes it`, v, ok)
	}
	if _, ok := o.Get("c"); ok {
		t.Error(`Get("c") found a member`)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`[1]`, "want a JSON object, got an array"},
		{`"s"`, "want a JSON object, got a string"},
		{`{} {}`, "data after the JSON value"},
		{`{"a":}`, "invalid character '}' looking for beginning of value"},
		{`{"a":1`, "unexpected EOF"},
	} {
		if _, err := Parse([]byte(tc.in)); err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%s) = %v, want %q", tc.in, err, tc.want)
		}
	}
	o, err := Parse([]byte(" null "))
	if err != nil || o != nil {
		t.Errorf("Parse(null) = %v, %v; want a nil object", o, err)
	}
	if _, ok := o.Get("a"); ok || string(o.Clone().Encode()) != "{}" || o.Duplicate(nil) != "" {
		t.Error("a nil object is not an absent one")
	}
}

// TestEdit: Set replaces where the name first is and drops its duplicates, or appends;
// Remove deletes every member of the name.
func TestEdit(t *testing.T) {
	o, err := Parse([]byte(`{"a":1,"b":2,"a":3,"c":4}`))
	if err != nil {
		t.Fatal(err)
	}
	c := o.Clone()
	o.Set("a", json.RawMessage(`5`))
	o.Set("d", json.RawMessage(`6`))
	if got := string(o.Encode()); got != `{"a":5,"b":2,"c":4,"d":6}` {
		t.Errorf("after Set: %s", got)
	}
	c.Remove("a")
	if got := string(c.Encode()); got != `{"b":2,"c":4}` {
		t.Errorf("after Remove: %s", got)
	}
}

func TestDuplicate(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"b":2}`, ""},
		{`{"a":1,"a":2}`, `"a" appears twice`},
		{`{"Mounts":[],"hooks":{}}`, `"Mounts" differs from "mounts" only in case`},
		{`{"ROOT":{}}`, ""}, // not a decoded member: runc's decoder reads it, nothing to merge
	} {
		o, err := Parse([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Duplicate([]string{"mounts", "hooks"}); got != tc.want {
			t.Errorf("Duplicate(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"process": `"process"`, "a<b>&c": `"a<b>&c"`, `q"\`: `"q\"\\"`, "tab\t": `"tab\t"`, "é": `"é"`, "\u2028": `"\u2028"`, "\xff": `"\ufffd"`,
	} {
		if got := string(String(in)); got != want {
			t.Errorf("String(%q) = %s, want %s", in, got, want)
		}
	}
}

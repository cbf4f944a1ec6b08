package quote

import (
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// TestTOML: what TOMLString and TOMLKey write reads back, through go-toml, as the text and
// key they were given.
func TestTOML(t *testing.T) {
	for _, s := range []string{"", "plain", `quo"te`, `back\slash`, "new\nline\ttab", "nul\x00bell\x07del\x7f", "é ü 漢", "ünicode key"} {
		var doc map[string]any
		text := TOMLKey("section", s) + " = " + TOMLString(s) + "\n"
		if err := toml.Unmarshal([]byte(text), &doc); err != nil {
			t.Errorf("%q: %v\n%s", s, err, text)
			continue
		}
		if s == "" {
			continue // an empty key is quoted ""; go-toml keeps it
		}
		section, _ := doc["section"].(map[string]any)
		if got, _ := section[s].(string); got != s {
			t.Errorf("%q read back as %q from\n%s", s, got, text)
		}
	}
	if got := TOMLKey("plugins", "io.containerd.grpc.v1.cri", "containerd"); got != `plugins."io.containerd.grpc.v1.cri".containerd` {
		t.Errorf("TOMLKey = %s", got)
	}
}

func TestTOMLType(t *testing.T) {
	var doc map[string]any
	text := "t = {}\na = [1]\ns = \"x\"\nb = true\ni = 1\nf = 1.5\nd = 1979-05-27\n"
	if err := toml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"t": "a table", "a": "an array", "s": "a string", "b": "a boolean", "i": "an integer", "f": "a float", "d": "a date or time"}
	for k, w := range want {
		if got := TOMLType(doc[k]); got != w {
			t.Errorf("TOMLType(%s) = %q, want %q", k, got, w)
		}
	}
	if got := TOMLType(nil); got != "empty" {
		t.Errorf("TOMLType(nil) = %q", got)
	}
}

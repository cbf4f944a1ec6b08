package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse checks that no input makes Parse or parseRuntime panic, that every error wraps
// ErrInvalid and words a type error in TOML's terms, and that every Config it returns is valid.
//
//	go test -run='^$' -fuzz=FuzzParse -fuzztime=20s ./pkg/config/
func FuzzParse(f *testing.F) {
	shipped, err := os.ReadFile(shippedConfig)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	for _, seed := range []string{
		"",
		"[runtime]\nlog-level = 5\n",
		"hook = { path = true }\n",
		"[[hook]]\n[hook.ldconfig]\ndriver.root.x = 1\n",
		"[runtime]\nlog-level = \"info\"\nlog-level = \"debug\"\n",
		"[a]\n[[a.b]]\nx = 1\n[[a.b]]\nx = 1\n[a]\n",
		"[runtime]\nruntimes = [\"runc\", \"\", 1]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, rok := parseRuntime(data) // start and delete read any file this way: it must not panic either
		cfg, _, err := Parse(data, "/fuzz.toml")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error %v does not wrap ErrInvalid", err)
			}
			// A type error is worded in TOML's terms, never go-toml's Go-typed words (a bad
			// value's message, "config …: invalid …", may quote the input: not checked).
			if msg := err.Error(); strings.HasPrefix(msg, "parse config ") &&
				(strings.Contains(msg, "cannot decode TOML") || strings.Contains(msg, "cannot store")) {
				t.Fatalf("Parse error in go-toml's words: %v", err)
			}
			return
		}
		if problems := cfg.clean(); len(problems) > 0 {
			t.Fatalf("Parse returned an invalid config %+v: %q", cfg, problems)
		}
		// The pass-through reading of [runtime] agrees with the full parse.
		if !rok || !reflect.DeepEqual(rc.Runtime, cfg.Runtime) {
			t.Fatalf("parseRuntime = %+v, %v; Parse's [runtime] = %+v", rc.Runtime, rok, cfg.Runtime)
		}
	})
}

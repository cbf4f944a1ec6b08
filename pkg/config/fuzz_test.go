package config

import (
	"errors"
	"os"
	"reflect"
	"testing"
)

// FuzzParse checks that no input makes Parse or parseRuntime panic, that every error wraps
// ErrInvalid, and that every Config it returns is valid.
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

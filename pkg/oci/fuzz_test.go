package oci

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseArgs: any command line either parses or fails with ErrArgs/ErrUnsupported, never
// panics; a parsed bundle is always a value that appeared on the command line.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		"--root /r --log /l --log-format json create --bundle /b id",
		"run -b=/x -d id", "create --bundle", "--root", "delete -f id", "create -- --id", "create --config x id",
		"--log= create --bundle= id", "- -- --=x create",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, " ")
		inv, err := ParseArgs(args)
		if err != nil {
			if !errors.Is(err, ErrArgs) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if inv.Bundle != "" && !strings.Contains(line, inv.Bundle) {
			t.Fatalf("bundle %q not from the command line %q", inv.Bundle, line)
		}
		if inv.Command != "" && !contains(args, inv.Command) {
			t.Fatalf("command %q not an argument of %q", inv.Command, line)
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

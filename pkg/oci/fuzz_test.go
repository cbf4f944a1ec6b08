package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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

// FuzzSpecEncode: for any config.json ParseSpec accepts, GPU edits through the partial view
// give the same spec as a full decode with the same edits, and Encode never fails.
func FuzzSpecEncode(f *testing.F) {
	for _, name := range []string{"runc-spec.json", "podman-config.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{specWithUnknown, `{}`, `{"linux":{}}`, `{"process":null}`, `{"hooks":{"x":[]}}`,
		`{"mounts":[{"destination":"/a","x":1},{"destination":"/a"}]}`} {
		f.Add([]byte(seed))
	}
	path := filepath.Join(f.TempDir(), "config.json")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want specs.Spec
		if json.Unmarshal(data, &want) != nil {
			return // not a spec runc could read either
		}
		sf, err := ParseSpec(path, data)
		if errors.Is(err, errAmbiguous) || (err != nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte("null"))) {
			return // refused on purpose (TestParseSpecRefusesAmbiguousMembers)
		}
		if err != nil {
			t.Fatalf("full decode accepts it, ParseSpec does not: %v", err)
		}
		wantErr := Apply(&want, gpuEdits()...)
		gotErr := Apply(sf.Spec, gpuEdits()...)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("edit errors differ: view %v, full %v", gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		out, err := sf.Encode()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		var got specs.Spec
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("output does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("differs from full decode + edits\ngot  %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
		}
	})
}

// FuzzCheckKeys: the key scanner never panics, and on valid JSON it refuses exactly what a
// reference walk with json.Decoder refuses (a repeated key, or two keys naming one field of
// the type), with the same message.
func FuzzCheckKeys(f *testing.F) {
	for _, seed := range []string{
		`[{"destination":"/a","Destination":"/b"}]`, `[{"path":"/a","path":"/b"}]`, `[{"x":{"a":1,"a":2}}]`,
		`[{"destination":"/a","options":["x","x"]},{}]`, `[{"\u0064estination":"/a","destination":"/b"}]`,
		`[{"ſource":"/a","source":"/b"}]`, `[1,"a",null,{"uidMappings":[{"size":1,"Size":2}]}]`, `{}`, `[`,
	} {
		f.Add(seed)
	}
	typ := reflect.TypeFor[[]specs.Mount]()
	f.Fuzz(func(t *testing.T, data string) {
		err := checkKeys([]byte(data), typ, "mounts")
		if !json.Valid([]byte(data)) {
			return
		}
		want := referenceCheckKeys(json.NewDecoder(strings.NewReader(data)), typ, "mounts")
		if fmt.Sprint(err) != fmt.Sprint(want) {
			t.Fatalf("%s:\nscanner   %v\nreference %v", data, err, want)
		}
	})
}

// referenceCheckKeys is checkKeys written the obvious way, with json.Decoder's tokens.
func referenceCheckKeys(dec *json.Decoder, typ reflect.Type, path string) error {
	for typ != nil && typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	tok, _ := dec.Token()
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if typ != nil && (typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array) {
			elem = typ.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := referenceCheckKeys(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type
		if typ != nil && typ.Kind() == reflect.Struct {
			fields = referenceFields(typ)
		} else if typ != nil && typ.Kind() == reflect.Map {
			elem = typ.Elem()
		}
		seen := map[string]bool{}
		named := map[string]string{}
		for dec.More() {
			tok, _ := dec.Token()
			key, _ := tok.(string)
			if seen[key] {
				return fmt.Errorf("%s: %w: %q appears twice", path, errAmbiguous, key)
			}
			seen[key] = true
			valueType := elem
			if name, t, ok := referenceField(fields, key); ok {
				if prev, dup := named[name]; dup {
					return fmt.Errorf("%s: %w: %q and %q name the same field", path, errAmbiguous, prev, key)
				}
				named[name], valueType = key, t
			}
			if err := referenceCheckKeys(dec, valueType, path+"."+key); err != nil {
				return err
			}
		}
	}
	_, _ = dec.Token()
	return nil
}

// referenceFields maps the JSON names of a struct's fields (embedded structs flattened) to
// their types, written apart from keys.go's field table so that the fuzz target checks it.
func referenceFields(typ reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if et := f.Type; f.Anonymous && name == "" {
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				maps.Copy(fields, referenceFields(et))
				continue
			}
		}
		if f.IsExported() {
			if name == "" {
				name = f.Name
			}
			fields[name] = f.Type
		}
	}
	return fields
}

// referenceField finds the field key decodes into, as Go's decoder does: the exact name, else
// one equal under case folding.
func referenceField(fields map[string]reflect.Type, key string) (string, reflect.Type, bool) {
	if t, ok := fields[key]; ok {
		return key, t, true
	}
	for name, t := range fields {
		if strings.EqualFold(name, key) {
			return name, t, true
		}
	}
	return "", nil, false
}

package oci

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecFile is a bundle's config.json, decoded, with what is needed to write it back
// without losing anything.
type SpecFile struct {
	Path string
	Spec *specs.Spec
	// Raw is the file as read.
	Raw  []byte
	mode fs.FileMode
}

// ConfigPath returns the path of a bundle's spec.
func ConfigPath(bundle string) string { return filepath.Join(bundle, "config.json") }

// ReadSpec reads and decodes the spec at path.
func ReadSpec(path string) (*SpecFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	return ParseSpec(path, raw)
}

// ParseSpec decodes raw, the content of the spec file at path.
func ParseSpec(path string, raw []byte) (*SpecFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("stat spec: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("decode spec %s: %w", path, err)
	}
	return &SpecFile{Path: path, Spec: &spec, Raw: raw, mode: fi.Mode().Perm()}, nil
}

// Encode returns the edited spec as JSON. Fields present in the original file but unknown to
// the runtime-spec version compiled in are carried over at every object level, and numbers
// keep their original text.
func (f *SpecFile) Encode() ([]byte, error) {
	edited, err := json.Marshal(f.Spec)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	var orig, out any
	if err := decodeNumbers(f.Raw, &orig); err != nil {
		return nil, fmt.Errorf("decode original spec: %w", err)
	}
	if err := decodeNumbers(edited, &out); err != nil {
		return nil, fmt.Errorf("decode edited spec: %w", err)
	}
	out = keepUnknown(orig, out, reflect.TypeOf(specs.Spec{}))
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	return data, nil
}

// Write replaces the spec file atomically: a temporary file in the same directory, fsync,
// the original mode, rename, then fsync of the directory. On error the original is intact.
func (f *SpecFile) Write() error {
	data, err := f.Encode()
	if err != nil {
		return err
	}
	return WriteFileAtomic(f.Path, data, f.mode)
}

// WriteFileAtomic writes data to path through a temporary file and a rename.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// keepUnknown copies into out every key of orig that typ does not know, recursing into
// known nested objects. Arrays are matched element by element only when their length is
// unchanged (an edited list is the editor's to own).
func keepUnknown(orig, out any, typ reflect.Type) any {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch typ.Kind() {
	case reflect.Struct:
		o, ok1 := orig.(map[string]any)
		n, ok2 := out.(map[string]any)
		if !ok1 || !ok2 {
			return out
		}
		fields := jsonFields(typ)
		for k, ov := range o {
			ft, known := fields[k]
			if !known {
				n[k] = ov
				continue
			}
			if nv, present := n[k]; present {
				n[k] = keepUnknown(ov, nv, ft)
			}
		}
		return n
	case reflect.Slice, reflect.Array:
		o, ok1 := orig.([]any)
		n, ok2 := out.([]any)
		if !ok1 || !ok2 || len(o) != len(n) {
			return out
		}
		for i := range n {
			n[i] = keepUnknown(o[i], n[i], typ.Elem())
		}
		return n
	case reflect.Map:
		o, ok1 := orig.(map[string]any)
		n, ok2 := out.(map[string]any)
		if !ok1 || !ok2 {
			return out
		}
		for k, nv := range n {
			if ov, present := o[k]; present {
				n[k] = keepUnknown(ov, nv, typ.Elem())
			}
		}
		return n
	}
	return out
}

// jsonFields maps the JSON names of a struct's fields (embedded structs flattened) to types.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					fields[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

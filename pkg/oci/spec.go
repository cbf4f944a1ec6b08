package oci

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/jsonobject"
)

// SpecFile is a bundle's config.json, read so that it can be written back without losing
// anything. Only the members gpu-runtime reads or edits are decoded (see Spec); every other
// member is written back byte for byte as read. That keeps fields this runtime-spec version
// does not know, numbers as written, and the cost of a create independent of the parts GPU
// injection never touches (a seccomp profile is most of a docker spec).
type SpecFile struct {
	Path string
	// Spec is a partial view of the file: only the members of topMembers and below are
	// decoded, everything else is zero. Edits may change them (and create the objects
	// holding them); Encode refuses a view in which anything else was set.
	Spec *specs.Spec
	Raw  []byte // the file as read
	mode fs.FileMode
	// The objects on the way to the decoded members; nil where the file has none.
	top, process, linux, resources *jsonobject.Object
	// unknown lists the decoded members whose original holds keys this runtime-spec version
	// does not know; Encode merges those keys back in.
	unknown map[string]bool
}

// ConfigPath returns the path of a bundle's spec.
func ConfigPath(bundle string) string { return filepath.Join(bundle, "config.json") }

// ParseSpec decodes raw, the content of the spec file at path.
func ParseSpec(path string, raw []byte) (*SpecFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("stat spec: %w", err)
	}
	f := &SpecFile{Path: path, Raw: raw, mode: fi.Mode().Perm(), Spec: &specs.Spec{}, unknown: map[string]bool{}}
	if err := f.decode(); err != nil {
		return nil, fmt.Errorf("decode spec %s: %w", path, err)
	}
	return f, nil
}

// errAmbiguous: an object gpu-runtime rewrites has members that Go's JSON decoder (runc's)
// would merge into one: editing or keeping only one of them would change what runc reads.
var errAmbiguous = errors.New("ambiguous members")

// The members decoded at each level (the view), with the objects on the way to them.
var (
	topMembers       = []string{"process", "mounts", "hooks", "linux", "annotations"}
	processMembers   = []string{"env", "capabilities", "user"}
	linuxMembers     = []string{"devices", "resources", "namespaces", "netDevices", "intelRdt"}
	resourcesMembers = []string{"devices"}
)

func (f *SpecFile) decode() error {
	var err error
	if f.top, err = decodeObject(f.Raw, "", topMembers); err != nil {
		return err
	}
	if f.top == nil {
		return errors.New("not a JSON object")
	}
	s := f.Spec
	if f.process, err = object(f.top, "process", processMembers); err != nil {
		return err
	}
	if f.process != nil {
		s.Process = &specs.Process{}
		err = errors.Join(
			f.member(f.process, "process.env", &s.Process.Env),
			f.member(f.process, "process.capabilities", &s.Process.Capabilities),
			f.member(f.process, "process.user", &s.Process.User))
	}
	err = errors.Join(err,
		f.member(f.top, "mounts", &s.Mounts),
		f.member(f.top, "hooks", &s.Hooks),
		f.member(f.top, "annotations", &s.Annotations))
	if err != nil {
		return err
	}
	if f.linux, err = object(f.top, "linux", linuxMembers); err != nil || f.linux == nil {
		return err
	}
	s.Linux = &specs.Linux{}
	if err := errors.Join(
		f.member(f.linux, "linux.devices", &s.Linux.Devices),
		f.member(f.linux, "linux.namespaces", &s.Linux.Namespaces),
		f.member(f.linux, "linux.netDevices", &s.Linux.NetDevices),
		f.member(f.linux, "linux.intelRdt", &s.Linux.IntelRdt)); err != nil {
		return err
	}
	if f.resources, err = object(f.linux, "linux.resources", resourcesMembers); err != nil || f.resources == nil {
		return err
	}
	s.Linux.Resources = &specs.LinuxResources{}
	return f.member(f.resources, "linux.resources.devices", &s.Linux.Resources.Devices)
}

// Root decodes the spec's root as runc reads it (read only: it is not part of Spec, the
// editable view); nil when the spec has none. Members whose names differ from "root" only in
// case, which Go's decoder would merge, are an error.
func (f *SpecFile) Root() (*specs.Root, error) {
	var raw json.RawMessage
	for _, m := range f.top.Members {
		if !strings.EqualFold(m.Name, "root") {
			continue
		}
		if raw != nil {
			return nil, fmt.Errorf("root: %w: more than one member named %q in any case", errAmbiguous, "root")
		}
		raw = m.Value
	}
	if raw == nil {
		return nil, nil
	}
	var r *specs.Root
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	return r, nil
}

// object is decodeObject for the member path (dot-separated) of parent; nil when absent.
func object(parent *jsonobject.Object, path string, decoded []string) (*jsonobject.Object, error) {
	raw, ok := parent.Get(leaf(path))
	if !ok {
		return nil, nil
	}
	return decodeObject(raw, path, decoded)
}

// decodeObject splits a JSON object into its members (nil for null). A duplicate member, or
// one that differs from a member of decoded only in case, is refused with errAmbiguous: Go's
// JSON decoder (runc's) would merge them.
func decodeObject(data []byte, path string, decoded []string) (*jsonobject.Object, error) {
	o, err := jsonobject.Parse(data)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("unexpected end of JSON input") // as json.Unmarshal says it
	case err == nil && o.Duplicate(decoded) != "":
		err = fmt.Errorf("%w: %s", errAmbiguous, o.Duplicate(decoded))
	}
	if err != nil && path != "" {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

// leaf is the last name of a dot-separated member path ("linux.devices" → "devices").
func leaf(path string) string { return path[strings.LastIndexByte(path, '.')+1:] }

// member decodes one member of parent (path names it, dot-separated) into v, noting
// whether its original holds keys v's type does not know.
func (f *SpecFile) member(parent *jsonobject.Object, path string, v any) error {
	name := leaf(path)
	raw, ok := parent.Get(name)
	if !ok {
		return nil
	}
	if path != "process.env" { // a list of strings: no object to hold a duplicate
		if err := checkKeys(raw, reflect.TypeOf(v), path); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if dec.Decode(v) == nil {
		return nil
	}
	// The strict decoder differs from json.Unmarshal only in refusing unknown keys: if
	// Unmarshal succeeds, unknown keys were the problem.
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	f.unknown[path] = true
	return nil
}

// Encode returns the edited spec as JSON: the decoded members as the view holds them (with
// the original's keys unknown to this runtime-spec version), everything else as read.
func (f *SpecFile) Encode() ([]byte, error) {
	if err := f.checkView(); err != nil {
		return nil, err
	}
	s := f.Spec
	p, l := cmp.Or(s.Process, &specs.Process{}), cmp.Or(s.Linux, &specs.Linux{})
	rules := cmp.Or(l.Resources, &specs.LinuxResources{}).Devices
	_, hadUser := f.process.Get("user")
	top, process, linux, resources := f.top.Clone(), f.process.Clone(), f.linux.Clone(), f.resources.Clone()
	err := errors.Join(
		f.put(process, "process.env", p.Env, len(p.Env) == 0),
		f.put(process, "process.capabilities", p.Capabilities, p.Capabilities == nil),
		f.put(process, "process.user", p.User, !hadUser && reflect.ValueOf(p.User).IsZero()),
		f.put(top, "mounts", s.Mounts, len(s.Mounts) == 0),
		f.put(top, "hooks", s.Hooks, s.Hooks == nil),
		f.put(top, "annotations", s.Annotations, len(s.Annotations) == 0),
		f.put(linux, "linux.devices", l.Devices, len(l.Devices) == 0),
		f.put(linux, "linux.namespaces", l.Namespaces, len(l.Namespaces) == 0),
		f.put(linux, "linux.netDevices", l.NetDevices, len(l.NetDevices) == 0),
		f.put(linux, "linux.intelRdt", l.IntelRdt, l.IntelRdt == nil),
		f.put(resources, "linux.resources.devices", rules, len(rules) == 0))
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	// Objects the file had are written back; ones the edits created only when not empty.
	putObject(linux, "resources", resources, f.resources != nil)
	putObject(top, "process", process, f.process != nil)
	putObject(top, "linux", linux, f.linux != nil)
	return top.Encode(), nil
}

// checkView refuses a view in which a member that is not decoded was set: it would be lost.
func (f *SpecFile) checkView() error {
	var changed []string
	outside := func(what string, rest any) { // rest: the object with the decoded members zeroed
		if !reflect.ValueOf(rest).IsZero() {
			changed = append(changed, what)
		}
	}
	s := *f.Spec
	if s.Process != nil {
		p := *s.Process
		p.Env, p.Capabilities, p.User = nil, nil, specs.User{}
		outside("process", p)
	}
	if s.Linux != nil {
		l := *s.Linux
		l.Devices, l.Namespaces, l.NetDevices, l.IntelRdt = nil, nil, nil, nil
		if l.Resources != nil {
			r := *l.Resources
			r.Devices = nil
			outside("linux.resources", r)
		}
		l.Resources = nil
		outside("linux", l)
	}
	s.Process, s.Mounts, s.Hooks, s.Linux, s.Annotations = nil, nil, nil, nil, nil
	outside("the top level", s)
	if len(changed) > 0 {
		return fmt.Errorf("encode spec: members of %s outside those gpu-runtime decodes were set; they would be lost", strings.Join(changed, ", "))
	}
	return nil
}

// readOnly are the members gpu-runtime only reads (CDI's edits may change them).
var readOnly = map[string]bool{"process.user": true, "linux.namespaces": true, "linux.netDevices": true, "linux.intelRdt": true}

// put writes the member path names into parent: v encoded, or no member when v is empty
// (an emptied object keeps the keys this runtime-spec version does not know). A readOnly
// member whose value is still what the file holds keeps its original bytes.
func (f *SpecFile) put(parent *jsonobject.Object, path string, v any, empty bool) error {
	name := leaf(path)
	orig, had := parent.Get(name)
	switch {
	case !had && empty:
		return nil
	case had && readOnly[path]:
		was := reflect.New(reflect.TypeOf(v))
		if json.Unmarshal(orig, was.Interface()) == nil && reflect.DeepEqual(was.Elem().Interface(), v) {
			return nil
		}
	}
	if empty {
		typ := reflect.TypeOf(v)
		if !f.unknown[path] || typ.Kind() != reflect.Pointer {
			parent.Remove(name)
			return nil
		}
		v = reflect.New(typ.Elem()).Interface()
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if f.unknown[path] {
		if data, err = mergeUnknown(orig, data, reflect.TypeOf(v)); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	parent.Set(name, data)
	return nil
}

// putObject writes child into parent under name: always when the original had it, else
// only when it is not empty.
func putObject(parent *jsonobject.Object, name string, child *jsonobject.Object, had bool) {
	if had || len(child.Members) > 0 {
		parent.Set(name, child.Encode())
	}
}

// mergeUnknown returns edited (JSON of type typ) with the keys of orig that typ does not
// know carried over, at every object level.
func mergeUnknown(orig, edited []byte, typ reflect.Type) ([]byte, error) {
	var o, n any
	if err := decodeNumbers(orig, &o); err != nil {
		return nil, err
	}
	if err := decodeNumbers(edited, &n); err != nil {
		return nil, err
	}
	return json.Marshal(keepUnknown(o, n, typ))
}

// Write replaces the spec file atomically (internal/atomicfile), keeping its mode, owner and
// group, and a symlink at its path. On error the original is intact.
func (f *SpecFile) Write() error {
	data, err := f.Encode()
	if err != nil {
		return err
	}
	// The engine's file: a symlinked config.json stays a link, and its owner stays.
	return atomicfile.Write(f.Path, data, f.mode, atomicfile.Options{Follow: true, KeepOwner: true})
}

func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// keepUnknown copies into out every key of orig that typ does not know, at every level. A
// list element is matched to the original it came from by its known fields (an edit may add,
// remove or reorder elements): keys never move from one element to another.
func keepUnknown(orig, out any, typ reflect.Type) any {
	switch typ = deref(typ); typ.Kind() {
	case reflect.Struct, reflect.Map:
		o, ok1 := orig.(map[string]any)
		n, ok2 := out.(map[string]any)
		if !ok1 || !ok2 {
			return out
		}
		if typ.Kind() == reflect.Map {
			for k, nv := range n {
				if ov, present := o[k]; present {
					n[k] = keepUnknown(ov, nv, typ.Elem())
				}
			}
			return n
		}
		fields := fieldsOf(typ)
		for k, ov := range o {
			i := fields.lookup([]byte(k))
			if i < 0 {
				n[k] = ov
				continue
			}
			name := fields.names[i]
			if nv, present := n[name]; present {
				n[name] = keepUnknown(ov, nv, fields.types[i])
			}
		}
		return n
	case reflect.Slice, reflect.Array:
		o, ok1 := orig.([]any)
		n, ok2 := out.([]any)
		if !ok1 || !ok2 {
			return out
		}
		et := deref(typ.Elem())
		if et.Kind() != reflect.Struct && et.Kind() != reflect.Map && et.Kind() != reflect.Slice {
			return out // no keys to keep
		}
		unmatched := map[string][]any{} // the original elements by known form, in order
		for _, ov := range o {
			k := knownForm(ov, et)
			unmatched[k] = append(unmatched[k], ov)
		}
		for j, nv := range n {
			k := knownForm(nv, et)
			if ovs := unmatched[k]; len(ovs) > 0 {
				n[j], unmatched[k] = keepUnknown(ovs[0], nv, et), ovs[1:]
			}
		}
		return n
	}
	return out
}

// knownForm is v (decoded JSON) as typ sees it: the JSON of v decoded into typ and encoded
// again, so two values with the same known fields have the same form whatever else they hold.
func knownForm(v any, typ reflect.Type) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	p := reflect.New(typ)
	if err := json.Unmarshal(data, p.Interface()); err != nil {
		return "\x00" + string(data) // not of typ: matched only to an identical value
	}
	data, err = json.Marshal(p.Interface())
	if err != nil {
		return ""
	}
	return string(data)
}

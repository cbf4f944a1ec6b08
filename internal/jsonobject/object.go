// Package jsonobject holds a JSON object as its members in order, each value's text kept as
// read, so that a file gpu-runtime does not own — a bundle's config.json, docker's
// daemon.json — is written back with only the members it edits changed. Duplicate names are
// kept as read; Get answers as encoding/json does (the last one wins). Callers that must not
// guess, such as the spec decoder, refuse duplicates themselves (Duplicate).
package jsonobject

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Member is one member of an object: its name and its value's text.
type Member struct {
	Name  string
	Value json.RawMessage
}

// Object is a JSON object's members in order. A nil *Object is an absent object: Get finds
// nothing in it, Clone makes an empty one.
type Object struct {
	Members []Member
}

// Parse splits data, a JSON object, into its members; null is a nil Object. Errors are
// encoding/json's (a *json.SyntaxError carries the offset); input that ends early is
// io.ErrUnexpectedEOF.
func Parse(data []byte) (*Object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, early(err)
	}
	if tok == nil {
		return nil, expectEnd(dec)
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("want a JSON object, got %s", kind(tok))
	}
	o := &Object{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, early(err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, early(err)
		}
		o.Members = append(o.Members, Member{Name: name, Value: v})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, early(err)
	}
	return o, expectEnd(dec)
}

// early turns the decoder's io.EOF, input that ended before the object did, into
// io.ErrUnexpectedEOF.
func early(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// kind names the kind of JSON value a token starts.
func kind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	}
	return "a number"
}

// expectEnd fails when anything but white space follows the value dec has read.
func expectEnd(dec *json.Decoder) error {
	_, err := dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return errors.New("data after the JSON value")
	}
	return err
}

// Duplicate returns a name o holds twice, or one that differs only in case from one of
// decoded — members Go's decoder would merge into one — and "" when there is none.
func (o *Object) Duplicate(decoded []string) string {
	if o == nil {
		return ""
	}
	seen := make(map[string]bool, len(o.Members))
	for _, m := range o.Members {
		if seen[m.Name] {
			return fmt.Sprintf("%q appears twice", m.Name)
		}
		seen[m.Name] = true
		for _, d := range decoded {
			if m.Name != d && strings.EqualFold(m.Name, d) {
				return fmt.Sprintf("%q differs from %q only in case", m.Name, d)
			}
		}
	}
	return ""
}

// Get returns the value of name; of duplicates, the last, as encoding/json decodes them.
func (o *Object) Get(name string) (json.RawMessage, bool) {
	if o == nil {
		return nil, false
	}
	for i := len(o.Members) - 1; i >= 0; i-- {
		if o.Members[i].Name == name {
			return o.Members[i].Value, true
		}
	}
	return nil, false
}

// Set replaces name's value where it first is, dropping its duplicates, or appends it.
func (o *Object) Set(name string, v json.RawMessage) {
	i := slices.IndexFunc(o.Members, func(m Member) bool { return m.Name == name })
	if i < 0 {
		o.Members = append(o.Members, Member{Name: name, Value: v})
		return
	}
	o.Members[i].Value = v
	o.Members = slices.Concat(o.Members[:i+1], slices.DeleteFunc(slices.Clone(o.Members[i+1:]), func(m Member) bool { return m.Name == name }))
}

// Remove deletes every member named name.
func (o *Object) Remove(name string) {
	o.Members = slices.DeleteFunc(o.Members, func(m Member) bool { return m.Name == name })
}

// Clone copies o; an absent object comes back empty, ready to receive members.
func (o *Object) Clone() *Object {
	if o == nil {
		return &Object{}
	}
	return &Object{Members: slices.Clone(o.Members)}
}

// Encode writes the object compactly: members in order, values as held (nothing that was
// read is re-encoded), names without HTML escaping.
func (o *Object) Encode() []byte {
	size := 2
	for _, m := range o.Members {
		size += len(m.Name) + len(m.Value) + 4
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, m := range o.Members {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, String(m.Name)...), ':'), m.Value...)
	}
	return append(b, '}')
}

// String encodes s as a JSON string without HTML escaping.
func String(s string) json.RawMessage {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return bytes.TrimRight(b.Bytes(), "\n")
		}
	}
	return json.RawMessage(`"` + s + `"`) // nothing to escape: the common case, a plain name
}

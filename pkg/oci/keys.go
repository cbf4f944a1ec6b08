package oci

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// checkKeys refuses, at every object level of the JSON value raw, what Go's decoder (runc's)
// would merge into one field: a key that appears twice, or two keys naming one field of typ
// (differing only in case). Values of keys typ does not know are not looked into. path names
// raw in errors ("mounts").
//
// It is a small scanner over the bytes, not a walk with json.Decoder.Token, which allocates
// for every token: that walk triples the allocations of a whole spec decode (runc's default
// spec). It does not validate JSON: the decoder that runs next reports malformed input.
func checkKeys(raw []byte, typ reflect.Type, path string) error {
	c := keyChecker{data: raw, base: path}
	return c.value(typ)
}

type keyChecker struct {
	data []byte
	i    int
	base string
	path []pathSegment // where the scan is, for errors only
}

type pathSegment struct {
	key   []byte
	index int // -1 for an object member
}

func (c *keyChecker) value(typ reflect.Type) error {
	typ = deref(typ)
	c.space()
	if c.i >= len(c.data) {
		return nil
	}
	switch c.data[c.i] {
	case '{':
		return c.object(typ)
	case '[':
		var elem reflect.Type
		if typ != nil && (typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array) {
			elem = typ.Elem()
		}
		return c.list(']', func(index int) error { return c.at(pathSegment{index: index}, elem) })
	case '"':
		_, c.i, _ = scanString(c.data, c.i)
	default: // a number, true, false or null
		for c.i < len(c.data) && !strings.ContainsRune(",]} \t\r\n", rune(c.data[c.i])) {
			c.i++
		}
	}
	return nil
}

// at scans a value of type typ at seg, the next segment of the path.
func (c *keyChecker) at(seg pathSegment, typ reflect.Type) error {
	c.path = append(c.path, seg)
	err := c.value(typ)
	c.path = c.path[:len(c.path)-1]
	return err
}

// list scans the elements of an array or the members of an object, each with elem, up to
// the closing bracket.
func (c *keyChecker) list(closing byte, elem func(index int) error) error {
	c.i++ // the opening bracket
	for index := 0; ; index++ {
		c.space()
		if c.i >= len(c.data) || c.data[c.i] == closing {
			c.i++
			return nil
		}
		if err := elem(index); err != nil {
			return err
		}
		c.space()
		if c.i >= len(c.data) || c.data[c.i] != ',' {
			c.i++ // the closing bracket, or malformed input left to the decoder
			return nil
		}
		c.i++
	}
}

func (c *keyChecker) object(typ reflect.Type) error {
	var fields *fieldTable
	var elem reflect.Type
	if typ != nil {
		switch typ.Kind() {
		case reflect.Struct:
			fields = fieldsOf(typ)
		case reflect.Map:
			elem = typ.Elem()
		}
	}
	var seenBuf, namedBuf [16][]byte // no allocation for up to 16 keys and fields
	seen := seenBuf[:0]
	var named [][]byte // the key that named each field, by field index
	if fields != nil {
		named = append(namedBuf[:0], make([][]byte, len(fields.names))...)
	}
	return c.list('}', func(int) error {
		if c.data[c.i] != '"' {
			return nil // malformed input, left to the decoder
		}
		key, end, escaped := scanString(c.data, c.i)
		c.i = end
		if escaped || !utf8.Valid(key) { // as Go's decoder reads it: escapes undone, bad UTF-8 as U+FFFD
			var s string
			if json.Unmarshal(c.data[c.i-len(key)-2:c.i], &s) == nil {
				key = []byte(s)
			}
		}
		if slices.ContainsFunc(seen, func(k []byte) bool { return bytes.Equal(k, key) }) {
			return c.errorf("%q appears twice", key)
		}
		seen = append(seen, key)
		valueType := elem
		if fi := fields.lookup(key); fi >= 0 {
			if prev := named[fi]; prev != nil {
				return c.errorf("%q and %q name the same field", prev, key)
			}
			named[fi], valueType = key, fields.types[fi]
		}
		c.space()
		if c.i >= len(c.data) || c.data[c.i] != ':' {
			return nil
		}
		c.i++
		return c.at(pathSegment{key: key, index: -1}, valueType)
	})
}

func (c *keyChecker) space() {
	for c.i < len(c.data) && (c.data[c.i] == ' ' || c.data[c.i] == '\t' || c.data[c.i] == '\n' || c.data[c.i] == '\r') {
		c.i++
	}
}

// errorf wraps errAmbiguous, naming the object where the scan is: mounts[1], hooks.prestart[0].
func (c *keyChecker) errorf(format string, args ...any) error {
	var b strings.Builder
	b.WriteString(c.base)
	for _, s := range c.path {
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		} else {
			b.WriteString("." + string(s.key))
		}
	}
	return fmt.Errorf("%s: %w: %s", b.String(), errAmbiguous, fmt.Sprintf(format, args...))
}

// scanString returns the content of the JSON string at data[i] (the quote), the index after
// its closing quote, and whether it holds escapes.
func scanString(data []byte, i int) (content []byte, end int, escaped bool) {
	start := i + 1
	for j := start; j < len(data); j++ {
		switch data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return data[start:j], j + 1, escaped
		}
	}
	return data[start:], len(data), escaped
}

// fieldTable is the JSON names of a struct type's fields (embedded structs flattened) and
// their types.
type fieldTable struct {
	names []string
	types []reflect.Type
}

var fieldTables sync.Map // reflect.Type → *fieldTable

func fieldsOf(typ reflect.Type) *fieldTable {
	if t, ok := fieldTables.Load(typ); ok {
		return t.(*fieldTable)
	}
	t := &fieldTable{}
	t.add(typ)
	fieldTables.Store(typ, t)
	return t
}

func (t *fieldTable) add(typ reflect.Type) {
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if et := deref(f.Type); f.Anonymous && name == "" && et.Kind() == reflect.Struct {
			t.add(et)
			continue
		}
		if f.IsExported() {
			t.names = append(t.names, cmp.Or(name, f.Name))
			t.types = append(t.types, f.Type)
		}
	}
}

// lookup finds the field a key decodes into as Go's decoder does: the exact name, else one
// equal under case folding. -1 when none (or t is nil).
func (t *fieldTable) lookup(key []byte) int {
	if t == nil {
		return -1
	}
	if i := slices.Index(t.names, string(key)); i >= 0 {
		return i
	}
	return slices.IndexFunc(t.names, func(n string) bool { return bytes.EqualFold(key, []byte(n)) })
}

// deref is typ without its pointers.
func deref(typ reflect.Type) reflect.Type {
	for typ != nil && typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	return typ
}

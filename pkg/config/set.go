package config

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// Keys lists every key of the configuration, "section.name", in file order.
func Keys() []string {
	var out []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		section := t.Field(i)
		for j := range section.Type.NumField() {
			if f := section.Type.Field(j); f.Type.Kind() != reflect.Map { // shares are edited in the file
				out = append(out, section.Tag.Get("toml")+"."+f.Tag.Get("toml"))
			}
		}
	}
	return out
}

// Set returns data, a configuration file named name, with key ("section.name") set to value
// and all else as it was: the key's line is rewritten in place, or added after the last key of
// its section (or at the end of the file, with the section). value is what a user types: a
// string as is, true or false, a list as comma-separated items or a TOML array. data must
// parse as TOML, and the result must pass Parse.
func Set(data []byte, name, key, value string) ([]byte, error) {
	t, spelled, _, ok := field(strings.Split(key, "."))
	if !ok || len(spelled) != 2 || quote.TOMLKey(spelled...) != key || kindOf(t) == kindTable { // tables and shares' keys: edited in the file
		return nil, invalid(nil, "unknown key %q: the keys are %s", key, strings.Join(Keys(), ", "))
	}
	literal, err := tomlValue(kindOf(t), value)
	if err != nil {
		return nil, invalid(nil, "%s: %v", key, err)
	}
	section, field, _ := strings.Cut(key, ".")
	out, err := setLine(data, section, field, field+" = "+literal)
	if err != nil {
		return nil, decodeError(data, name, err)
	}
	if _, _, err := Parse(out, name); err != nil {
		return nil, fmt.Errorf("%s = %s: %w", key, literal, err)
	}
	return out, nil
}

// tomlValue writes a user's value as a TOML literal of the key's kind.
func tomlValue(kind valueKind, value string) (string, error) {
	switch kind {
	case kindBool:
		if value != "true" && value != "false" {
			return "", fmt.Errorf("%q is not true or false", value)
		}
		return value, nil
	case kindStrings, kindInts:
		v := strings.TrimSpace(value)
		if strings.HasPrefix(v, "[") {
			return v, nil // a TOML array: Parse checks it
		}
		var items []string
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			switch {
			case item == "":
			case kind == kindInts:
				if _, err := strconv.Atoi(item); err != nil {
					return "", fmt.Errorf("%q is not an integer", item)
				}
				items = append(items, item)
			default:
				items = append(items, quote.TOMLString(item))
			}
		}
		return "[" + strings.Join(items, ", ") + "]", nil
	}
	return quote.TOMLString(value), nil
}

// setLine replaces the line (or the lines, for a multi-line value) of field in [section] with
// line, or adds line after the section's last key, or adds the section. go-toml's parser
// finds the keys, so that nothing in a string, a comment or a multi-line value is taken for
// one; data that does not parse is an error.
func setLine(data []byte, section, field, line string) ([]byte, error) {
	var p unstable.Parser
	p.Reset(data)
	in, found := false, false // in: the keys that follow are [section]'s
	from, to := -1, -1        // what line replaces: field's lines, or none past the section's header or last key
	for p.NextExpression() {
		e := p.Expression()
		k := e.Key()
		k.Next()
		name := ""
		if k.IsLast() {
			name = string(k.Node().Data) // not a dotted key
		}
		switch {
		case found:
		case e.Kind != unstable.KeyValue:
			in = e.Kind == unstable.Table && name == section
			if in {
				from = nextLine(data, int(k.Node().Raw.Offset+k.Node().Raw.Length))
				to = from
			}
		case in:
			to = nextLine(data, int(e.Raw.Offset+e.Raw.Length))
			from, found = to, name == field
			if found {
				from = int(e.Raw.Offset)
			}
		}
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	if from < 0 { // a new section at the end, after a blank line
		from, to = len(data), len(data)
		line = "[" + section + "]\n" + line
		if from > 0 {
			line = "\n" + line
		}
	}
	if !found && from > 0 && data[from-1] != '\n' { // the last line has no newline
		line = "\n" + line
	}
	return slices.Concat(data[:from], []byte(line+"\n"), data[to:]), nil
}

// nextLine returns the offset past the newline that ends the line at i, or len(data).
func nextLine(data []byte, i int) int {
	if n := bytes.IndexByte(data[i:], '\n'); n >= 0 {
		return i + n + 1
	}
	return len(data)
}

// Marshal writes cfg as a configuration file, every key with its value.
func Marshal(cfg Config) ([]byte, error) {
	return toml.Marshal(cfg)
}

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

// ShareKeys are the keys of one MPS share, mps.shares.<name>.<key>, which --set can write.
func ShareKeys() []string {
	t := reflect.TypeFor[MPSShare]()
	out := make([]string, t.NumField())
	for i := range out {
		out[i] = t.Field(i).Tag.Get("toml")
	}
	return out
}

// Set returns data, a configuration file named name, with key ("section.name", or
// "mps.shares.<share>.<key>" for an MPS share) set to value and all else as it was: the key's
// line is rewritten in place, or added after the last key of its section (or at the end of
// the file, with the section: a new share). value is what a user types: a string as is, true or
// false, a list as comma-separated items or a TOML array. data must parse as TOML, and the
// result must pass Parse.
func Set(data []byte, name, key, value string) ([]byte, error) {
	return SetKeys(data, name, [][2]string{{key, value}})
}

// SetKeys is Set for several keys ({key, value} pairs), applied in order and validated once,
// at the end: a new MPS share needs its devices and its other keys together.
func SetKeys(data []byte, name string, pairs [][2]string) ([]byte, error) {
	out := data
	var set []string
	for _, kv := range pairs {
		key := kv[0]
		section, field, kind, err := settable(key)
		if err != nil {
			return nil, err
		}
		literal, err := tomlValue(kind, kv[1])
		if err != nil {
			return nil, invalid(nil, "%s: %v", key, err)
		}
		next, err := setLine(out, section, field, field+" = "+literal)
		if err != nil {
			return nil, decodeError(out, name, err)
		}
		out = next
		set = append(set, key+" = "+literal)
	}
	if _, _, err := Parse(out, name); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(set, ", "), err)
	}
	return out, nil
}

// settable finds where --set writes key: its table's key parts, its name in that table, and
// its kind; an unknown key is an error naming the nearest known one and every key.
func settable(key string) (section []string, name string, kind valueKind, err error) {
	if rest, ok := strings.CutPrefix(key, "mps.shares."); ok {
		i := strings.LastIndexByte(rest, '.')
		share, shareKey := rest[:max(i, 0)], rest[i+1:]
		t, ok := reflect.TypeFor[MPSShare]().FieldByNameFunc(func(f string) bool {
			sf, _ := reflect.TypeFor[MPSShare]().FieldByName(f)
			return sf.Tag.Get("toml") == shareKey
		})
		switch {
		case i < 0 || share == "":
		case !shareNameRE().MatchString(share):
			return nil, "", "", invalid(nil, "%s: share name %q: want letters, digits, '.', '_' and '-' (63 at most)", key, share)
		case ok:
			return []string{"mps", "shares", share}, shareKey, kindOf(t.Type), nil
		}
		return nil, "", "", unknownKey(key)
	}
	t, spelled, _, ok := field(strings.Split(key, "."))
	if !ok || len(spelled) != 2 || quote.TOMLKey(spelled...) != key || kindOf(t) == kindTable { // tables: their keys are set
		return nil, "", "", unknownKey(key)
	}
	return spelled[:1], spelled[1], kindOf(t), nil
}

// unknownKey is --set's error for a key it cannot write.
func unknownKey(key string) error {
	hint := didYouMean(key)
	if t, _, _, ok := field(strings.Split(key, ".")); ok && kindOf(t) == kindTable {
		hint = "" // a table: the list below has its keys
	}
	return invalid(nil, "unknown key %q%s: the keys are %s, and mps.shares.<share>.{%s} for an MPS share", key, hint,
		strings.Join(Keys(), ", "), strings.Join(ShareKeys(), ","))
}

// tomlValue writes a user's value as a TOML literal of the key's kind.
func tomlValue(kind valueKind, value string) (string, error) {
	switch kind {
	case kindBool:
		if value != "true" && value != "false" {
			return "", fmt.Errorf("%q is not true or false", value)
		}
		return value, nil
	case kindInt:
		v := strings.TrimSpace(value)
		if _, err := strconv.Atoi(v); err != nil {
			return "", fmt.Errorf("%q is not an integer", value)
		}
		return v, nil
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
func setLine(data []byte, section []string, field, line string) ([]byte, error) {
	var p unstable.Parser
	p.Reset(data)
	in, found := false, false // in: the keys that follow are [section]'s
	from, to := -1, -1        // what line replaces: field's lines, or none past the section's header or last key
	for p.NextExpression() {
		e := p.Expression()
		var parts []string
		var last *unstable.Node
		for k := e.Key(); k.Next(); {
			last = k.Node()
			parts = append(parts, string(last.Data))
		}
		name := ""
		if len(parts) == 1 {
			name = parts[0] // not a dotted key
		}
		switch {
		case found:
		case e.Kind != unstable.KeyValue:
			in = e.Kind == unstable.Table && slices.Equal(parts, section)
			if in {
				from = nextLine(data, int(last.Raw.Offset+last.Raw.Length))
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
		line = "[" + quote.TOMLKey(section...) + "]\n" + line
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

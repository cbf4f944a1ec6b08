package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

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
// and all else as it was: the key's line is rewritten in place, or added at the end of its
// section (or of the file, with the section). value is what a user types: a string as is,
// true or false, a list as comma-separated items or a TOML array. The result must pass Parse.
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
	out := setLine(data, section, field, field+" = "+literal)
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

// setLine replaces the line (or the lines, for a multi-line array) of field in [section]
// with line, or adds line at the end of the section's last key, or adds the section.
func setLine(data []byte, section, field, line string) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	current := ""
	lastKey := -1     // the last key line of the section
	sectionLine := -1 // the section's header
	for i := 0; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if strings.HasPrefix(t, "[") && !strings.HasPrefix(t, "[[") {
			current = strings.TrimSpace(strings.Trim(strings.SplitN(t, "#", 2)[0], "[] \t"))
			if current == section {
				sectionLine = i
			}
			continue
		}
		if current != section || t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, rest, ok := strings.Cut(t, "=")
		if !ok {
			continue
		}
		end := i + valueLines(rest, lines[i+1:])
		if strings.Trim(strings.TrimSpace(k), `"'`) == field {
			indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " \t"))]
			return []byte(strings.Join(slices.Replace(lines, i, end+1, indent+line+"\n"), ""))
		}
		lastKey, i = end, end
	}
	after := lastKey
	if after < 0 {
		after = sectionLine
	}
	if after >= 0 {
		return []byte(strings.Join(slices.Insert(lines, after+1, line+"\n"), ""))
	}
	text := strings.Join(lines, "")
	if text != "" {
		text = strings.TrimSuffix(text, "\n") + "\n\n" // a blank line before the new section
	}
	return []byte(text + "[" + section + "]\n" + line + "\n")
}

// valueLines counts the lines after the key's a multi-line array continues on, until its
// brackets balance (brackets in strings and comments do not count).
func valueLines(rest string, after []string) int {
	depth := bracketDepth(rest)
	n := 0
	for depth > 0 && n < len(after) {
		depth += bracketDepth(after[n])
		n++
	}
	return n
}

func bracketDepth(s string) int {
	depth := 0
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case quote != 0:
			switch {
			case escaped:
				escaped = false
			case r == '\\' && quote == '"':
				escaped = true
			case r == quote:
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#':
			return depth
		case r == '[':
			depth++
		case r == ']':
			depth--
		}
	}
	return depth
}

// Marshal writes cfg as a configuration file, every key with its value.
func Marshal(cfg Config) ([]byte, error) {
	return toml.Marshal(cfg)
}

package quote

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// TOMLString quotes s as a TOML basic string: quotes and backslashes escaped, newline and
// tab as \n and \t, other control characters (and invalid UTF-8) as \uXXXX.
func TOMLString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TOMLKey writes a dotted key as TOML does: bare parts as they are, others quoted.
func TOMLKey(parts ...string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = p
		if !bareKey(p) {
			q[i] = TOMLString(p)
		}
	}
	return strings.Join(q, ".")
}

// bareKey reports whether s may stand unquoted as a TOML key: A-Z a-z 0-9 _ -.
func bareKey(s string) bool {
	return s != "" && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == ""
}

// TOMLType names the type of a value go-toml decoded into an any, in TOML's words: "a table",
// "an array", "a string"…
func TOMLType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, int, uint64:
		return "an integer"
	case float64:
		return "a float"
	case nil:
		return "empty"
	}
	return "a date or time"
}

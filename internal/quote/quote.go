// Package quote shows values a container chose in messages, bounded: an environment value of
// megabytes, or a list of a hundred thousand tokens, must not become a log line of that size.
package quote

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxValue is how many bytes of a value a message quotes.
const MaxValue = 256

// MaxItems is how many items of a list a message names.
const MaxItems = 5

// Value quotes s as Go does, cut to MaxValue bytes with its length said:
// "foo,foo,…" (126000 bytes).
func Value(s string) string {
	if len(s) <= MaxValue {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:MaxValue]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// Var shows NAME=value with the value quoted and bounded by Value.
func Var(name, value string) string { return name + "=" + Value(value) }

// List quotes the first MaxItems items, comma-separated, and says how many more there are:
// "a", "b", "c", "d", "e" and 99995 more.
func List(items []string) string {
	shown := items[:min(len(items), MaxItems)]
	q := make([]string, len(shown), len(shown)+1)
	for i, it := range shown {
		q[i] = Value(it)
	}
	return Join(append(q, items[len(shown):]...), MaxItems)
}

// Join joins the first max items as they are, comma-separated, and says how many more there
// are: a, b, c and 7 more.
func Join(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:max], ", "), len(items)-max)
}

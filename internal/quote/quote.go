// Package quote shows values a container chose in messages, bounded: an environment value of
// megabytes, or a list of a hundred thousand tokens, must not become a log line of that size.
package quote

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
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

// Cut is s itself when it is at most MaxValue bytes, else its first MaxValue bytes (cut at
// a character boundary) with its length said: unquoted, for text that is already part of a
// message, such as a library's error that quotes a value whole, or the user's own words
// on a command line (docker run --gpus device=0,1).
func Cut(s string) string {
	if len(s) <= MaxValue {
		return s
	}
	n := MaxValue
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
}

// Error is err with its text bounded by Cut, still unwrapping to err: for a library's error
// that quotes a value it was given whole (the CDI parser's "invalid device %q"). Nil for nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	return cutError{err}
}

type cutError struct{ err error }

func (e cutError) Error() string { return Cut(e.err.Error()) }
func (e cutError) Unwrap() error { return e.err }

// Marked is an error whose text is the message alone (format and args as fmt.Sprintf's)
// and which errors.Is tells apart as mark: for a message that reads well without mark's words.
func Marked(mark error, format string, args ...any) error {
	return markedError{fmt.Sprintf(format, args...), mark}
}

type markedError struct {
	msg  string
	mark error
}

func (e markedError) Error() string { return e.msg }
func (e markedError) Unwrap() error { return e.mark }

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

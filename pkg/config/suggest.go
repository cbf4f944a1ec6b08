package config

import (
	"reflect"
	"strings"
)

// maxSuggestRunes bounds the keys Suggest compares: an edit distance costs the product of the
// lengths, and a key longer than any known one by this much is no typo of one.
const maxSuggestRunes = 64

// Suggest returns the known key nearest to key ("section.name", as a file or --set spells it)
// by edit distance, compared case-insensitively, and whether one is near enough to be a typo:
// at most 2 edits, and fewer than a third of the key's length (a key known in another case is
// suggested as spelled). A key of a share
// ("mps.shares.<name>.<field>") is compared with the share keys under the same name; a key
// without a dot with the sections. Keys longer than maxSuggestRunes get no suggestion.
func Suggest(key string) (string, bool) {
	if key == "" || len([]rune(key)) > maxSuggestRunes {
		return "", false
	}
	best, bestDist := "", -1
	for _, c := range suggestCandidates(key) {
		if d := editDistance(strings.ToLower(key), strings.ToLower(c)); bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == key || bestDist > 2 || 3*bestDist >= len([]rune(key)) {
		return "", false
	}
	return best, true
}

// suggestCandidates are the known keys key may be a typo of.
func suggestCandidates(key string) []string {
	t := reflect.TypeFor[Config]()
	if rest, ok := strings.CutPrefix(key, "mps.shares."); ok && strings.Contains(rest, ".") {
		name := rest[:strings.LastIndexByte(rest, '.')]
		st := reflect.TypeFor[MPSShare]()
		var out []string
		for i := range st.NumField() {
			out = append(out, "mps.shares."+name+"."+st.Field(i).Tag.Get("toml")) // name as spelled
		}
		return out
	}
	if !strings.Contains(key, ".") {
		var out []string
		for i := range t.NumField() {
			out = append(out, t.Field(i).Tag.Get("toml"))
		}
		return out
	}
	return Keys()
}

// editDistance is the Levenshtein distance of a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// didYouMean is " (did you mean \"<nearest>\"?)" for an unknown key, "" when none is near.
func didYouMean(key string) string {
	if s, ok := Suggest(key); ok {
		return ` (did you mean "` + s + `"?)`
	}
	return ""
}

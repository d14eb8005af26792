package builtin

import (
	"encoding/json"
	"unicode/utf8"
)

// jsonRuneLen is how many bytes encoding/json writes inside a string for
// the rune r that takes size bytes in the input (HTML-escaping on, as
// json.Marshal does; an invalid byte becomes \ufffd).
func jsonRuneLen(r rune, size int) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
		return 2
	case r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029', r == utf8.RuneError && size == 1:
		return 6
	default:
		return size
	}
}

// truncateEncoded returns the longest prefix of s whose JSON
// encoding, quotes excluded, takes at most budget bytes, and whether it cut
// anything.
func truncateEncoded(s string, budget int) (string, bool) {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += jsonRuneLen(r, size)
		if n > budget {
			return s[:i], true
		}
		i += size
	}
	return s, false
}

// encodedLen returns the length of v's JSON encoding (0 if it has none).
func encodedLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

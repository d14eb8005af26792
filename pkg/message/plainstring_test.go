package message

import (
	"encoding/json"
	"testing"
)

// TestPlainString checks that ContentText's fast path takes the strings
// without escapes and gives the text json.Unmarshal gives, and leaves every
// other value to json.Unmarshal.
func TestPlainString(t *testing.T) {
	t.Parallel()
	plain := []string{`""`, `"abc"`, `"Found 20 rows: north/widgets 1.2M"`, `"héllo ✓"`, `"<&>"`}
	other := []string{`"a\"b"`, `"a\\b"`, `"\u00e9"`, `"line\nbreak"`, "\"tab\there\"", "\"bad \xff utf8\"",
		`"a"b"`, `"unterminated`, `x`, `"`, `12`}
	for i, raw := range append(plain, other...) {
		got, ok := plainString(json.RawMessage(raw))
		if ok != (i < len(plain)) {
			t.Errorf("plainString(%q) ok = %v", raw, ok)
		}
		var want string
		err := json.Unmarshal([]byte(raw), &want)
		if ok && (err != nil || got != want) {
			t.Errorf("plainString(%q) = %q, but json.Unmarshal gives %q, %v", raw, got, want, err)
		}
		if text := ContentText(json.RawMessage(raw)); err == nil && text != want {
			t.Errorf("ContentText(%q) = %q, want %q", raw, text, want)
		}
	}
}

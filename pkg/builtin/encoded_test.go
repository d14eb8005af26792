package builtin

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTruncateEncoded(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"plain ascii text",
		strings.Repeat("<>&\"\\\n\t\x01\x7f", 50),
		strings.Repeat("héllo wörld ✓ \u2028 \U0001F600", 40),
		strings.Repeat("\uFFFD", 30),
		"bad \xff\xfe bytes",
	} {
		full, _ := json.Marshal(s)
		for budget := 0; budget <= len(full); budget += 7 {
			cut, truncated := truncateEncoded(s, budget)
			enc, _ := json.Marshal(cut)
			if len(enc)-2 > budget {
				t.Fatalf("budget %d: %q encodes to %d bytes", budget, cut, len(enc)-2)
			}
			if truncated != (cut != s) || !strings.HasPrefix(s, cut) {
				t.Fatalf("budget %d: cut %q truncated %v", budget, cut, truncated)
			}
			if truncated {
				// One more rune would not fit.
				next := s[:len(cut)+len(string([]rune(s[len(cut):])[0]))]
				if enc, _ := json.Marshal(next); len(enc)-2 <= budget {
					t.Fatalf("budget %d: cut too early at %d", budget, len(cut))
				}
			}
		}
	}
}

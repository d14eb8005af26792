package agent

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestJSONString checks that jsonString writes what json.Marshal writes,
// on its fast path and off it.
func TestJSONString(t *testing.T) {
	for _, s := range []string{"", "ok", "Found 20 rows: north/widgets 1.2M, ", "a\"b", `a\b`, "<tag>", "a&b", "line\nbreak",
		"tab\t", "\x7f", "héllo", "bad \xff utf8", "\u2028", "Tool 'x' is running in the background as task 01J."} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonString(s); !bytes.Equal(got, want) {
			t.Errorf("jsonString(%q) = %s, want %s", s, got, want)
		}
	}
}

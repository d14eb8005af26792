package agent

import (
	"encoding/json"
	"sort"
	"strings"
)

// jsonString returns s as JSON, as json.Marshal writes it.
func jsonString(s string) json.RawMessage {
	if plainASCII(s) {
		b := make(json.RawMessage, 0, len(s)+2)
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	b, _ := json.Marshal(s)
	return b
}

// plainASCII reports whether json.Marshal writes s between quotes as it
// is: printable ASCII without quotes, backslashes or the characters it
// escapes for HTML.
func plainASCII(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20, c >= 0x80, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func boolPtr(b bool) *bool { return &b }

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func idList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = "'" + id + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

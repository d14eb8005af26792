package agent

import (
	"encoding/json"
	"sort"
	"strings"
)

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
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

// Package jsonscan holds small scans of JSON text shared by offload's
// packages, where a pass over the bytes saves encoding/json's work.
package jsonscan

// IsCompact reports whether valid JSON v holds no whitespace outside its
// strings, so that json.Compact would return it unchanged (FuzzCompact in
// pkg/protocol checks it against json.Compact).
func IsCompact[T ~string | ~[]byte](v T) bool {
	in := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case in && c == '\\':
			i++ // the escaped byte
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// ArgsDigest returns the args_digest of a call's arguments (SPEC §12,
// binding): the lowercase hex SHA-256 of args in canonical JSON, that is
// object keys sorted (byte order), no insignificant whitespace, numbers
// as written, strings as encoding/json writes them without HTML
// escaping. Empty or null arguments are those of "{}", as an
// announcement carries them. args must be valid JSON.
func ArgsDigest(args json.RawMessage) (string, error) {
	canon, err := CanonicalJSON(args)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// CanonicalJSON returns data in the canonical JSON of [ArgsDigest]
// (empty or null data is "{}").
func CanonicalJSON(data json.RawMessage) ([]byte, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("protocol: canonical JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("protocol: canonical JSON: data after the value")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("protocol: canonical JSON: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ValidDigest reports whether s has the form of an args_digest: 64
// lowercase hex digits.
func ValidDigest(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

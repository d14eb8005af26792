package openaicompat

import (
	"log/slog"
	"strconv"
	"strings"
)

// Secret is a credential. It prints, formats and logs as "[REDACTED]"; use
// string(s) to read it.
type Secret string

const redacted = "[REDACTED]"

// String implements fmt.Stringer without revealing the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer without revealing the secret.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// LogValue implements slog.LogValuer without revealing the secret.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText implements encoding.TextMarshaler without revealing the
// secret, so that JSON or YAML dumps of a Config stay safe.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// redact replaces every occurrence of the secret in text.
func (s Secret) redact(text string) string {
	if len(s) < 4 { // too short to be a key; avoid mangling messages
		return text
	}
	return strings.ReplaceAll(text, string(s), redacted)
}

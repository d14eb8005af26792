package protocol

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// This file holds the single pass over a payload's top-level object that
// the decoders use: the payload is validated once (json.Valid, no
// allocation), then its members are split into name → raw value slices of
// the payload, in order, without decoding the values. Each field is then
// decoded and checked on its own, as before; strings without escapes, the
// common case, are taken as they are instead of going through reflection.

// member is one top-level member of a JSON object: its name (unescaped)
// and its raw value, a slice of the payload.
type member struct {
	name []byte // a slice of the payload unless the name had escapes
	raw  []byte
}

// splitObject appends the members of a valid JSON object to out, in
// order. It must only be given data for which json.Valid reports true and
// whose first non-space byte is '{'.
func splitObject(out []member, data []byte) []member {
	i := skipSpace(data, 0) + 1 // past '{'
	for {
		i = skipSpace(data, i)
		if data[i] == '}' {
			return out
		}
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
		end := skipString(data, i)
		key := data[i:end]
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // past ':'
		vend := skipValue(data, i)
		out = append(out, member{name: memberName(key), raw: data[i:vend]})
		i = vend
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string starting at i.
func skipString(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

// skipValue returns the index just past the value starting at i.
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = skipString(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	default: // number, true, false, null
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return j
			}
			j++
		}
		return j
	}
}

// unquote returns the value of a valid JSON string literal.
func unquote(lit []byte) string {
	if s, ok := plainString(lit); ok {
		return s
	}
	var s string
	_ = json.Unmarshal(lit, &s) // valid: checked by json.Valid
	return s
}

// memberName returns a member's name: the literal's body when it is
// plain (no allocation), the unescaped name otherwise.
func memberName(lit []byte) []byte {
	if body, ok := plainBody(lit); ok {
		return body
	}
	return []byte(unquote(lit))
}

// plainString returns the value of a JSON string literal without escapes
// or invalid UTF-8 (which encoding/json would replace), as encoding/json
// would decode it; ok is false for anything else.
func plainString(lit []byte) (string, bool) {
	body, ok := plainBody(lit)
	if !ok {
		return "", false
	}
	return string(body), true
}

// plainBody is [plainString] without the copy: the literal's body.
func plainBody(lit []byte) ([]byte, bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return nil, false
	}
	body := lit[1 : len(lit)-1]
	if bytes.IndexByte(body, '\\') >= 0 {
		return nil, false
	}
	for _, c := range body {
		if c >= utf8.RuneSelf {
			if !utf8.Valid(body) {
				return nil, false
			}
			break
		}
	}
	return body, true
}

package tool

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// This file holds the compiled fast path of argument validation. Typed
// tools have simple object schemas: types, properties, required,
// additionalProperties and items, nothing else. For those, a compiled
// schema walks the raw JSON of the arguments once, without decoding it and
// without reflection. It only ever accepts: anything it is not sure of (a
// keyword it does not know, a number that is not plainly an integer, an
// escaped member name, a value that fails) makes it answer "not sure", and
// the caller validates with jsonschema-go as before. So the fast path
// changes no verdict and no error message; it only skips the slow path for
// arguments that are valid.

// Type bits of a compiled schema.
const (
	fastNull uint8 = 1 << iota
	fastBool
	fastInteger
	fastNumber
	fastString
	fastArray
	fastObject
)

// fastMaxDepth bounds the nesting the fast path walks; deeper arguments
// take the slow path.
const fastMaxDepth = 64

// fastSchema is one compiled (sub)schema.
type fastSchema struct {
	// never marks a schema the fast path does not handle: it accepts
	// nothing, so the slow path decides.
	never bool
	// types is the set of allowed types; 0 allows every type.
	types uint8
	// props are the declared properties' schemas.
	props map[string]*fastSchema
	// required maps each required name to its bit in a seen mask.
	required map[string]uint64
	// closed forbids members that are not declared (additionalProperties:
	// false); extra, when set, is the schema of such members.
	closed bool
	extra  *fastSchema
	// items is the schema of an array's elements; nil allows any.
	items *fastSchema
}

// fastAnnotations are keywords that never change a verdict.
var fastAnnotations = map[string]bool{
	"description": true, "title": true, "default": true, "examples": true,
	"$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// compileFast compiles a schema given as canonical JSON (the marshalled
// jsonschema.Schema). It never fails: what it does not know compiles to
// a schema that accepts nothing.
func compileFast(raw json.RawMessage) *fastSchema {
	never := &fastSchema{never: true}
	switch string(raw) {
	case "true":
		return &fastSchema{}
	case "false":
		return never
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(raw, &kw); err != nil {
		return never
	}
	s := &fastSchema{}
	for k, v := range kw {
		switch {
		case fastAnnotations[k]:
		case k == "type":
			var one string
			var many []string
			if json.Unmarshal(v, &one) == nil {
				many = []string{one}
			} else if json.Unmarshal(v, &many) != nil {
				return never
			}
			for _, name := range many {
				bit := fastTypeBit(name)
				if bit == 0 {
					return never
				}
				s.types |= bit
			}
			if s.types == 0 {
				return never // "type": [] allows nothing
			}
		case k == "properties":
			var props map[string]json.RawMessage
			if err := json.Unmarshal(v, &props); err != nil {
				return never
			}
			s.props = make(map[string]*fastSchema, len(props))
			for name, p := range props {
				s.props[name] = compileFast(p)
			}
		case k == "required":
			var names []string
			if err := json.Unmarshal(v, &names); err != nil || len(names) > 64 {
				return never
			}
			s.required = make(map[string]uint64, len(names))
			for _, name := range names {
				if _, dup := s.required[name]; !dup {
					s.required[name] = 1 << len(s.required)
				}
			}
		case k == "additionalProperties":
			switch string(v) {
			case "false":
				s.closed = true
			case "true":
			default:
				s.extra = compileFast(v)
			}
		case k == "items":
			s.items = compileFast(v)
		default:
			return never
		}
	}
	return s
}

func fastTypeBit(name string) uint8 {
	switch name {
	case "null":
		return fastNull
	case "boolean":
		return fastBool
	case "integer":
		return fastInteger
	case "number":
		return fastNumber
	case "string":
		return fastString
	case "array":
		return fastArray
	case "object":
		return fastObject
	}
	return 0
}

// accepts reports whether data, one JSON object and nothing else,
// certainly conforms to s. False means "not sure": validate with the slow
// path.
func (s *fastSchema) accepts(data []byte) bool {
	w := fastWalk{data: data}
	if w.space(); w.i >= len(data) || data[w.i] != '{' {
		return false // arguments are an object
	}
	if !w.value(s, 0) {
		return false
	}
	w.space()
	return w.i == len(data)
}

// fastWalk is a position in the JSON being checked.
type fastWalk struct {
	data []byte
	i    int
}

func (w *fastWalk) space() {
	for w.i < len(w.data) {
		switch w.data[w.i] {
		case ' ', '\t', '\r', '\n':
			w.i++
		default:
			return
		}
	}
}

// allows reports whether s allows a value of type bit.
func (s *fastSchema) allows(bit uint8) bool {
	return s.types == 0 || s.types&bit != 0
}

// value checks the value at the walk's position against s (nil: any
// schema) and moves past it.
func (w *fastWalk) value(s *fastSchema, depth int) bool {
	if s == nil {
		s = &fastAny
	}
	if s.never || depth > fastMaxDepth {
		return false
	}
	w.space()
	if w.i >= len(w.data) {
		return false
	}
	switch c := w.data[w.i]; {
	case c == '{':
		return s.allows(fastObject) && w.object(s, depth)
	case c == '[':
		return s.allows(fastArray) && w.array(s, depth)
	case c == '"':
		_, ok := w.str()
		return ok && s.allows(fastString)
	case c == 't':
		return s.allows(fastBool) && w.literal("true")
	case c == 'f':
		return s.allows(fastBool) && w.literal("false")
	case c == 'n':
		return s.allows(fastNull) && w.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return w.number(s)
	}
	return false
}

// fastAny is the schema without constraints.
var fastAny = fastSchema{}

func (w *fastWalk) literal(lit string) bool {
	if len(w.data)-w.i < len(lit) || string(w.data[w.i:w.i+len(lit)]) != lit {
		return false
	}
	w.i += len(lit)
	return true
}

// number checks a number. An integer is one written without fraction or
// exponent that fits an int64 (as the slow path decodes it); any other
// number is only a "number".
func (w *fastWalk) number(s *fastSchema) bool {
	start := w.i
	plain := true
	for w.i < len(w.data) {
		c := w.data[w.i]
		if c >= '0' && c <= '9' || c == '-' {
			w.i++
			continue
		}
		if c == '.' || c == 'e' || c == 'E' || c == '+' {
			plain = false
			w.i++
			continue
		}
		break
	}
	lit := string(w.data[start:w.i])
	if plain && s.allows(fastInteger) {
		if _, err := strconv.ParseInt(lit, 10, 64); err == nil && validNumber(lit) {
			return true
		}
	}
	if s.types != 0 && s.types&fastNumber == 0 {
		return false
	}
	_, err := strconv.ParseFloat(lit, 64)
	return err == nil && validNumber(lit)
}

// validNumber reports whether lit is a number in JSON's grammar
// (strconv accepts more: "+1", "01", ".5", "1_0" with base prefixes…).
func validNumber(lit string) bool {
	i := 0
	if i < len(lit) && lit[i] == '-' {
		i++
	}
	switch {
	case i < len(lit) && lit[i] == '0':
		i++
	case i < len(lit) && lit[i] >= '1' && lit[i] <= '9':
		for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(lit) && lit[i] == '.' {
		i++
		d := i
		for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
			i++
		}
		d := i
		for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(lit)
}

// str moves past a string and returns its contents when they hold no
// escape; ok is false for a malformed string.
func (w *fastWalk) str() (plain []byte, ok bool) {
	start := w.i + 1
	escaped := false
	for j := start; j < len(w.data); j++ {
		switch c := w.data[j]; {
		case c == '"':
			w.i = j + 1
			if escaped {
				return nil, true
			}
			return w.data[start:j], true
		case c == '\\':
			escaped = true
			if j+1 >= len(w.data) {
				return nil, false
			}
			switch w.data[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+5 >= len(w.data) {
					return nil, false
				}
				for _, h := range w.data[j+2 : j+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return nil, false
					}
				}
				j += 5
			default:
				return nil, false
			}
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (w *fastWalk) array(s *fastSchema, depth int) bool {
	w.i++ // '['
	w.space()
	if w.i < len(w.data) && w.data[w.i] == ']' {
		w.i++
		return true
	}
	for {
		if !w.value(s.items, depth+1) {
			return false
		}
		if more, ok := w.sep(']'); !more {
			return ok
		}
	}
}

// sep reads what follows an element or member: more after a ',', and ok
// after a ',' or the closing byte; anything else is not ok.
func (w *fastWalk) sep(closing byte) (more, ok bool) {
	w.space()
	if w.i >= len(w.data) {
		return false, false
	}
	switch w.data[w.i] {
	case ',':
		w.i++
		return true, true
	case closing:
		w.i++
		return false, true
	}
	return false, false
}

func (w *fastWalk) object(s *fastSchema, depth int) bool {
	w.i++ // '{'
	var seen uint64
	w.space()
	if w.i < len(w.data) && w.data[w.i] == '}' {
		w.i++
		return len(s.required) == 0
	}
	for {
		w.space()
		if w.i >= len(w.data) || w.data[w.i] != '"' {
			return false
		}
		name, ok := w.str()
		if !ok || name == nil || !utf8.Valid(name) {
			// An escaped name, or one that is not UTF-8: the slow path
			// decodes it (invalid bytes become U+FFFD, another name).
			return false
		}
		w.space()
		if w.i >= len(w.data) || w.data[w.i] != ':' {
			return false
		}
		w.i++
		seen |= s.required[string(name)]
		sub, declared := s.props[string(name)]
		switch {
		case declared:
		case s.closed:
			return false
		default:
			sub = s.extra
		}
		if !w.value(sub, depth+1) {
			return false
		}
		if more, ok := w.sep('}'); !more {
			return ok && seen == 1<<len(s.required)-1
		}
	}
}

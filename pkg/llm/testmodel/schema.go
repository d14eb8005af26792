package testmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxDepth bounds recursion through $ref cycles and deeply nested schemas;
// beyond it the generator yields null.
const maxDepth = 32

// GenerateArgs returns a JSON value satisfying schema (in the common cases),
// generated deterministically from seed the way [Model] generates tool
// arguments. See the package documentation for the rules. An empty or null
// schema yields {}; the top-level schema is generated as an object when it
// has no "type", since tool parameters are always objects. Negative seeds
// are used as their absolute value. It returns an error only when schema is
// not valid JSON.
func GenerateArgs(schema json.RawMessage, seed int) (json.RawMessage, error) {
	s := bytes.TrimSpace(schema)
	if len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return json.RawMessage("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(s))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("testmodel: decode schema: %w", err)
	}
	g := &generator{root: root, seed: absInt(seed)}
	var v any
	if m, ok := root.(map[string]any); ok && m["type"] == nil && !hasAny(m, "const", "enum", "examples", "$ref", "anyOf", "oneOf", "allOf") {
		v = g.object(m, 0)
	} else {
		v = g.gen(root, 0)
	}
	out, err := json.Marshal(v)
	if err != nil {
		// Values come from a decoded JSON document, so this cannot happen.
		return nil, fmt.Errorf("testmodel: encode arguments: %w", err)
	}
	return out, nil
}

type generator struct {
	root any
	seed int
}

func hasAny(m map[string]any, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

func (g *generator) gen(schema any, depth int) any {
	if depth > maxDepth {
		return nil
	}
	m, ok := schema.(map[string]any)
	if !ok {
		// Boolean schemas (true accepts anything) and malformed ones.
		return g.char()
	}
	if v, ok := m["const"]; ok {
		return v
	}
	if l, ok := m["enum"].([]any); ok && len(l) > 0 {
		return l[g.seed%len(l)]
	}
	if l, ok := m["examples"].([]any); ok && len(l) > 0 {
		return l[g.seed%len(l)]
	}
	if ref, ok := m["$ref"].(string); ok {
		target, ok := resolveRef(g.root, ref)
		if !ok {
			return nil
		}
		return g.gen(target, depth+1)
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if l, ok := m[key].([]any); ok && len(l) > 0 {
			return g.gen(l[g.seed%len(l)], depth+1)
		}
	}
	if l, ok := m["allOf"].([]any); ok && len(l) == 1 && m["type"] == nil {
		return g.gen(l[0], depth+1)
	}

	typ := m["type"]
	if l, ok := typ.([]any); ok {
		typ = nil
		if len(l) > 0 {
			typ = l[g.seed%len(l)]
		}
	}
	switch typ {
	case "object":
		return g.object(m, depth)
	case "string":
		return g.str(m)
	case "integer":
		return g.integer(m)
	case "number":
		return g.number(m)
	case "boolean":
		return g.seed%2 == 1
	case "array":
		return g.array(m, depth)
	case "null":
		return nil
	default:
		return g.char()
	}
}

// object fills the required properties (and required names without a
// property schema, with a character) and one "additionalProperty" when
// additionalProperties allows it.
func (g *generator) object(m map[string]any, depth int) any {
	out := map[string]any{}
	props, _ := m["properties"].(map[string]any)
	req, _ := m["required"].([]any)
	for _, r := range req {
		name, ok := r.(string)
		if !ok {
			continue
		}
		if ps, ok := props[name]; ok {
			out[name] = g.gen(ps, depth+1)
		} else {
			out[name] = g.char()
		}
	}
	switch ap := m["additionalProperties"].(type) {
	case bool:
		if ap {
			out[freeKey(out)] = g.char()
		}
	case map[string]any:
		out[freeKey(out)] = g.gen(ap, depth+1)
	}
	return out
}

func freeKey(m map[string]any) string {
	k := "additionalProperty"
	for {
		if _, ok := m[k]; !ok {
			return k
		}
		k += "_"
	}
}

func (g *generator) str(m map[string]any) any {
	if n, ok := intKeyword(m, "minLength"); ok && n > 0 {
		return strings.Repeat(g.char(), int(n))
	}
	if n, ok := intKeyword(m, "maxLength"); ok && n == 0 {
		return ""
	}
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, g.seed)
	switch m["format"] {
	case "date":
		return base.Format(time.DateOnly)
	case "date-time":
		return base.Format(time.RFC3339)
	}
	return g.char()
}

// bounds returns the inclusive integer bounds of an integer schema, honouring
// exclusiveMinimum/exclusiveMaximum in both their numeric (2019+) and boolean
// (draft 4) forms.
func bounds(m map[string]any) (lo, hi int64, hasLo, hasHi bool) {
	exMinBool, _ := m["exclusiveMinimum"].(bool)
	exMaxBool, _ := m["exclusiveMaximum"].(bool)
	if f, ok := num(m["minimum"]); ok {
		lo, hasLo = int64(math.Ceil(f)), true
		if exMinBool && float64(lo) == f {
			lo++
		}
	}
	if f, ok := num(m["exclusiveMinimum"]); ok {
		if l := int64(math.Floor(f)) + 1; !hasLo || l > lo {
			lo, hasLo = l, true
		}
	}
	if f, ok := num(m["maximum"]); ok {
		hi, hasHi = int64(math.Floor(f)), true
		if exMaxBool && float64(hi) == f {
			hi--
		}
	}
	if f, ok := num(m["exclusiveMaximum"]); ok {
		if h := int64(math.Ceil(f)) - 1; !hasHi || h < hi {
			hi, hasHi = h, true
		}
	}
	return lo, hi, hasLo, hasHi
}

func (g *generator) integer(m map[string]any) any {
	lo, hi, hasLo, hasHi := bounds(m)
	s := int64(g.seed)
	switch {
	case hasLo && hasHi:
		if hi < lo {
			return lo // unsatisfiable; stay near the bounds
		}
		return lo + s%(hi-lo+1)
	case hasLo:
		return lo + s
	case hasHi:
		return hi - s
	default:
		return s
	}
}

// number is the integer rule, as a float; when the float bounds leave no
// integer (e.g. exclusiveMinimum 0, exclusiveMaximum 1) it is the midpoint.
func (g *generator) number(m map[string]any) any {
	v := float64(g.integer(m).(int64))
	if inNumberBounds(m, v) {
		return v
	}
	lo, hasLo := num(m["minimum"])
	if f, ok := num(m["exclusiveMinimum"]); ok && (!hasLo || f > lo) {
		lo, hasLo = f, true
	}
	hi, hasHi := num(m["maximum"])
	if f, ok := num(m["exclusiveMaximum"]); ok && (!hasHi || f < hi) {
		hi, hasHi = f, true
	}
	if hasLo && hasHi {
		return (lo + hi) / 2
	}
	return v
}

func inNumberBounds(m map[string]any, v float64) bool {
	exMinBool, _ := m["exclusiveMinimum"].(bool)
	exMaxBool, _ := m["exclusiveMaximum"].(bool)
	if f, ok := num(m["minimum"]); ok && (v < f || exMinBool && v == f) {
		return false
	}
	if f, ok := num(m["maximum"]); ok && (v > f || exMaxBool && v == f) {
		return false
	}
	if f, ok := num(m["exclusiveMinimum"]); ok && v <= f {
		return false
	}
	if f, ok := num(m["exclusiveMaximum"]); ok && v >= f {
		return false
	}
	return true
}

// array generates the prefixItems, then pads with items up to minItems, or
// adds one item when there is an items schema and maxItems allows it. With
// uniqueItems the seed advances after each element so that they differ.
func (g *generator) array(m map[string]any, depth int) any {
	out := []any{}
	unique, _ := m["uniqueItems"].(bool)
	add := func(s any) {
		out = append(out, g.gen(s, depth+1))
		if unique {
			g.seed++
		}
	}
	if l, ok := m["prefixItems"].([]any); ok {
		for _, s := range l {
			add(s)
		}
	}
	items, hasItems := m["items"].(map[string]any)
	minItems, _ := intKeyword(m, "minItems")
	if int(minItems) > len(out) {
		var s any = map[string]any{}
		if hasItems {
			s = items
		}
		for len(out) < int(minItems) {
			add(s)
		}
	} else if hasItems && len(items) > 0 {
		if maxItems, ok := intKeyword(m, "maxItems"); !ok || int(maxItems) > len(out) {
			add(items)
		}
	}
	return out
}

// char returns the seed as an Excel-style column name in lower case:
// 0 → "a", 25 → "z", 26 → "aa", 27 → "ab".
func (g *generator) char() string {
	n := g.seed
	var b []byte
	for {
		b = append(b, byte('a'+n%26))
		n = n/26 - 1
		if n < 0 {
			break
		}
	}
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

func num(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

func intKeyword(m map[string]any, key string) (int64, bool) {
	f, ok := num(m[key])
	if !ok || f < 0 || f > 1<<20 {
		return 0, false
	}
	return int64(f), true
}

// resolveRef follows a local reference ("#", "#/$defs/X", any JSON pointer
// into the root document).
func resolveRef(root any, ref string) (any, bool) {
	ptr, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, false
	}
	cur := root
	if ptr == "" {
		return cur, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			if cur, ok = c[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func absInt(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

package conformance

import (
	"encoding/json"
	"fmt"
	"sort"
)

// invalidArgs derives, from a tool's JSON Schema and valid arguments,
// arguments the schema refuses, and says how: a required property left
// out, else a property of the wrong type, else a property the schema does
// not allow. found is false when the schema accepts every object.
func invalidArgs(schemaJSON, validJSON json.RawMessage) (args json.RawMessage, how string, found bool) {
	var schema map[string]any
	if json.Unmarshal(schemaJSON, &schema) != nil {
		return nil, "", false
	}
	valid := map[string]any{}
	_ = json.Unmarshal(validJSON, &valid)
	encode := func(m map[string]any, how string) (json.RawMessage, string, bool) {
		b, err := json.Marshal(m)
		return b, how, err == nil
	}
	if req, _ := schema["required"].([]any); len(req) > 0 {
		if name, ok := req[0].(string); ok {
			m := copyMap(valid)
			delete(m, name)
			return encode(m, fmt.Sprintf("the required property %q left out", name))
		}
	}
	props, _ := schema["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, _ := props[name].(map[string]any)
		t, _ := p["type"].(string)
		var wrong any
		switch t {
		case "string":
			wrong = 12345
		case "number", "integer", "boolean", "array", "object":
			wrong = "not a " + t
		default:
			continue
		}
		m := copyMap(valid)
		m[name] = wrong
		return encode(m, fmt.Sprintf("property %q of the wrong type (%s wanted)", name, t))
	}
	if extra, ok := schema["additionalProperties"].(bool); ok && !extra {
		m := copyMap(valid)
		m["offload_conformance_unknown"] = true
		return encode(m, "a property the schema does not allow")
	}
	return nil, "", false
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

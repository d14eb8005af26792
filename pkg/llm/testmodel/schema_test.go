package testmodel

import (
	"encoding/json"
	"testing"
)

func TestGenerateArgs(t *testing.T) {
	t.Parallel()
	// Each schema is wrapped as the required property "x" of an object
	// unless top is set.
	tests := []struct {
		name   string
		schema string
		seed   int
		top    bool
		want   string
	}{
		{name: "empty schema", schema: ``, top: true, want: `{}`},
		{name: "null schema", schema: `null`, top: true, want: `{}`},
		{name: "object without type", schema: `{"properties":{"a":{"type":"integer"}},"required":["a"]}`, top: true, want: `{"a":0}`},
		{name: "only required", schema: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["b"]}`, top: true, want: `{"b":"a"}`},
		{name: "required without property", schema: `{"type":"object","required":["q"]}`, top: true, want: `{"q":"a"}`},
		{name: "const", schema: `{"const":"fixed","type":"string"}`, want: `"fixed"`},
		{name: "falsy const", schema: `{"const":0}`, want: `0`},
		{name: "const before enum", schema: `{"const":1,"enum":[2,3]}`, want: `1`},
		{name: "enum seed 0", schema: `{"enum":["x","y","z"]}`, want: `"x"`},
		{name: "enum seed 4", schema: `{"enum":["x","y","z"]}`, seed: 4, want: `"y"`},
		{name: "examples", schema: `{"type":"string","examples":["e1","e2"]}`, seed: 1, want: `"e2"`},
		{name: "enum before examples", schema: `{"enum":["x"],"examples":["e1"]}`, want: `"x"`},
		{name: "ref into defs", schema: `{"$ref":"#/$defs/City"}`, want: `{"name":"a"}`},
		{name: "anyOf", schema: `{"anyOf":[{"type":"integer"},{"type":"boolean"}]}`, seed: 1, want: `true`},
		{name: "oneOf", schema: `{"oneOf":[{"type":"null"},{"type":"string"}]}`, want: `null`},
		{name: "allOf single", schema: `{"allOf":[{"$ref":"#/$defs/City"}]}`, want: `{"name":"a"}`},
		{name: "type list", schema: `{"type":["integer","null"]}`, seed: 1, want: `null`},
		{name: "string", schema: `{"type":"string"}`, want: `"a"`},
		{name: "string seed 25", schema: `{"type":"string"}`, seed: 25, want: `"z"`},
		{name: "string seed 26", schema: `{"type":"string"}`, seed: 26, want: `"aa"`},
		{name: "string seed 27", schema: `{"type":"string"}`, seed: 27, want: `"ab"`},
		{name: "string seed 702", schema: `{"type":"string"}`, seed: 702, want: `"aaa"`},
		{name: "string negative seed", schema: `{"type":"string"}`, seed: -1, want: `"b"`},
		{name: "string minLength", schema: `{"type":"string","minLength":3}`, seed: 1, want: `"bbb"`},
		{name: "string maxLength 0", schema: `{"type":"string","maxLength":0}`, want: `""`},
		{name: "string date", schema: `{"type":"string","format":"date"}`, want: `"2024-01-01"`},
		{name: "string date seed 31", schema: `{"type":"string","format":"date"}`, seed: 31, want: `"2024-02-01"`},
		{name: "string date-time", schema: `{"type":"string","format":"date-time"}`, seed: 1, want: `"2024-01-02T00:00:00Z"`},
		{name: "integer", schema: `{"type":"integer"}`, seed: 7, want: `7`},
		{name: "integer minimum", schema: `{"type":"integer","minimum":10}`, seed: 2, want: `12`},
		{name: "integer maximum", schema: `{"type":"integer","maximum":10}`, seed: 2, want: `8`},
		{name: "integer range", schema: `{"type":"integer","minimum":1,"maximum":3}`, seed: 5, want: `3`},
		{name: "integer range wraps", schema: `{"type":"integer","minimum":1,"maximum":3}`, seed: 3, want: `1`},
		{name: "integer single value", schema: `{"type":"integer","minimum":4,"maximum":4}`, seed: 9, want: `4`},
		{name: "integer exclusive bounds", schema: `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":2}`, seed: 5, want: `1`},
		{name: "integer exclusive draft4", schema: `{"type":"integer","minimum":0,"exclusiveMinimum":true}`, want: `1`},
		{name: "integer fractional bounds", schema: `{"type":"integer","minimum":0.5,"maximum":2.5}`, seed: 1, want: `2`},
		{name: "number", schema: `{"type":"number","minimum":1.5}`, want: `2`},
		{name: "number no integer in range", schema: `{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}`, want: `0.5`},
		{name: "boolean seed 0", schema: `{"type":"boolean"}`, want: `false`},
		{name: "boolean seed 1", schema: `{"type":"boolean"}`, seed: 1, want: `true`},
		{name: "null", schema: `{"type":"null"}`, want: `null`},
		{name: "no type", schema: `{"description":"anything"}`, seed: 2, want: `"c"`},
		{name: "array one item", schema: `{"type":"array","items":{"type":"integer"}}`, want: `[0]`},
		{name: "array no items schema", schema: `{"type":"array"}`, want: `[]`},
		{name: "array maxItems 0", schema: `{"type":"array","items":{"type":"integer"},"maxItems":0}`, want: `[]`},
		{name: "array minItems", schema: `{"type":"array","items":{"type":"string"},"minItems":2}`, want: `["a","a"]`},
		{name: "array minItems unique", schema: `{"type":"array","items":{"type":"string"},"minItems":3,"uniqueItems":true}`, want: `["a","b","c"]`},
		{name: "array prefixItems", schema: `{"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"maxItems":2,"items":{"type":"integer"}}`, want: `["a",false]`},
		{name: "array prefixItems then item", schema: `{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"}}`, want: `["a",0]`},
		{name: "array prefixItems padded", schema: `{"type":"array","prefixItems":[{"type":"string"}],"minItems":2}`, want: `["a","a"]`},
		{name: "object recursive", schema: `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`, want: `{"n":0}`},
		{name: "additionalProperties true", schema: `{"type":"object","additionalProperties":true}`, want: `{"additionalProperty":"a"}`},
		{name: "additionalProperties schema", schema: `{"type":"object","additionalProperties":{"type":"integer"}}`, seed: 3, want: `{"additionalProperty":3}`},
		{name: "additionalProperties key taken", schema: `{"type":"object","properties":{"additionalProperty":{"type":"integer"}},"required":["additionalProperty"],"additionalProperties":true}`, want: `{"additionalProperty":0,"additionalProperty_":"a"}`},
		{name: "additionalProperties false", schema: `{"type":"object","additionalProperties":false}`, want: `{}`},
		{name: "recursive ref terminates", schema: `{"$ref":"#/$defs/Node"}`, want: ``},
	}
	defs := `{"City":{"type":"object","properties":{"name":{"type":"string"},"pop":{"type":"integer"}},"required":["name"]},` +
		`"Node":{"type":"object","properties":{"next":{"$ref":"#/$defs/Node"}},"required":["next"]}}`
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			schema := tt.schema
			if !tt.top {
				schema = `{"type":"object","properties":{"x":` + tt.schema + `},"required":["x"],"$defs":` + defs + `}`
			}
			got, err := GenerateArgs(json.RawMessage(schema), tt.seed)
			if err != nil {
				t.Fatalf("GenerateArgs: %v", err)
			}
			if tt.want == "" {
				// Only termination and validity matter.
				if !json.Valid(got) {
					t.Fatalf("invalid JSON %s", got)
				}
				return
			}
			want := tt.want
			if !tt.top {
				want = `{"x":` + tt.want + `}`
			}
			if string(got) != want {
				t.Errorf("GenerateArgs(%s, %d) = %s, want %s", schema, tt.seed, got, want)
			}
		})
	}
}

func TestGenerateArgsInvalidSchema(t *testing.T) {
	t.Parallel()
	if _, err := GenerateArgs(json.RawMessage(`{"type":`), 0); err == nil {
		t.Fatal("want an error for invalid JSON")
	}
}

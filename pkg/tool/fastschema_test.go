package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

type fastArgs struct {
	Query   string            `json:"query"`
	Limit   int               `json:"limit"`
	Filters map[string]string `json:"filters,omitempty"`
	Tags    []string          `json:"tags,omitempty"`
	Score   float64           `json:"score,omitempty"`
	Strict  bool              `json:"strict,omitempty"`
	Note    *string           `json:"note,omitempty"`
	Inner   struct {
		X int `json:"x"`
	} `json:"inner,omitzero"`
	Any   any   `json:"any,omitempty"`
	Small uint8 `json:"small,omitempty"` // minimum/maximum: slow path
}

// fastSchemas are the schemas the fast path is compared on: a typed tool's
// and hand-written ones with keywords it does and does not handle.
func fastSchemas(t testing.TB) []*Tool {
	t.Helper()
	typed, err := NewFunc("typed", "", func(context.Context, *RunContext, fastArgs) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	tools := []*Tool{typed}
	for _, p := range []string{
		``,
		`{"type":"object","properties":{"a":{"type":"string","minLength":3}},"required":["a"]}`,
		`{"type":"object","properties":{"a":{"type":["integer","null"]},"b":{"type":"number"}},"additionalProperties":{"type":"boolean"}}`,
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"k":{"enum":[1,2]}}}}}}`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}}}`,
		`{"type":"object","properties":{"a":false,"b":true},"required":["b","c"]}`,
		`{"type":"object","patternProperties":{"^x":{"type":"string"}}}`,
		`{"type":"object","properties":{"\ufffd":{"type":"integer"}}}`,
		`{"properties":{"a":{"type":"integer","description":"an int","title":"A","default":1}}}`,
	} {
		tools = append(tools, MustNew(Def{Name: "hand", Parameters: json.RawMessage(p)}, func(context.Context, *RunContext, json.RawMessage) (any, error) { return nil, nil }))
	}
	return tools
}

// fastInputs are arguments to check, valid and not.
var fastInputs = []string{
	`{}`,
	`{"query":"q","limit":20}`,
	`{"query":"quarterly revenue","limit":20,"filters":{"lang":"en","since":"2026-01-01"},"inner":{"x":1}}`,
	` { "query" : "q" , "limit" : -0 , "tags" : [ "a" , "b" ] } `,
	`{"query":"q","limit":20.0}`,
	`{"query":"q","limit":1e2}`,
	`{"query":"q","limit":99999999999999999999}`,
	`{"query":"q","limit":"20"}`,
	`{"query":"q"}`,
	`{"query":"q","limit":1,"extra":1}`,
	`{"query":"q","limit":1,"filters":{"a":1}}`,
	`{"query":"q","limit":1,"note":null,"score":1.5,"strict":true,"any":[1,{"x":null}]}`,
	`{"query":"q","limit":1,"small":300}`,
	`{"query":"q","limit":1,"small":3}`,
	`{"qu\u0065ry":"q","limit":1}`,
	`{"query":"a\"b\\c\u00e9\n","limit":1}`,
	`{"query":"q","limit":1,"query":2}`,
	`{"query":"q","limit":1,"inner":{"x":1,"y":2}}`,
	`{"a":"abcd"}`, `{"a":"ab"}`, `{"a":1,"b":2.5,"c":true}`, `{"a":null,"c":"x"}`,
	`{"a":[{"k":1}]}`, `{"a":[]}`, `{"b":1,"c":2}`, `{"b":1}`, `{"x1":"s"}`, `{"a":1.5}`,
	`[]`, `"x"`, `{"a":1}x`, `{"a":01}`, `{"a":+1}`, `{"a":.5}`, `{"a":1.}`, `{"a":"\x01"}`,
	"{\"\xff\":\"s\"}", "{\"\xef\xbf\xbd\":\"s\"}", "{\"\xef\xbf\xbd\":1}",
	`{"a":1,}`, `{"a" 1}`, `{"a":tru}`, `{"a":nul}`, `{"a":[1,]}`, `{"a":"\q"}`, `{"a":"\u12"}`,
}

// checkSlow runs the slow path, as the worker does for arguments the fast
// path is not sure of.
func checkSlow(tl *Tool, raw []byte) error {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || dec.More() {
		return &ValidationError{Tool: tl.Name, Message: "invalid"}
	}
	if _, err := dec.Token(); err == nil {
		return &ValidationError{Tool: tl.Name, Message: "trailing data"}
	}
	return tl.CheckArgs(obj)
}

// TestArgsCertainlyValid checks that the fast path accepts only what the
// slow path accepts, and that it does accept the typed tool's valid
// arguments (otherwise it would be dead code).
func TestArgsCertainlyValid(t *testing.T) {
	t.Parallel()
	tools := fastSchemas(t)
	for _, tl := range tools {
		for _, in := range fastInputs {
			fast := tl.ArgsCertainlyValid(json.RawMessage(in))
			slow := checkSlow(tl, []byte(in))
			if fast && slow != nil {
				t.Errorf("%s: fast path accepted %s, slow path: %v", tl.Parameters, in, slow)
			}
		}
	}
	typed := tools[0]
	for _, in := range []string{
		`{"query":"q","limit":20}`,
		`{"query":"quarterly revenue","limit":20,"filters":{"lang":"en","since":"2026-01-01"},"inner":{"x":1}}`,
		` { "query" : "q" , "limit" : -0 , "tags" : [ "a" , "b" ] } `,
		`{"query":"q","limit":1,"note":null,"score":1.5,"strict":true,"any":[1,{"x":null}]}`,
		`{"query":"a\"b\\c\u00e9\n","limit":1}`,
	} {
		if !typed.ArgsCertainlyValid(json.RawMessage(in)) {
			t.Errorf("fast path not sure of valid %s", in)
		}
	}
	for _, c := range []struct {
		tool int
		in   string
	}{{3, `{"a":1,"b":2.5,"c":true}`}, {3, `{"a":null}`}, {6, `{"b":1,"c":2}`}, {8, `{"a":1}`}, {1, `{}`}, {9, "{\"\xef\xbf\xbd\":1}"}} {
		if !tools[c.tool].ArgsCertainlyValid(json.RawMessage(c.in)) {
			t.Errorf("%s: fast path not sure of valid %s", tools[c.tool].Parameters, c.in)
		}
	}
	// Keywords the fast path does not know leave every verdict to the slow path.
	for _, i := range []int{2, 5, 7} {
		for _, in := range fastInputs {
			if tools[i].ArgsCertainlyValid(json.RawMessage(in)) && in != `{}` {
				t.Errorf("%s: fast path accepted %s", tools[i].Parameters, in)
			}
		}
	}
}

// TestParseArgsFastPathSameResult checks that ParseArgs returns the same
// compact arguments whichever path it takes.
func TestParseArgsFastPathSameResult(t *testing.T) {
	t.Parallel()
	typed := fastSchemas(t)[0]
	slow := *typed
	slow.fast = nil
	for _, in := range fastInputs {
		a, errA := typed.ParseArgs(in)
		b, errB := slow.ParseArgs(in)
		// The messages come from the slow path either way (and jsonschema-go
		// lists additional properties in map order), so only the verdicts
		// and the arguments are compared.
		if !bytes.Equal(a, b) || (errA == nil) != (errB == nil) {
			t.Errorf("%s: fast %s %v, slow %s %v", in, a, errA, b, errB)
		}
	}
}

// FuzzArgsCertainlyValid checks that the fast path never accepts what the
// slow path refuses.
func FuzzArgsCertainlyValid(f *testing.F) {
	for _, in := range fastInputs {
		f.Add(in)
	}
	tools := fastSchemas(f)
	f.Fuzz(func(t *testing.T, in string) {
		for _, tl := range tools {
			if !tl.ArgsCertainlyValid(json.RawMessage(in)) {
				continue
			}
			if !json.Valid([]byte(in)) {
				t.Fatalf("%s: fast path accepted invalid JSON %q", tl.Parameters, in)
			}
			if err := checkSlow(tl, []byte(in)); err != nil {
				t.Fatalf("%s: fast path accepted %q, slow path: %v", tl.Parameters, in, err)
			}
		}
	})
}

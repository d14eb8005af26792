package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// splitSeeds are objects whose members splitObject must find as
// encoding/json does.
var splitSeeds = []string{
	`{}`,
	` { "a" : 1 , "b":"x" } `,
	`{"task_id":"01J","args":{"q":"a\"}b","n":[1,{"x":"]"}]},"n":-1.5e3,"t":true,"f":false,"z":null}`,
	`{"a\u0062":"\u00e9","a":1,"a":2}`,
	"{\"k\":\"caf\xc3\xa9\",\"bad\":\"\xff\"}",
	`{"s":"with \\ backslash","e":""}`,
	`{"nested":[[[]]],"o":{"p":{}}}`,
}

func checkSplit(t *testing.T, data []byte) {
	trimmed := bytes.TrimSpace(data)
	if !json.Valid(trimmed) || len(trimmed) == 0 || trimmed[0] != '{' {
		return
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &want); err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	f := &fields{m: splitObject(nil, trimmed)}
	for name, raw := range want {
		got, ok := f.lookup(name)
		if !ok || !bytes.Equal(got, raw) {
			t.Fatalf("%q: member %q = %q, %v; want %q", data, name, got, ok, raw)
		}
		var ws, gs string
		if json.Unmarshal(raw, &ws) == nil {
			f.str(name, &gs)
			if f.err != nil || gs != ws {
				t.Fatalf("%q: str %q = %q (%v), want %q", data, name, gs, f.err, ws)
			}
		}
	}
	for _, m := range f.m {
		if _, ok := want[string(m.name)]; !ok {
			t.Fatalf("%q: member %q not in encoding/json's", data, m.name)
		}
	}
}

// TestSplitObject checks the single-pass split against encoding/json.
func TestSplitObject(t *testing.T) {
	for _, s := range splitSeeds {
		checkSplit(t, []byte(s))
	}
}

// FuzzSplitObject checks the single-pass split against encoding/json on
// any valid object.
func FuzzSplitObject(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkSplit)
}

package tool

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// checkParsedCompact fails when ParseArgs accepts in but returns other
// bytes than json.Compact makes of it.
func checkParsedCompact(t *testing.T, tl *Tool, in string) {
	t.Helper()
	got, err := tl.ParseArgs(in)
	if err != nil {
		return
	}
	trimmed := strings.TrimSpace(in)
	if trimmed == "" {
		trimmed = "{}"
	}
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(trimmed)); err != nil {
		t.Fatalf("%s: ParseArgs accepted %q, which json.Compact refuses: %v", tl.Parameters, in, err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s: ParseArgs(%q) = %s, json.Compact gives %s", tl.Parameters, in, got, want.Bytes())
	}
}

// TestParseArgsCompact checks that the arguments ParseArgs returns are
// those json.Compact makes, also where it skips json.Compact because they
// are compact already.
func TestParseArgsCompact(t *testing.T) {
	t.Parallel()
	tools := fastSchemas(t)
	inputs := append([]string{" ", `{"query":"a \"quoted\" q\\","limit":1}`, "{ \"query\" : \"spaced out\" ,\n\t\"limit\": 2 }",
		`{"query":"tab	inside","limit":3}`}, fastInputs...)
	for _, tl := range tools {
		for _, in := range inputs {
			checkParsedCompact(t, tl, in)
		}
	}
}

// FuzzParseArgsCompact is TestParseArgsCompact on fuzzed arguments.
func FuzzParseArgsCompact(f *testing.F) {
	for _, in := range fastInputs {
		f.Add(in)
	}
	tools := fastSchemas(f)
	f.Fuzz(func(t *testing.T, in string) {
		for _, tl := range tools {
			checkParsedCompact(t, tl, in)
		}
	})
}

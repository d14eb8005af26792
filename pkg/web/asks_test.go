package web

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
)

// everythingAsks is the elicitation server-everything's
// trigger-elicitation-request sends (its schema, abridged to one of each
// kind of field), as a worker defers the call with it (SPEC §16).
func everythingAsks(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("testdata/everything-elicitation.json")
	if err != nil {
		t.Fatal(err)
	}
	var e map[string]any
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return map[string]any{metaElicitation: e, "mcp.server": "everything"}
}

// The inbox's form for an MCP server's elicitation (SPEC §16): each
// property of the requested schema a field of its kind, with its default,
// the required one marked; the form's values become the answer's content,
// typed as the schema says; a required field left empty, a number that is
// none or a choice not offered is refused with why, the values kept.
func TestElicitationForm(t *testing.T) {
	a := asksOf(everythingAsks(t))
	if a == nil || len(a.Fields) != 11 || a.Message == "" {
		t.Fatalf("asks: %+v", a)
	}
	it := item{Conversation: "C", Task: "T", Tool: "trigger-elicitation-request", Kind: "external", Asks: a}
	var b bytes.Buffer
	if err := pages["inbox"].Execute(&b, map[string]any{"Items": []item{it}, "MayAnswer": true, "CSRF": "x"}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		`Please provide inputs for the following fields:`,
		`<input type="text" name="f.name" value="" required>`,
		`<input type="checkbox" name="f.check" value="true">`,
		`<input type="email" name="f.email" value="">`,
		`<input type="number" step="1" name="f.integer" value="42">`,
		`<input type="number" step="any" name="f.number" value="3.14">`,
		`<option value="Monica" selected>Monica</option>`,
		`<select name="f.untitledMultipleSelectEnum" multiple>`,
		`<option value="Guitar" selected>Guitar</option>`,
		`<option value="hero-2">Green Lantern</option>`,
		`<option value="fish-1" selected>Tuna</option>`,
		`<option value="pet-2">Dogs</option>`,
		`value="accept"`, `value="decline"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the form lacks %s", want)
		}
	}
	if strings.Contains(page, `name="content"`) {
		t.Errorf("a form the schema gives also offers the raw answer field")
	}

	form := url.Values{"f.name": {"Ada Lovelace"}, "f.check": {"true"}, "f.integer": {"7"}, "f.number": {"2.5"},
		"f.untitledMultipleSelectEnum": {"Piano", "Violin"}, "f.titledSingleSelectEnum": {"hero-2"}, "f.email": {""}}
	raw, _, err := contentOf(a.Fields, form)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"check":true,"integer":7,"name":"Ada Lovelace","number":2.5,"titledSingleSelectEnum":"hero-2","untitledMultipleSelectEnum":["Piano","Violin"]}`
	if g, _ := json.Marshal(got); string(g) != want {
		t.Errorf("content %s, want %s", g, want)
	}

	bad := url.Values{"f.integer": {"seven"}, "f.legacyTitledEnum": {"pet-9"}, "f.titledMultipleSelectEnum": {"fish-1", "shark"}}
	_, sent, err := contentOf(a.Fields, bad)
	if err == nil {
		t.Fatal("a form without its required field, with a word for an integer and choices not offered: accepted")
	}
	for _, w := range []string{"String is required", "Integer is not a whole number", "pet-9 is not offered", "shark is not offered"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	for _, f := range sent {
		if f.Name == "integer" && f.Value != "seven" {
			t.Errorf("the refused form shows integer %q, want what was sent", f.Value)
		}
	}
}

// An elicitation in URL mode shows its http(s) URL to open, nothing else
// (a javascript: or relative URL is not shown); a schema with a property
// no field gives falls back to the answer's JSON; any other external call
// keeps the generic answer field alone.
func TestElicitationURLAndFallbacks(t *testing.T) {
	e := map[string]any{"message": "Sign in", "elicitationId": "e1"}
	if a := asksOf(map[string]any{metaElicitation: e, metaURL: "https://auth.example/x?y=1"}); a == nil || a.URL != "https://auth.example/x?y=1" {
		t.Errorf("URL mode: %+v", a)
	}
	for _, u := range []string{"javascript:alert(1)", "/relative", "data:text/html,x"} {
		if a := asksOf(map[string]any{metaElicitation: e, metaURL: u}); a == nil || a.URL != "" {
			t.Errorf("URL %q shown: %+v", u, a)
		}
	}
	nested := map[string]any{"message": "m", "requestedSchema": map[string]any{"type": "object",
		"properties": map[string]any{"o": map[string]any{"type": "object"}}}}
	if a := asksOf(map[string]any{metaElicitation: nested}); a == nil || a.Fields != nil {
		t.Errorf("an object property: %+v", a)
	}
	if a := asksOf(map[string]any{"offload.answer_to": "next_attempt"}); a != nil {
		t.Errorf("no elicitation: %+v", a)
	}
}

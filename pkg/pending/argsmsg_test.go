package pending

import "testing"

// The schema library's messages (as jsonschema-go words them) in a
// person's words, with the field's path.
func TestArgsMessage(t *testing.T) {
	for in, want := range map[string]string{
		`validating root: validating /properties/target: type: 5 has type "integer", want "string"`:                                              `target: must be a string, not an integer (5)`,
		`validating root: required: missing properties: ["target"]`:                                                                              `target is required`,
		`validating root: required: missing properties: ["target","count"]`:                                                                      `target, count are required`,
		`validating root: validating /properties/inner: validating /properties/inner/properties/name: type: 3 has type "integer", want "string"`: `inner.name: must be a string, not an integer (3)`,
		`validating root: validating /properties/inner: required: missing properties: ["name"]`:                                                  `inner: name is required`,
		`validating root: unexpected additional properties ["extra"]`:                                                                            `extra is not among the tool's arguments`,
		`validating root: validating /properties/n: minimum: 0 is less than 1`:                                                                   `n: minimum: 0 is less than 1`,
		`arguments must be a JSON object`:                                                                                                        `arguments must be a JSON object`,
	} {
		if got := argsMessage(in); got != want {
			t.Errorf("argsMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// A malformed answer is told the form of one, with its text as the
// content (issue 38).
func TestAnswerForm(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`hello`:        `{"content":"hello"}`,
		`"a <b> & c"`:  `{"content":"a <b> & c"}`,
		`{"text":"x"}`: `{"content":"the answer"}`,
		``:             `{"content":"the answer"}`,
	} {
		if got := AnswerForm([]byte(in)); got != "an answer is a JSON object such as "+want {
			t.Errorf("AnswerForm(%q) = %q, want %s", in, got, want)
		}
	}
}

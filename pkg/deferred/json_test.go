package deferred_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_deferred_tool_results_serializable
func TestResultsJSONForms(t *testing.T) {
	t.Parallel()
	approvals := []struct {
		name string
		in   any
		json string
		back any
	}{
		{"true", true, `true`, true},
		{"false", false, `false`, false},
		{"approved", deferred.ToolApproved{}, `{"override_args":null,"kind":"tool-approved"}`, deferred.ToolApproved{}},
		{"approved pointer", &deferred.ToolApproved{}, `{"override_args":null,"kind":"tool-approved"}`, deferred.ToolApproved{}},
		{"approved with override", deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"foo": "bar"}`)},
			`{"override_args":{"foo":"bar"},"kind":"tool-approved"}`, deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"foo":"bar"}`)}},
		{"denied", deferred.ToolDenied{}, `{"message":"The tool call was denied.","kind":"tool-denied"}`,
			deferred.ToolDenied{Message: "The tool call was denied."}},
		{"denied with message", &deferred.ToolDenied{Message: "not on a Friday"}, `{"message":"not on a Friday","kind":"tool-denied"}`,
			deferred.ToolDenied{Message: "not on a Friday"}},
	}
	for _, tt := range approvals {
		t.Run("approval "+tt.name, func(t *testing.T) {
			raw, err := deferred.MarshalApproval(tt.in)
			if err != nil || string(raw) != tt.json {
				t.Fatalf("MarshalApproval = %s, %v; want %s", raw, err, tt.json)
			}
			back, err := deferred.UnmarshalApproval(raw)
			if err != nil || !reflect.DeepEqual(back, tt.back) {
				t.Errorf("UnmarshalApproval(%s) = %#v, %v; want %#v", raw, back, err, tt.back)
			}
		})
	}

	calls := []struct {
		name string
		in   any
		json string
		back any
	}{
		{"string", "done", `"done"`, json.RawMessage(`"done"`)},
		{"integer", 42, `42`, json.RawMessage(`42`)},
		{"float", 2.5, `2.5`, json.RawMessage(`2.5`)},
		{"object", map[string]any{"foo": "bar", "n": 1}, `{"foo":"bar","n":1}`, json.RawMessage(`{"foo":"bar","n":1}`)},
		{"list", []int{1, 2}, `[1,2]`, json.RawMessage(`[1,2]`)},
		{"null", nil, `null`, json.RawMessage(`null`)},
		{"raw JSON", json.RawMessage(`{"a":[1,2]}`), `{"a":[1,2]}`, json.RawMessage(`{"a":[1,2]}`)},
		{"tool return", tool.Return{Value: 1, Content: []message.Content{message.TextContent("The tool call was approved.")}, Metadata: map[string]any{"foo": "bar"}},
			`{"return_value":1,"content":[{"type":"text","text":"The tool call was approved."}],"metadata":{"foo":"bar"},"kind":"tool-return"}`,
			tool.Return{Value: json.RawMessage(`1`), Content: []message.Content{message.TextContent("The tool call was approved.")}, Metadata: map[string]any{"foo": "bar"}}},
		{"tool return with a file", &tool.Return{Value: "ok", Content: []message.Content{message.FileContent("a.png", "image/png", []byte{1, 2})}},
			`{"return_value":"ok","content":[{"type":"file","name":"a.png","media_type":"image/png","data_base64":"AQI="}],"kind":"tool-return"}`,
			tool.Return{Value: json.RawMessage(`"ok"`), Content: []message.Content{message.FileContent("a.png", "image/png", []byte{1, 2})}}},
		{"tool return of raw JSON", tool.Return{Value: json.RawMessage(`{"x":1}`)}, `{"return_value":{"x":1},"kind":"tool-return"}`,
			tool.Return{Value: json.RawMessage(`{"x":1}`)}},
		{"tool return of nothing", tool.Return{}, `{"return_value":null,"kind":"tool-return"}`, tool.Return{Value: json.RawMessage(`null`)}},
		{"model retry", &tool.ModelRetry{Message: "The tool call was denied."}, `{"message":"The tool call was denied.","kind":"model-retry"}`,
			&tool.ModelRetry{Message: "The tool call was denied."}},
		{"tool failed", &tool.ToolFailed{Message: "out of stock"}, `{"message":"out of stock","kind":"tool-failed"}`,
			&tool.ToolFailed{Message: "out of stock"}},
		{"retry prompt", message.RetryPrompt{ToolName: "foo", ToolCallID: "foo", Content: "The tool call was denied."},
			`{"part_kind":"retry-prompt","tool_name":"foo","tool_call_id":"foo","content":"The tool call was denied."}`,
			message.RetryPrompt{ToolName: "foo", ToolCallID: "foo", Content: "The tool call was denied."}},
	}
	for _, tt := range calls {
		t.Run("call "+tt.name, func(t *testing.T) {
			raw, err := deferred.MarshalCallResult(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(raw) // compacts, as inside Results
			if err != nil || string(b) != tt.json {
				t.Fatalf("MarshalCallResult = %s, %v; want %s", b, err, tt.json)
			}
			back, err := deferred.UnmarshalCallResult(b)
			if err != nil || !reflect.DeepEqual(back, tt.back) {
				t.Errorf("UnmarshalCallResult(%s) = %#v, %v; want %#v", b, back, err, tt.back)
			}
		})
	}
}

// Scenario: test_deferred_tool_results_serializable
func TestResultsJSONRoundTrip(t *testing.T) {
	t.Parallel()
	res := deferred.Results{
		Calls: map[string]any{
			"tool-return":       tool.Return{Value: 1, Content: []message.Content{message.TextContent("The tool call was approved.")}, Metadata: map[string]any{"foo": "bar"}},
			"model-retry":       &tool.ModelRetry{Message: "The tool call was denied."},
			"tool-failed":       &tool.ToolFailed{Message: "The tool call failed."},
			"retry-prompt-part": message.RetryPrompt{Content: "The tool call was denied.", ToolName: "foo", ToolCallID: "foo"},
			"any":               map[string]any{"foo": "bar"},
		},
		Approvals: map[string]any{
			"true":          true,
			"false":         false,
			"tool-approved": deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"foo":"bar"}`)},
			"tool-denied":   deferred.ToolDenied{Message: "The tool call was denied."},
			"expired":       deferred.ToolDenied{Message: "Not in time.", Reason: deferred.ReasonExpired},
		},
		Metadata: map[string]map[string]any{"tool-approved": {"approver": "alice"}},
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"calls":{` +
		`"any":{"foo":"bar"},` +
		`"model-retry":{"message":"The tool call was denied.","kind":"model-retry"},` +
		`"retry-prompt-part":{"part_kind":"retry-prompt","tool_name":"foo","tool_call_id":"foo","content":"The tool call was denied."},` +
		`"tool-failed":{"message":"The tool call failed.","kind":"tool-failed"},` +
		`"tool-return":{"return_value":1,"content":[{"type":"text","text":"The tool call was approved."}],"metadata":{"foo":"bar"},"kind":"tool-return"}},` +
		`"approvals":{` +
		`"expired":{"message":"Not in time.","kind":"tool-denied","reason":"expired"},` +
		`"false":false,` +
		`"tool-approved":{"override_args":{"foo":"bar"},"kind":"tool-approved"},` +
		`"tool-denied":{"message":"The tool call was denied.","kind":"tool-denied"},` +
		`"true":true},` +
		`"metadata":{"tool-approved":{"approver":"alice"}}}`
	if string(b) != want {
		t.Errorf("Results JSON:\n got: %s\nwant: %s", b, want)
	}
	// A pointer marshals the same way.
	if pb, err := json.Marshal(&res); err != nil || string(pb) != want {
		t.Errorf("*Results JSON: %s, %v", pb, err)
	}

	var back deferred.Results
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	wantBack := deferred.Results{
		Calls: map[string]any{
			"tool-return":       tool.Return{Value: json.RawMessage(`1`), Content: []message.Content{message.TextContent("The tool call was approved.")}, Metadata: map[string]any{"foo": "bar"}},
			"model-retry":       &tool.ModelRetry{Message: "The tool call was denied."},
			"tool-failed":       &tool.ToolFailed{Message: "The tool call failed."},
			"retry-prompt-part": message.RetryPrompt{Content: "The tool call was denied.", ToolName: "foo", ToolCallID: "foo"},
			"any":               json.RawMessage(`{"foo":"bar"}`),
		},
		Approvals: res.Approvals,
		Metadata:  res.Metadata,
	}
	if !reflect.DeepEqual(back, wantBack) {
		t.Errorf("decoded:\n got: %#v\nwant: %#v", back, wantBack)
	}
	// Decoding is stable: re-encoding gives the same text.
	if b2, err := json.Marshal(back); err != nil || string(b2) != want {
		t.Errorf("re-encoded:\n got: %s\nwant: %s", b2, want)
	}

	// Empty results have empty maps, never null.
	b, err = json.Marshal(deferred.Results{})
	if err != nil || string(b) != `{"calls":{},"approvals":{},"metadata":{}}` {
		t.Errorf("empty results: %s, %v", b, err)
	}
	if err := json.Unmarshal([]byte(`{}`), &back); err != nil || back.Calls == nil || back.Approvals == nil || back.Metadata == nil || !back.Empty() {
		t.Errorf("decoding {}: %#v, %v", back, err)
	}
}

// Pydantic AI's own dump of the same results (content as a string, tools and
// timestamp fields, denial without message) decodes too.
func TestResultsJSONFromPydantic(t *testing.T) {
	t.Parallel()
	doc := `{
	  "calls": {
	    "tool-return": {"return_value": 1, "content": "The tool call was approved.", "metadata": {"foo": "bar"}, "tools": null, "kind": "tool-return"},
	    "mixed-content": {"return_value": null, "content": ["a", {"type": "text", "text": "b"}], "kind": "tool-return"},
	    "model-retry": {"message": "The tool call was denied.", "kind": "model-retry"},
	    "retry-prompt-part": {"content": "The tool call was denied.", "tool_name": "foo", "tool_call_id": "foo", "timestamp": "2025-01-01T00:00:00Z", "part_kind": "retry-prompt"},
	    "any": {"foo": "bar"}
	  },
	  "approvals": {
	    "true": true, "false": false,
	    "tool-approved": {"override_args": {"foo": "bar"}, "kind": "tool-approved"},
	    "bare-approved": {"kind": "tool-approved"},
	    "tool-denied": {"kind": "tool-denied"}
	  },
	  "metadata": {}
	}`
	var r deferred.Results
	if err := json.Unmarshal([]byte(doc), &r); err != nil {
		t.Fatal(err)
	}
	if got := r.Calls["tool-return"].(tool.Return); string(got.Value.(json.RawMessage)) != "1" ||
		!reflect.DeepEqual(got.Content, []message.Content{message.TextContent("The tool call was approved.")}) || got.Metadata["foo"] != "bar" {
		t.Errorf("tool-return = %#v", got)
	}
	if got := r.Calls["mixed-content"].(tool.Return); !reflect.DeepEqual(got.Content, []message.Content{message.TextContent("a"), message.TextContent("b")}) {
		t.Errorf("mixed-content = %#v", got)
	}
	if got := r.Calls["retry-prompt-part"]; got != (message.RetryPrompt{ToolName: "foo", ToolCallID: "foo", Content: "The tool call was denied."}) {
		t.Errorf("retry-prompt-part = %#v", got)
	}
	if got := r.Approvals["bare-approved"]; !reflect.DeepEqual(got, deferred.ToolApproved{}) {
		t.Errorf("bare-approved = %#v", got)
	}
	if got := r.Approvals["tool-denied"].(deferred.ToolDenied); got.Text() != deferred.DefaultDenial {
		t.Errorf("tool-denied = %#v", got)
	}
}

func TestInvalidApprovalJSON(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`"yes"`, `1`, `0`, `null`, `[true]`, `"true"`, `{}`,
		`{"kind":"other"}`,
		`{"kind":"tool-return","return_value":1}`,
		`{"kind":"tool-approved","override_args":"x"}`,
		`{"kind":"tool-approved","override_args":[1]}`,
		`{"kind":"tool-approved","override_args":1}`,
		`{"kind":"tool-denied","message":5}`,
		``,
	} {
		if v, err := deferred.UnmarshalApproval(json.RawMessage(raw)); !errors.Is(err, deferred.ErrInvalidApproval) {
			t.Errorf("UnmarshalApproval(%s) = %#v, %v; want ErrInvalidApproval", raw, v, err)
		}
		if raw == "" {
			continue
		}
		var r deferred.Results
		err := json.Unmarshal([]byte(`{"approvals":{"c1":`+raw+`}}`), &r)
		if !errors.Is(err, deferred.ErrInvalidApproval) || !strings.Contains(err.Error(), `approval "c1"`) {
			t.Errorf("Results with approval %s: %v", raw, err)
		}
	}
	// The error names the offending value, shortened.
	_, err := deferred.UnmarshalApproval(json.RawMessage(`"` + strings.Repeat("x", 200) + `"`))
	if err == nil || !strings.HasSuffix(err.Error(), "…") || len(err.Error()) > 140 {
		t.Errorf("long value: %v", err)
	}

	// Encoding refuses them too.
	for _, v := range []any{"yes", 1, nil, (*deferred.ToolDenied)(nil)} {
		if _, err := deferred.MarshalApproval(v); !errors.Is(err, deferred.ErrInvalidApproval) {
			t.Errorf("MarshalApproval(%#v) = %v", v, err)
		}
		if _, err := json.Marshal(deferred.Results{Approvals: map[string]any{"c1": v}}); !errors.Is(err, deferred.ErrInvalidApproval) {
			t.Errorf("Results with approval %#v: %v", v, err)
		}
	}
}

func TestInvalidCallJSON(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"calls":{"c1":{"kind":"tool-return","content":5}}}`,
		`{"calls":{"c1":{"kind":"tool-return","content":[{"type":"image","data_base64":"AA=="}]}}}`,
		`{"calls":{"c1":{"kind":"tool-return","metadata":[1]}}}`,
		`{"calls":{"c1":{"part_kind":"retry-prompt","content":["not","a","string"]}}}`,
		`{"calls":[]}`,
	} {
		var r deferred.Results
		if err := json.Unmarshal([]byte(doc), &r); err == nil {
			t.Errorf("%s: decoded %#v, want an error", doc, r)
		}
	}
	if _, err := deferred.UnmarshalCallResult(json.RawMessage(`{"a":`)); err == nil {
		t.Error("invalid JSON call result accepted")
	}
	if _, err := deferred.MarshalCallResult(json.RawMessage(`{"a":`)); err == nil {
		t.Error("invalid raw JSON call result encoded")
	}
	if _, err := deferred.MarshalCallResult(make(chan int)); err == nil {
		t.Error("channel call result encoded")
	}
	if _, err := json.Marshal(deferred.Results{Calls: map[string]any{"c1": tool.Return{Value: make(chan int)}}}); err == nil {
		t.Error("results with an unencodable return value encoded")
	}
}

func TestDecodeContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []message.Content
	}{
		{``, nil},
		{`null`, nil},
		{`"hi"`, []message.Content{message.TextContent("hi")}},
		{`[]`, []message.Content{}},
		{`["a", {"type":"file","name":"f","media_type":"text/plain","data_base64":"eA=="}]`,
			[]message.Content{message.TextContent("a"), message.FileContent("f", "text/plain", []byte("x"))}},
	}
	for _, tt := range tests {
		got, err := deferred.DecodeContent(json.RawMessage(tt.in))
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeContent(%s) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{`5`, `{"type":"text"}`, `[5]`, `[{"type":"audio"}]`, `[{}]`} {
		if got, err := deferred.DecodeContent(json.RawMessage(in)); err == nil {
			t.Errorf("DecodeContent(%s) = %#v, want an error", in, got)
		}
	}
}

func TestRequestsJSON(t *testing.T) {
	t.Parallel()
	r := requests()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"calls":[` +
		`{"tool_name":"buy","tool_call_id":"c1","args":"{\"item\":\"apple\"}"},` +
		`{"tool_name":"buy","tool_call_id":"c2","args":"{\"item\":\"pear\"}"}],` +
		`"approvals":[` +
		`{"tool_name":"delete_file","tool_call_id":"a1","args":"{\"path\":\"x\"}"},` +
		`{"tool_name":"delete_file","tool_call_id":"a2","args":"{\"path\":\"y\"}"}],` +
		`"metadata":{"a1":{"paths":["x"],"reason":"outside the sandbox"},"c2":{"queue":"shop"}},` +
		`"task_ids":{"a1":"01JQ0000000000000000000001","a2":"01JQ0000000000000000000002","c1":"01JQ0000000000000000000003","c2":"01JQ0000000000000000000004"}}`
	if string(b) != want {
		t.Errorf("Requests JSON:\n got: %s\nwant: %s", b, want)
	}
	var back deferred.Requests
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, r) {
		t.Errorf("round trip:\n got: %+v\nwant: %+v", &back, r)
	}
	// Unknown fields are ignored.
	if err := json.Unmarshal([]byte(`{"calls":[{"tool_name":"x","tool_call_id":"1","args":"","part_kind":"tool-call"}],"future":1}`), &back); err != nil || back.Kind("1") != deferred.KindExternal {
		t.Errorf("unknown fields: %+v, %v", back, err)
	}
}

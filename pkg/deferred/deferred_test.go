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

func call(name, id, args string) message.ToolCall {
	return message.ToolCall{ToolName: name, ToolCallID: id, Args: args}
}

// requests has two approvals (one with metadata) and two external calls.
func requests() *deferred.Requests {
	return &deferred.Requests{
		Approvals: []message.ToolCall{
			call("delete_file", "a1", `{"path":"x"}`),
			call("delete_file", "a2", `{"path":"y"}`),
		},
		Calls: []message.ToolCall{
			call("buy", "c1", `{"item":"apple"}`),
			call("buy", "c2", `{"item":"pear"}`),
		},
		Metadata: map[string]map[string]any{
			"a1": {"reason": "outside the sandbox", "paths": []any{"x"}},
			"c2": {"queue": "shop"},
		},
		TaskIDs: map[string]string{
			"a1": "01JQ0000000000000000000001",
			"a2": "01JQ0000000000000000000002",
			"c1": "01JQ0000000000000000000003",
			"c2": "01JQ0000000000000000000004",
		},
	}
}

// Scenario: test_deferred_tool_requests_build_results_validates_ids
func TestBuildResultsValidatesIDs(t *testing.T) {
	t.Parallel()
	r := &deferred.Requests{
		Approvals: []message.ToolCall{call("approve_me", "approval_id", "{}")},
		Calls:     []message.ToolCall{call("call_me", "call_id", "{}")},
	}

	// An unknown approval ID.
	_, err := r.BuildResults(map[string]any{"unknown_id": true}, nil, nil, false)
	want := "`approvals` contains tool call IDs not in this `DeferredToolRequests.approvals`: ['unknown_id']"
	if err == nil || err.Error() != want {
		t.Errorf("unknown approval id:\n got: %v\nwant: %s", err, want)
	}
	// A call ID given as an approval, and several unknown IDs (sorted).
	_, err = r.BuildResults(map[string]any{"zz": true, "call_id": true, "aa": false}, nil, nil, false)
	want = "`approvals` contains tool call IDs not in this `DeferredToolRequests.approvals`: ['aa', 'call_id', 'zz']"
	if err == nil || err.Error() != want {
		t.Errorf("call id under approvals:\n got: %v\nwant: %s", err, want)
	}
	// An approval ID given as a call result.
	_, err = r.BuildResults(nil, map[string]any{"approval_id": "done"}, nil, false)
	want = "`calls` contains tool call IDs not in this `DeferredToolRequests.calls`: ['approval_id']"
	if err == nil || err.Error() != want {
		t.Errorf("approval id under calls:\n got: %v\nwant: %s", err, want)
	}
	// Approvals are checked before calls.
	_, err = r.BuildResults(map[string]any{"x": true}, map[string]any{"y": 1}, nil, false)
	if err == nil || !strings.HasPrefix(err.Error(), "`approvals`") {
		t.Errorf("both wrong: %v", err)
	}

	// The happy path keeps the given values verbatim.
	approvals := map[string]any{"approval_id": deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"x":2}`)}}
	calls := map[string]any{"call_id": tool.Return{Value: 42, Metadata: map[string]any{"k": "v"}}}
	res, err := r.BuildResults(approvals, calls, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Approvals, approvals) || !reflect.DeepEqual(res.Calls, calls) {
		t.Errorf("results = %+v", res)
	}
	if res.Metadata == nil || len(res.Metadata) != 0 {
		t.Errorf("metadata = %#v, want an empty map", res.Metadata)
	}
	// The results own their maps.
	approvals["approval_id"] = false
	calls["call_id"] = "changed"
	if _, ok := res.Approvals["approval_id"].(deferred.ToolApproved); !ok {
		t.Error("results share the approvals map")
	}
	if _, ok := res.Calls["call_id"].(tool.Return); !ok {
		t.Error("results share the calls map")
	}

	// Nothing given: empty, non-nil maps.
	res, err = r.BuildResults(nil, nil, nil, false)
	if err != nil || res.Approvals == nil || res.Calls == nil || res.Metadata == nil || !res.Empty() {
		t.Errorf("empty BuildResults = %+v, %v", res, err)
	}
}

// Scenario: test_deferred_tool_requests_build_results_approve_all
func TestBuildResultsApproveAll(t *testing.T) {
	t.Parallel()
	r := &deferred.Requests{Approvals: []message.ToolCall{
		call("t", "a", "{}"), call("t", "b", "{}"), call("t", "c", "{}"),
	}, Calls: []message.ToolCall{call("x", "ext", "{}")}}
	res, err := r.BuildResults(map[string]any{"b": false}, nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": deferred.ToolApproved{}, "b": false, "c": deferred.ToolApproved{}}
	if !reflect.DeepEqual(res.Approvals, want) {
		t.Errorf("approvals = %#v, want %#v", res.Approvals, want)
	}
	if len(res.Calls) != 0 {
		t.Errorf("approveAll touched calls: %v", res.Calls)
	}
	// Explicit denials of any form win.
	res, err = r.BuildResults(map[string]any{"a": deferred.ToolDenied{Message: "no"}, "c": &deferred.ToolApproved{}}, nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Approvals["a"] != (deferred.ToolDenied{Message: "no"}) || res.Approvals["b"] == nil {
		t.Errorf("approvals = %#v", res.Approvals)
	}
	if _, ok := res.Approvals["c"].(*deferred.ToolApproved); !ok {
		t.Errorf("explicit value not kept verbatim: %#v", res.Approvals["c"])
	}
}

func TestBuildResultsRefusesInvalidApprovals(t *testing.T) {
	t.Parallel()
	r := requests()
	for _, v := range []any{nil, "yes", 1, map[string]any{"kind": "tool-approved"}, (*deferred.ToolApproved)(nil), tool.Return{}} {
		_, err := r.BuildResults(map[string]any{"a1": v}, nil, nil, false)
		if !errors.Is(err, deferred.ErrInvalidApproval) || !strings.Contains(err.Error(), `approval for "a1"`) {
			t.Errorf("approval %#v: %v", v, err)
		}
	}
}

func TestBuildResultsCopiesMetadata(t *testing.T) {
	t.Parallel()
	r := requests()
	md := map[string]map[string]any{
		"a1":         {"approver": "alice", "scopes": []any{"rm"}, "limits": map[string]any{"max": 1.0}},
		"not_listed": {"x": 1.0}, // metadata keys are not validated
	}
	res, err := r.BuildResults(map[string]any{"a1": true}, nil, md, false)
	if err != nil {
		t.Fatal(err)
	}
	md["a1"]["approver"] = "mallory"
	md["a1"]["scopes"].([]any)[0] = "everything"
	md["a1"]["limits"].(map[string]any)["max"] = 1e9
	md["a2"] = map[string]any{"sneaked": true}
	want := map[string]map[string]any{
		"a1":         {"approver": "alice", "scopes": []any{"rm"}, "limits": map[string]any{"max": 1.0}},
		"not_listed": {"x": 1.0},
	}
	if !reflect.DeepEqual(res.Metadata, want) {
		t.Errorf("metadata changed through the input:\n got: %v\nwant: %v", res.Metadata, want)
	}
}

func TestRemaining(t *testing.T) {
	t.Parallel()
	r := requests()

	// Nothing answered: everything remains, as a copy.
	rem := r.Remaining(&deferred.Results{})
	if !reflect.DeepEqual(rem, r) {
		t.Errorf("nothing answered:\n got: %+v\nwant: %+v", rem, r)
	}
	rem.Metadata["a1"]["reason"] = "changed"
	rem.Metadata["a1"]["paths"].([]any)[0] = "changed"
	rem.TaskIDs["a1"] = "changed"
	if !reflect.DeepEqual(r, requests()) {
		t.Error("Remaining shares state with the requests")
	}

	// Each category is filtered by its own results only: an approval ID given
	// under Calls (and a call ID given under Approvals) stays pending. This is
	// where we fail closed and Pydantic AI does not.
	rem = r.Remaining(&deferred.Results{
		Approvals: map[string]any{"a2": true, "c1": true},
		Calls:     map[string]any{"c2": "done", "a1": "done"},
	})
	want := &deferred.Requests{
		Approvals: []message.ToolCall{call("delete_file", "a1", `{"path":"x"}`)},
		Calls:     []message.ToolCall{call("buy", "c1", `{"item":"apple"}`)},
		Metadata:  map[string]map[string]any{"a1": {"reason": "outside the sandbox", "paths": []any{"x"}}},
		TaskIDs:   map[string]string{"a1": "01JQ0000000000000000000001", "c1": "01JQ0000000000000000000003"},
	}
	if !reflect.DeepEqual(rem, want) {
		t.Errorf("per-category filter:\n got: %+v\nwant: %+v", rem, want)
	}
	if rem.Kind("a1") != deferred.KindApproval || rem.Kind("c1") != deferred.KindExternal || rem.Kind("a2") != "" || rem.Len() != 2 {
		t.Errorf("remaining kinds: %+v", rem)
	}

	// Order is preserved.
	rem = r.Remaining(&deferred.Results{Approvals: map[string]any{"a1": false}})
	if len(rem.Approvals) != 1 || rem.Approvals[0].ToolCallID != "a2" ||
		len(rem.Calls) != 2 || rem.Calls[0].ToolCallID != "c1" || rem.Calls[1].ToolCallID != "c2" {
		t.Errorf("order: %+v", rem)
	}
	if _, ok := rem.Metadata["a1"]; ok {
		t.Error("metadata of a resolved call kept")
	}

	// Everything answered: nil.
	all := &deferred.Results{
		Approvals: map[string]any{"a1": true, "a2": deferred.ToolDenied{}},
		Calls:     map[string]any{"c1": 1, "c2": nil},
	}
	if rem := r.Remaining(all); rem != nil {
		t.Errorf("everything answered: %+v, want nil", rem)
	}
	// Nil results answer nothing; nil requests have nothing remaining.
	if rem := r.Remaining(nil); !reflect.DeepEqual(rem, r) {
		t.Errorf("nil results: %+v", rem)
	}
	var none *deferred.Requests
	if rem := none.Remaining(all); rem != nil {
		t.Errorf("nil requests: %+v", rem)
	}
	if rem := (&deferred.Requests{}).Remaining(all); rem != nil {
		t.Errorf("empty requests: %+v", rem)
	}
}

func TestNormalizeApproval(t *testing.T) {
	t.Parallel()
	override := json.RawMessage(`{"x":1}`)
	tests := []struct {
		in   any
		want any
	}{
		{true, deferred.ToolApproved{}},
		{false, deferred.ToolDenied{}},
		{deferred.ToolApproved{}, deferred.ToolApproved{}},
		{deferred.ToolApproved{OverrideArgs: override}, deferred.ToolApproved{OverrideArgs: override}},
		{&deferred.ToolApproved{OverrideArgs: override}, deferred.ToolApproved{OverrideArgs: override}},
		{deferred.ToolDenied{Message: "no"}, deferred.ToolDenied{Message: "no"}},
		{&deferred.ToolDenied{}, deferred.ToolDenied{}},
	}
	for _, tt := range tests {
		got, err := deferred.NormalizeApproval(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("NormalizeApproval(%#v) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []any{nil, "yes", "true", 1, 0, (*deferred.ToolApproved)(nil), (*deferred.ToolDenied)(nil),
		map[string]any{"kind": "tool-approved"}, json.RawMessage("true"), &tool.ModelRetry{Message: "x"}} {
		got, err := deferred.NormalizeApproval(in)
		if !errors.Is(err, deferred.ErrInvalidApproval) || got != nil {
			t.Errorf("NormalizeApproval(%#v) = %#v, %v; want ErrInvalidApproval", in, got, err)
		}
	}
	_, err := deferred.NormalizeApproval("yes")
	if want := "deferred: invalid approval value: string (yes); use true, false, deferred.ToolApproved or deferred.ToolDenied"; err.Error() != want {
		t.Errorf("message:\n got: %s\nwant: %s", err, want)
	}
}

func TestToolDeniedText(t *testing.T) {
	t.Parallel()
	if deferred.DefaultDenial != "The tool call was denied." {
		t.Errorf("DefaultDenial = %q", deferred.DefaultDenial)
	}
	if got := (deferred.ToolDenied{}).Text(); got != deferred.DefaultDenial {
		t.Errorf("default denial %q", got)
	}
	if got := (deferred.ToolDenied{Message: "not today"}).Text(); got != "not today" {
		t.Errorf("denial %q", got)
	}
}

func TestRequestsHelpers(t *testing.T) {
	t.Parallel()
	r := requests()
	if r.Len() != 4 {
		t.Errorf("Len = %d", r.Len())
	}
	var none *deferred.Requests
	if none.Len() != 0 || none.Kind("a1") != "" || none.Clone() != nil {
		t.Error("nil Requests")
	}
	for id, want := range map[string]deferred.Kind{"a1": deferred.KindApproval, "a2": deferred.KindApproval, "c1": deferred.KindExternal, "zz": ""} {
		if got := r.Kind(id); got != want {
			t.Errorf("Kind(%q) = %q, want %q", id, got, want)
		}
	}

	c := r.Clone()
	if !reflect.DeepEqual(c, r) {
		t.Fatalf("Clone differs:\n got: %+v\nwant: %+v", c, r)
	}
	c.Approvals[0].Args = "changed"
	c.Calls = append(c.Calls[:1], call("x", "y", ""))
	c.Metadata["a1"]["reason"] = "changed"
	c.Metadata["a1"]["paths"].([]any)[0] = "changed"
	c.Metadata["new"] = map[string]any{}
	c.TaskIDs["a1"] = "changed"
	if !reflect.DeepEqual(r, requests()) {
		t.Errorf("Clone is not deep: original now %+v", r)
	}
	// Nil maps stay nil.
	empty := &deferred.Requests{Calls: []message.ToolCall{call("x", "1", "")}}
	if c := empty.Clone(); !reflect.DeepEqual(c, empty) {
		t.Errorf("Clone of sparse requests = %+v", c)
	}
}

func TestResultsUpdateAndEmpty(t *testing.T) {
	t.Parallel()
	var none *deferred.Results
	if !none.Empty() || !(&deferred.Results{}).Empty() {
		t.Error("nil/zero results not empty")
	}
	if !(&deferred.Results{Metadata: map[string]map[string]any{"a": {}}}).Empty() {
		t.Error("metadata alone is not a result")
	}
	if (&deferred.Results{Calls: map[string]any{"c": nil}}).Empty() || (&deferred.Results{Approvals: map[string]any{"a": false}}).Empty() {
		t.Error("results with entries are empty")
	}

	r := &deferred.Results{}
	r.Update(nil)
	if !r.Empty() {
		t.Error("Update(nil) added entries")
	}
	other := &deferred.Results{
		Calls:     map[string]any{"c1": "one"},
		Approvals: map[string]any{"a1": true},
		Metadata:  map[string]map[string]any{"a1": {"by": "alice", "nested": map[string]any{"n": 1.0}}},
	}
	r.Update(other)
	r.Update(&deferred.Results{
		Calls:     map[string]any{"c2": "two"},
		Approvals: map[string]any{"a1": false},
	})
	want := &deferred.Results{
		Calls:     map[string]any{"c1": "one", "c2": "two"},
		Approvals: map[string]any{"a1": false},
		Metadata:  map[string]map[string]any{"a1": {"by": "alice", "nested": map[string]any{"n": 1.0}}},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("Update:\n got: %+v\nwant: %+v", r, want)
	}
	other.Metadata["a1"]["nested"].(map[string]any)["n"] = 2.0
	if r.Metadata["a1"]["nested"].(map[string]any)["n"] != 1.0 {
		t.Error("Update shares metadata with its argument")
	}
}

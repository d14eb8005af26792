package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// eventLog records a run's events as compact lines: the type, and for tool
// and deferred events what identifies them and what they say.
type eventLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *eventLog) on(e agent.Event) {
	s := string(e.Type)
	switch e.Type {
	case agent.EventToolCall:
		valid := "null"
		if e.ArgsValid != nil {
			valid = mustJSONAny(*e.ArgsValid)
		}
		s += ":" + e.ToolCallID + ":valid=" + valid
	case agent.EventToolResult:
		s += ":" + e.ToolCallID + ":" + e.Outcome + ":" + string(e.Content)
	case agent.EventDeferredToolRequests:
		s += ":approvals=" + idsOf(e.Requests.Approvals) + ":calls=" + idsOf(e.Requests.Calls)
	case agent.EventDeferredToolResults:
		s += ":approvals=" + sortedKeys(e.Results.Approvals) + ":calls=" + sortedKeys(e.Results.Calls)
	case agent.EventFinal:
		s += ":" + string(e.Final.Status)
	case agent.EventTextDelta, agent.EventRunStarted:
		return // not what these tests are about
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *eventLog) opts(o *agent.RunOptions) *agent.RunOptions {
	if o == nil {
		o = &agent.RunOptions{}
	}
	o.OnEvent = l.on
	return o
}

func idsOf(cs []message.ToolCall) string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ToolCallID)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

func sortedKeys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return "[" + strings.Join(ks, ",") + "]"
}

func mustJSONAny(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func wantEvents(t *testing.T, l *eventLog, want ...string) {
	t.Helper()
	if got := l.String(); got != strings.Join(want, "\n") {
		t.Errorf("events\n got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func wantRequests(t *testing.T, m *fnModel, n int) {
	t.Helper()
	if got := len(m.Requests()); got != n {
		t.Errorf("model requests = %d, want %d", got, n)
	}
}

// approvalTool is upstream's my_tool: it asks for approval until approved,
// then returns x*42; its validator accepts x <= 100.
func approvalTool(runs *atomic.Int32, opts ...tool.Option) *tool.Tool {
	opts = append([]tool.Option{tool.Validate(func(_ context.Context, _ *tool.RunContext, a xArgs) error {
		if a.X > 100 {
			return tool.Retry("x too large")
		}
		return nil
	})}, opts...)
	return tool.Func("my_tool", "", func(_ context.Context, rc *tool.RunContext, a xArgs) (int, error) {
		if !rc.ToolCallApproved {
			return 0, &tool.ApprovalRequired{}
		}
		runs.Add(1)
		return a.X * 42, nil
	}, opts...)
}

// Scenario: test_args_valid_true_for_presupplied_tool_approved
func TestArgsValidTrueForPresuppliedToolApproved(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m := turns(calls(call("my_tool", "c1", `{"x":1}`)), text("Done!"))
	a := allowDeferred(t, m, approvalTool(&runs))
	res, err := a.Run(t.Context(), "Hello", nil)
	if err != nil || len(res.Deferred.Approvals) != 1 || runs.Load() != 0 {
		t.Fatalf("first run: %v %+v", err, res.Deferred)
	}
	var l eventLog
	res2, err := a.Run(t.Context(), "", l.opts(&agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
		Approvals: map[string]any{"c1": deferred.ToolApproved{}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	// The approved call is validated again, so its args are known valid.
	wantEvents(t, &l,
		"tool_call:c1:valid=true",
		"tool_result:c1:success:42",
		"model_request_started",
		"final:finished")
	if res2.Output != "Done!" || runs.Load() != 1 {
		t.Errorf("output %q, tool ran %d times", res2.Output, runs.Load())
	}
	wantRequests(t, m, 2)
}

// Scenario: test_args_valid_none_for_tool_denied
func TestArgsValidNoneForToolDenied(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m := turns(calls(call("my_tool", "c1", `{"x":1}`)), text("Done!"))
	a := allowDeferred(t, m, approvalTool(&runs))
	res, err := a.Run(t.Context(), "Hello", nil)
	if err != nil || len(res.Deferred.Approvals) != 1 {
		t.Fatalf("first run: %v %+v", err, res.Deferred)
	}
	var l eventLog
	res2, err := a.Run(t.Context(), "", l.opts(&agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
		Approvals: map[string]any{"c1": deferred.ToolDenied{Message: "User denied this tool call"}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	// A denial is not validated: args_valid is null.
	wantEvents(t, &l,
		"tool_call:c1:valid=null",
		`tool_result:c1:denied:"User denied this tool call"`,
		"model_request_started",
		"final:finished")
	p := res2.NewMessages()[0].Parts
	if len(p) != 1 || p[0].(message.ToolReturn).Outcome != message.OutcomeDenied || returnContent(t, p[0]) != "User denied this tool call" {
		t.Errorf("denied part = %+v", p)
	}
	if res2.Output != "Done!" || runs.Load() != 0 {
		t.Errorf("output %q, tool ran %d times", res2.Output, runs.Load())
	}
	wantRequests(t, m, 2)
}

// Scenario: test_deferred_tool_validation_event_in_stream
// A call of a tool that asks for approval is validated before it is
// deferred: invalid arguments give args_valid false and a retry, valid ones
// args_valid true and then the deferral.
func TestDeferredToolValidationEventInStream(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m := turns(calls(call("my_tool", "big", `{"x":101}`)), calls(call("my_tool", "ok", `{"x":0}`)))
	a := allowDeferred(t, m, approvalTool(&runs))
	var l eventLog
	res, err := a.Run(t.Context(), "test", l.opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, &l,
		"model_request_started",
		"tool_call:big:valid=false",
		`tool_result:big:retry:"x too large"`,
		"model_request_started",
		"tool_call:ok:valid=true",
		"deferred_tool_requests:approvals=[ok]:calls=[]",
		"final:paused")
	if len(res.Deferred.Approvals) != 1 || res.Deferred.Approvals[0].ToolCallID != "ok" || runs.Load() != 0 {
		t.Errorf("deferred %+v, tool ran %d times", res.Deferred, runs.Load())
	}
	rp, ok := lastRequestParts(t, m, 1)[0].(message.RetryPrompt)
	if !ok || rp.Content != "x too large" || rp.ToolCallID != "big" {
		t.Errorf("retry prompt = %+v", rp)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_deferred_tool_iter
// Iterating a run whose model calls an external tool and a tool needing
// approval: each call is validated (external first), then the deferral is
// announced; no tool result, and the run ends paused with both.
func TestDeferredToolIter(t *testing.T) {
	t.Parallel()
	ext, err := tool.External(tool.Def{Name: "ext", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	m := turns(calls(call("gated", "g", `{"x":0}`), call("ext", "e", `{"x":0}`)))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Toolsets: []tool.Toolset{ext}}, times42("gated", tool.NeedsApproval()))
	events, result := a.Iter(t.Context(), "test", nil)
	var l eventLog
	for e := range events {
		l.on(e)
	}
	res, err := result()
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, &l,
		"model_request_started",
		"tool_call:e:valid=true",
		"tool_call:g:valid=true",
		"deferred_tool_requests:approvals=[g]:calls=[e]",
		"final:paused")
	if idsOf(res.Deferred.Calls) != "[e]" || idsOf(res.Deferred.Approvals) != "[g]" {
		t.Errorf("deferred %+v", res.Deferred)
	}
	if last := res.Messages[len(res.Messages)-1]; last.Role != message.RoleResponse {
		t.Errorf("history ends with a %s, want the response (nothing executed)", last.Role)
	}
	wantRequests(t, m, 1)
}

// Scenario: test_args_validator_approval_resolved_inline_by_capability
// The args validator asks for approval; a DeferredToolCalls handler approves
// inline: the validator runs again knowing the call is approved, the tool
// runs once, and the run goes on without pausing.
func TestArgsValidatorApprovalResolvedInlineByCapability(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	var runs atomic.Int32
	sensitive := tool.Func("sensitive", "", func(_ context.Context, rc *tool.RunContext, a xArgs) (int, error) {
		runs.Add(1)
		if !rc.ToolCallApproved {
			t.Error("the tool ran without approval")
		}
		return a.X * 2, nil
	}, tool.Retries(0), tool.Validate(func(_ context.Context, rc *tool.RunContext, a xArgs) error {
		mu.Lock()
		seen = append(seen, mustJSONAny([]any{rc.Retry, rc.ToolCallApproved}))
		mu.Unlock()
		if !rc.ToolCallApproved {
			return &tool.ApprovalRequired{Metadata: map[string]any{"reason": "sensitive"}}
		}
		return nil
	}))
	var handlerSaw string
	h := handler(func(r *deferred.Requests) *deferred.Results {
		handlerSaw = mustJSONAny(r.Metadata)
		res, err := r.BuildResults(nil, nil, nil, true)
		if err != nil {
			panic(err)
		}
		return res
	})
	m := turns(calls(call("sensitive", "s", `{"x":21}`)), text("done"))
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}}, sensitive)
	var l eventLog
	res, err := a.Run(t.Context(), "go", l.opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, &l,
		"model_request_started",
		"tool_call:s:valid=true",
		"deferred_tool_requests:approvals=[s]:calls=[]",
		"deferred_tool_results:approvals=[s]:calls=[]",
		"tool_result:s:success:42",
		"model_request_started",
		"final:finished")
	if handlerSaw != `{"s":{"reason":"sensitive"}}` {
		t.Errorf("the handler saw metadata %s", handlerSaw)
	}
	if res.Output != "done" || res.Paused() || runs.Load() != 1 {
		t.Errorf("output %q paused %v, tool ran %d times", res.Output, res.Paused(), runs.Load())
	}
	if got := strings.Join(seen, ";"); got != "[0,false];[0,true]" {
		t.Errorf("validator calls (retry, approved) = %s", got)
	}
	wantRequests(t, m, 2)
}

// Results supplied on resume are not validated (args_valid null) and each
// becomes a result event with its own outcome.
func TestResumeEventsOfSuppliedResults(t *testing.T) {
	t.Parallel()
	ext, err := tool.External(tool.Def{Name: "ext"})
	if err != nil {
		t.Fatal(err)
	}
	m := turns(calls(call("ext", "v", `{}`), call("ext", "f", `{}`), call("ext", "r", `{}`)), text("ok"))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Toolsets: []tool.Toolset{ext}})
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || len(res.Deferred.Calls) != 3 {
		t.Fatalf("first run: %v %+v", err, res)
	}
	var l eventLog
	res2, err := a.Run(t.Context(), "", l.opts(&agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Calls: map[string]any{
		"v": map[string]any{"n": 1}, "f": tool.Fail("no disk"), "r": tool.Retry("ask again"),
	}}}))
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, &l,
		"tool_call:v:valid=null",
		`tool_result:v:success:{"n":1}`,
		"tool_call:f:valid=null",
		`tool_result:f:failed:"no disk"`, // the model is sent {"error":"no disk"}
		"tool_call:r:valid=null",
		`tool_result:r:retry:"ask again"`,
		"model_request_started",
		"final:finished")
	var got []string
	for _, p := range res2.NewMessages()[0].Parts {
		switch x := p.(type) {
		case message.ToolReturn:
			got = append(got, x.ToolCallID+":"+string(x.Outcome))
		case message.RetryPrompt:
			got = append(got, x.ToolCallID+":retry")
		}
	}
	if strings.Join(got, ",") != "v:success,f:failed,r:retry" {
		t.Errorf("resume request = %v", got)
	}
	wantRequests(t, m, 2)
}

// A call paused for approval whose tool is external by the time of the
// resume (the tool set changed between processes) is refused, not run.
func TestApprovedCallOfToolNowExternalIsRefused(t *testing.T) {
	t.Parallel()
	m := turns(calls(call("act", "a", `{"x":1}`)))
	first := allowDeferred(t, m, times42("act", tool.NeedsApproval()))
	res, err := first.Run(t.Context(), "go", nil)
	if err != nil || len(res.Deferred.Approvals) != 1 {
		t.Fatalf("first run: %v %+v", err, res)
	}
	ext, err := tool.External(tool.Def{Name: "act"})
	if err != nil {
		t.Fatal(err)
	}
	m2 := turns()
	second := newAgentCfg(t, agent.Config{Model: m2, AllowDeferred: true, Toolsets: []tool.Toolset{ext}})
	_, err = second.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"a": true}}})
	var ue *agent.UserError
	if !errors.As(err, &ue) || !errors.Is(err, tool.ErrExternal) || err.Error() != "External tools cannot be called" {
		t.Fatalf("err = %v", err)
	}
	wantRequests(t, m2, 0)
}

// The metadata given with an approval reaches the tool as a copy: changing
// the caller's map while the tool runs does not change what the tool sees,
// and the tool changing its map does not reach the caller's.
func TestApprovalMetadataIsACopy(t *testing.T) {
	t.Parallel()
	entered, proceed := make(chan struct{}), make(chan struct{})
	var saw string
	gated := tool.Func("gated", "", func(ctx context.Context, rc *tool.RunContext, _ xArgs) (int, error) {
		close(entered)
		select {
		case <-proceed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		saw = mustJSONAny(rc.ToolCallMetadata)
		rc.ToolCallMetadata["user"] = "tool"
		rc.ToolCallMetadata["nested"].(map[string]any)["k"] = "tool"
		return 1, nil
	}, tool.NeedsApproval())
	m := turns(calls(call("gated", "a", `{"x":1}`)), text("ok"))
	a := allowDeferred(t, m, gated)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]map[string]any{"a": {"user": "alice", "nested": map[string]any{"k": "v"}}}
	done := make(chan error, 1)
	go func() {
		_, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
			Approvals: map[string]any{"a": true}, Metadata: md,
		}})
		done <- err
	}()
	offloadtest.WaitOrTimeout(t, entered, "the approved tool to start")
	md["a"]["user"] = "mallory"
	md["a"]["nested"].(map[string]any)["k"] = "mallory"
	close(proceed)
	if err := offloadtest.WaitOrTimeout(t, done, "the resumed run"); err != nil {
		t.Fatal(err)
	}
	if saw != `{"nested":{"k":"v"},"user":"alice"}` {
		t.Errorf("the tool saw %s, want the metadata as given", saw)
	}
	if got := mustJSONAny(md); got != `{"a":{"nested":{"k":"mallory"},"user":"mallory"}}` {
		t.Errorf("the tool's changes reached the caller: %s", got)
	}
}

// The metadata of a tool.Return is copied into the history: the tool
// changing its map afterwards does not rewrite the history.
func TestReturnMetadataIsCopied(t *testing.T) {
	t.Parallel()
	shared := map[string]any{"source": "cache", "nested": map[string]any{"hits": 1}}
	lookup := tool.Func("lookup", "", func(context.Context, *tool.RunContext, struct{}) (tool.Return, error) {
		return tool.Return{Value: "v", Metadata: shared}, nil
	})
	m := turns(calls(call("lookup", "l", `{}`)), text("ok"))
	res, err := newAgent(t, m, lookup).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	shared["source"] = "changed"
	shared["nested"].(map[string]any)["hits"] = 2
	tr := res.Messages[2].Parts[0].(message.ToolReturn)
	if got := mustJSONAny(tr.Metadata); got != `{"nested":{"hits":1},"source":"cache"}` {
		t.Errorf("history metadata = %s, want it as returned", got)
	}
	wantRequests(t, m, 2)
}

// The JSON form of the two deferred events (SPEC §6.3) decodes back into
// the requests and results they carried (upstream: test_messages.py, the
// deferred events through the event type adapter).
func TestDeferredEventsJSONRoundTrip(t *testing.T) {
	t.Parallel()
	ext, err := tool.External(tool.Def{Name: "ext"})
	if err != nil {
		t.Fatal(err)
	}
	cond := tool.Func("cond", "", func(_ context.Context, rc *tool.RunContext, _ xArgs) (int, error) {
		if !rc.ToolCallApproved {
			return 0, &tool.ApprovalRequired{Metadata: map[string]any{"why": "cond", "n": 2}}
		}
		return 1, nil
	})
	answers := &deferred.Results{
		Approvals: map[string]any{
			"g1": true,
			"g2": deferred.ToolDenied{Message: "no"},
			"c":  deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"x":3}`)},
		},
		Calls: map[string]any{
			"e1": json.RawMessage(`{"v":[1,2]}`),
			"e2": tool.Fail("down"),
			"e3": tool.Retry("again"),
			"e4": tool.Return{Value: json.RawMessage(`"r"`), Content: []message.Content{message.TextContent("extra")}, Metadata: map[string]any{"m": "d"}},
		},
	}
	h := handler(func(*deferred.Requests) *deferred.Results { return answers })
	m := turns(calls(
		call("gated", "g1", `{"x":1}`), call("gated", "g2", `{"x":2}`), call("cond", "c", `{"x":0}`),
		call("ext", "e1", `{}`), call("ext", "e2", `{"a":1}`), call("ext", "e3", `{}`), call("ext", "e4", `{}`),
	), text("ok"))
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}, Toolsets: []tool.Toolset{ext}}, times42("gated", tool.NeedsApproval()), cond)
	var reqEvent, resEvent *agent.Event
	if _, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		switch e.Type {
		case agent.EventDeferredToolRequests:
			reqEvent = &e
		case agent.EventDeferredToolResults:
			resEvent = &e
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if reqEvent == nil || resEvent == nil {
		t.Fatal("deferred events not emitted")
	}

	raw, err := json.Marshal(reqEvent)
	if err != nil {
		t.Fatal(err)
	}
	var head struct {
		Type string `json:"type"`
	}
	var reqs deferred.Requests
	if err := errors.Join(json.Unmarshal(raw, &head), json.Unmarshal(raw, &reqs)); err != nil {
		t.Fatal(err)
	}
	if head.Type != "deferred_tool_requests" || !reflect.DeepEqual(&reqs, normalized(t, reqEvent.Requests)) {
		t.Errorf("requests event %s\ndecodes to %+v\nwant %+v", raw, reqs, reqEvent.Requests)
	}
	if idsOf(reqs.Approvals) != "[c,g1,g2]" || idsOf(reqs.Calls) != "[e1,e2,e3,e4]" || mustJSONAny(reqs.Metadata) != `{"c":{"n":2,"why":"cond"}}` || len(reqs.TaskIDs) != 7 {
		t.Errorf("requests event %s", raw)
	}

	raw, err = json.Marshal(resEvent)
	if err != nil {
		t.Fatal(err)
	}
	var res deferred.Results
	if err := errors.Join(json.Unmarshal(raw, &head), json.Unmarshal(raw, &res)); err != nil {
		t.Fatal(err)
	}
	want := &deferred.Results{
		Approvals: map[string]any{"g1": true, "g2": deferred.ToolDenied{Message: "no"}, "c": deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"x":3}`)}},
		Calls: map[string]any{
			"e1": json.RawMessage(`{"v":[1,2]}`),
			"e2": &tool.ToolFailed{Message: "down"},
			"e3": &tool.ModelRetry{Message: "again"},
			"e4": tool.Return{Value: json.RawMessage(`"r"`), Content: []message.Content{message.TextContent("extra")}, Metadata: map[string]any{"m": "d"}},
		},
		Metadata: map[string]map[string]any{},
	}
	if head.Type != "deferred_tool_results" || !reflect.DeepEqual(&res, want) {
		t.Errorf("results event %s\ndecodes to %#v\nwant %#v", raw, res, want)
	}
}

// normalized passes requests through JSON, as a consumer of the event
// would hold them.
func normalized(t *testing.T, r *deferred.Requests) *deferred.Requests {
	t.Helper()
	var out deferred.Requests
	if err := json.Unmarshal([]byte(mustJSON(t, r)), &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

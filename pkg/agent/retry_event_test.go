package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// retryingModel streams a void delta, starts a new attempt, then answers
// with a thinking part and text.
type retryingModel struct{}

func (retryingModel) Name() string { return "retrying" }

func (m retryingModel) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	return m.Stream(ctx, req, func(llm.Delta) {})
}

func (retryingModel) Stream(_ context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	onDelta(llm.Delta{Text: "void "})
	req.OnRetry(llm.Retry{Attempt: 2, Reason: "stream cut"})
	onDelta(llm.Delta{Thinking: "hmm"})
	onDelta(llm.Delta{Text: "answer"})
	return &llm.Response{Parts: []message.Part{message.Thinking{Content: "hmm", Source: "reasoning_content"}, message.Text{Content: "answer"}}}, nil
}

func TestModelRequestRetryEvent(t *testing.T) {
	t.Parallel()
	a := newAgentCfg(t, agent.Config{Model: retryingModel{}, Stream: true})
	seq, result := a.Iter(t.Context(), "go", nil)
	var types []string
	var retry agent.Event
	for e := range seq {
		types = append(types, string(e.Type))
		if e.Type == agent.EventModelRequestRetry {
			retry = e
		}
	}
	want := "run_started,model_request_started,text_delta,model_request_retry,text_delta,final"
	if got := strings.Join(types, ","); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	b, err := json.Marshal(retry)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	if doc["type"] != "model_request_retry" || doc["attempt"] != 2.0 || doc["reason"] != "stream cut" {
		t.Errorf("retry event JSON = %s", b)
	}
	res, err := result()
	if err != nil {
		t.Fatal(err)
	}
	// The thinking part is kept in the history, never shown as output.
	if res.Output != "answer" {
		t.Errorf("output = %q", res.Output)
	}
	last := res.Messages[len(res.Messages)-1]
	if th, ok := last.Parts[0].(message.Thinking); !ok || th.Content != "hmm" {
		t.Errorf("last message parts = %+v", last.Parts)
	}
}

// TestThinkingKeptAcrossPauseAndResume: a response's thinking part and a
// call's provider fields survive a pause, the JSON form of the history,
// and a resume in another agent, and reach the model's next request.
func TestThinkingKeptAcrossPauseAndResume(t *testing.T) {
	t.Parallel()
	ext, _ := tool.External(tool.Def{Name: "ext"})
	first := &llm.Response{Parts: []message.Part{
		message.Thinking{Content: "ask the outside", Source: "reasoning_content"},
		message.ToolCall{ToolName: "ext", ToolCallID: "e1", Args: `{}`, ProviderExtra: `{"google":{"thought_signature":"c2ln"}}`},
	}}
	a := newAgentCfg(t, agent.Config{Model: turns(first), Toolsets: []tool.Toolset{ext}, AllowDeferred: true})
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || res.Deferred == nil || len(res.Deferred.Calls) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	raw, err := json.Marshal(res.Messages)
	if err != nil {
		t.Fatal(err)
	}
	var history message.History
	if err := json.Unmarshal(raw, &history); err != nil {
		t.Fatal(err)
	}
	m := turns(text("done"))
	b := newAgentCfg(t, agent.Config{Model: m, Toolsets: []tool.Toolset{ext}, AllowDeferred: true})
	res2, err := b.Run(t.Context(), "", &agent.RunOptions{History: history, DeferredResults: &deferred.Results{Calls: map[string]any{"e1": "ok"}}})
	if err != nil || res2.Output != "done" {
		t.Fatalf("resume: %v %+v", err, res2)
	}
	wantRequests(t, m, 1)
	var found bool
	for _, msg := range m.Requests()[0].Messages {
		if msg.Role != message.RoleResponse {
			continue
		}
		th, ok1 := msg.Parts[0].(message.Thinking)
		tc, ok2 := msg.Parts[1].(message.ToolCall)
		found = ok1 && ok2 && th.Content == "ask the outside" && th.Source == "reasoning_content" && tc.ProviderExtra == `{"google":{"thought_signature":"c2ln"}}`
	}
	if !found {
		t.Errorf("resumed request lacks the thinking part or the provider fields: %+v", m.Requests()[0].Messages)
	}
}

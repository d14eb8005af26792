package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
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

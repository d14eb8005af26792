package openaitest_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/message"
)

// TestThinkingAndProviderFieldsRoundTrip: the server renders a thinking
// part as reasoning_content and a call's provider fields as extra_content;
// the client keeps them, sends them back, and the model sees them again.
func TestThinkingAndProviderFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		model := &funcModel{gen: func(_ context.Context, req *llm.Request) (*llm.Response, error) {
			if len(req.Messages) > 1 {
				return &llm.Response{Parts: []message.Part{message.Text{Content: "done"}}}, nil
			}
			return &llm.Response{Parts: []message.Part{
				message.Thinking{Content: "nap first", Source: "reasoning_content"},
				message.ToolCall{ToolName: "get_time", ToolCallID: "call_1", Args: `{}`, ProviderExtra: `{"google":{"thought_signature":"c2ln"}}`},
			}}, nil
		}}
		srv := openaitest.NewServer(model)
		client := newClient(t, srv)
		req := &llm.Request{Messages: []message.Message{message.NewRequest(message.UserText("go"))}, Tools: []llm.ToolDef{{Name: "get_time"}}}
		var resp *llm.Response
		var err error
		if stream {
			resp, err = client.Stream(t.Context(), req, nil)
		} else {
			resp, err = client.Generate(t.Context(), req)
		}
		if err != nil {
			t.Fatal(err)
		}
		got := message.NewResponse(resp.Parts...)
		calls := got.ToolCalls()
		if got.Thinking() != "nap first" || len(calls) != 1 || calls[0].ProviderExtra != `{"google":{"thought_signature":"c2ln"}}` {
			t.Fatalf("stream=%v: response %+v", stream, resp.Parts)
		}
		req.Messages = append(req.Messages, got, message.NewRequest(message.ToolReturn{ToolName: "get_time", ToolCallID: calls[0].ToolCallID, Content: json.RawMessage(`"noon"`)}))
		if _, err := client.Generate(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		model.mu.Lock()
		back := model.seen[len(model.seen)-1].Messages[1]
		model.mu.Unlock()
		th, ok1 := back.Parts[0].(message.Thinking)
		tc, ok2 := back.Parts[1].(message.ToolCall)
		if !ok1 || !ok2 || th.Content != "nap first" || tc.ProviderExtra != `{"google":{"thought_signature":"c2ln"}}` {
			t.Errorf("stream=%v: the model saw %+v", stream, back.Parts)
		}
		srv.Close()
	}
}

package openaicompat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/message"
)

func Example() {
	// A stand-in for an OpenAI-compatible server, streaming one tool call.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, chunk := range []string{
			`{"model":"demo","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
			`{"model":"demo","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
			`{"model":"demo","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
			`{"model":"demo","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			`{"model":"demo","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}`,
			`[DONE]`,
		} {
			_, _ = io.WriteString(w, "data: "+chunk+"\n\n")
		}
	}))
	defer srv.Close()

	model, err := openaicompat.New(openaicompat.Config{
		BaseURL: srv.URL + "/v1",
		APIKey:  "sk-example",
		Model:   "demo",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &llm.Request{
		Messages: []message.Message{message.NewRequest(message.UserText("Weather in Paris?"))},
		Tools: []llm.ToolDef{{
			Name:       "get_weather",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`),
		}},
	}
	resp, err := model.Stream(context.Background(), req, func(d llm.Delta) {
		if d.ToolCall != nil {
			fmt.Printf("fragment %d: %q\n", d.ToolCallIndex, d.ToolCall.Args)
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range (message.Message{Parts: resp.Parts}).ToolCalls() {
		fmt.Println("call:", c.ToolCallID, c.ToolName, c.Args)
	}
	fmt.Println("finish:", resp.FinishReason, "tokens:", resp.Usage.InputTokens, resp.Usage.OutputTokens)
	// Output:
	// fragment 0: ""
	// fragment 0: "{\"city\":"
	// fragment 0: "\"Paris\"}"
	// call: call_1 get_weather {"city":"Paris"}
	// finish: tool_calls tokens: 12 8
}

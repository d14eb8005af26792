package openaicompat_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/message"
)

func TestRequestExtrasAndStreamUsage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sseChunks(done, `"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]`))
	m := newModel(t, f.URL, func(c *openaicompat.Config) {
		c.StreamUsage = true
		c.ExtraBody = map[string]any{"thinking": map[string]any{"type": "enabled"}, "top_k": 5}
	})
	zero := 0.0
	req := userRequest("go")
	req.Settings.Temperature = &zero
	if _, err := m.Stream(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	body := string(f.requests()[0].Body)
	for _, want := range []string{`"stream_options":{"include_usage":true}`, `"temperature":0,`, `"thinking":{"type":"enabled"}`, `"top_k":5`} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %s: %s", want, body)
		}
	}
	for _, k := range []string{"model", "messages", "tools", "stream"} {
		_, err := openaicompat.New(openaicompat.Config{Model: "m", ExtraBody: map[string]any{k: 1}})
		if !errors.Is(err, openaicompat.ErrConfig) {
			t.Errorf("extra body %q: err = %v", k, err)
		}
	}
}

// TestIdleTimeoutBeforeHeaders: a server that never answers is cut after
// the idle timeout, not waited for forever.
func TestIdleTimeoutBeforeHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	m := newModel(t, f.URL, func(c *openaicompat.Config) { c.IdleTimeout = 50 * time.Millisecond; c.MaxRetries = -1 })
	// Never hangs: Generate returns (within the kit's bound), and its
	// error names the idle timeout as the cause.
	errc := make(chan error, 1)
	go func() {
		_, err := m.Generate(t.Context(), userRequest("go"))
		errc <- err
	}()
	err := offloadtest.WaitOrTimeout(t, errc, "Generate to fail on the idle timeout")
	if !errors.Is(err, llm.ErrIncomplete) || !strings.Contains(err.Error(), "response silent for 50ms (idle timeout)") {
		t.Fatalf("err = %v", err)
	}
}

// TestKeepAlivesResetTheIdleTimeout: comments are something arriving, so a
// slow stream that keeps its connection alive is not cut.
func TestKeepAlivesResetTheIdleTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 8 {
			_, _ = io.WriteString(w, ": keep-alive\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(25 * time.Millisecond): // the server's pace, 4× under the timeout
			}
		}
		sseChunks(done, `"choices":[{"index":0,"delta":{"content":"late"},"finish_reason":"stop"}]`)(w, r)
	})
	m := newModel(t, f.URL, func(c *openaicompat.Config) { c.IdleTimeout = 100 * time.Millisecond; c.MaxRetries = -1 })
	resp, err := m.Stream(t.Context(), userRequest("go"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := (message.Message{Parts: resp.Parts}).Text(); got != "late" {
		t.Errorf("text %q", got)
	}
}

func TestRetryAfterBeyondMaxBackoffIsNotRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, status(429, rateLimitBody, "Retry-After", "120"))
	m := newModel(t, f.URL)
	_, err := m.Generate(t.Context(), userRequest("go"))
	if !errors.Is(err, openaicompat.ErrRateLimited) || !strings.Contains(err.Error(), "retry asked after 2m0s") {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests", n)
	}
}

func TestQuotaErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	for _, h := range []http.HandlerFunc{
		status(429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`),
		status(402, `{"error":{"code":402,"message":"Insufficient credits"}}`),
	} {
		f := newFixture(t, h)
		_, err := newModel(t, f.URL).Generate(t.Context(), userRequest("go"))
		if !errors.Is(err, openaicompat.ErrQuota) || errors.Is(err, openaicompat.ErrRateLimited) {
			t.Errorf("err = %v", err)
		}
		if n := len(f.requests()); n != 1 {
			t.Errorf("%d requests for %v", n, err)
		}
	}
}

// TestSSEFraming: CRLF line ends, event and id fields, data without a
// space, a JSON split over two data lines, events not separated by a blank
// line, and a last event without its blank line.
func TestSSEFraming(t *testing.T) {
	t.Parallel()
	body := "event: message\r\nid: 1\r\ndata:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\n\r\n" +
		"data: {\"choices\":[{\"index\":0,\n" +
		"data: \"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}]}\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"d\"},\"finish_reason\":\"stop\"}]}\n" +
		"data: [DONE]"
	f := newFixture(t, sseRaw(body))
	resp, err := newModel(t, f.URL).Stream(t.Context(), userRequest("go"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := (message.Message{Parts: resp.Parts}).Text(); got != "abcd" {
		t.Errorf("text %q", got)
	}
}

// TestInterleavedCallsByIDWithoutIndex: calls told apart by their ids only
// (ids repeated on every fragment, no index).
func TestInterleavedCallsByIDWithoutIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sseChunks(done,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","type":"function","function":{"name":"get_weather","arguments":"{\"city\""}}]}}]`,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","type":"function","function":{"name":"get_time","arguments":"{"}}]}}]`,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"arguments":":\"Paris\"}"}}]}}]`,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"arguments":"}"}}]},"finish_reason":"tool_calls"}]`,
	))
	resp, err := newModel(t, f.URL).Stream(t.Context(), userRequest("go"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, resp,
		message.ToolCall{ToolName: "get_weather", ToolCallID: "a", Args: `{"city":"Paris"}`},
		message.ToolCall{ToolName: "get_time", ToolCallID: "b", Args: `{}`})
}

// TestSharedIDsKeptApart: calls at different indices sharing an id are
// different calls, each with an ID of its own, in the response and in its
// streamed fragments; an ID the history already holds (Kimi's ids restart
// at every turn) is made unique too, and the next request sends back each
// call with one tool message.
func TestSharedIDsKeptApart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sseChunks(done,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"get_time:0","type":"function","function":{"name":"get_time","arguments":"{}"}}]}}]`,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"get_time:0","type":"function","function":{"name":"get_weather","arguments":"{\"city\""}}]}}]`,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"get_time:0","type":"function","function":{"name":"get_time","arguments":""}}]}}]`,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"get_time:0","function":{"arguments":":\"Paris\"}"}}]}}]`,
		`"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`,
	), sseChunks(done, `"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]`))
	m := newModel(t, f.URL)
	// A previous turn's call already has the id, and its _2 form.
	req := userRequest("go")
	req.Messages = append(req.Messages,
		message.NewResponse(message.ToolCall{ToolName: "get_time", ToolCallID: "get_time:0", Args: `{}`}, message.ToolCall{ToolName: "get_time", ToolCallID: "get_time:0_2", Args: `{}`}),
		message.NewRequest(message.ToolReturn{ToolName: "get_time", ToolCallID: "get_time:0", Content: json.RawMessage(`"noon"`)}, message.ToolReturn{ToolName: "get_time", ToolCallID: "get_time:0_2", Content: json.RawMessage(`"noon"`)}),
	)
	ids := map[int]string{}
	resp, err := m.Stream(t.Context(), req, func(d llm.Delta) {
		if d.ToolCall != nil && d.ToolCall.ToolCallID != "" {
			if prev, ok := ids[d.ToolCallIndex]; ok && prev != d.ToolCall.ToolCallID {
				t.Errorf("call %d streamed with ids %q and %q", d.ToolCallIndex, prev, d.ToolCall.ToolCallID)
			}
			ids[d.ToolCallIndex] = d.ToolCall.ToolCallID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, resp,
		message.ToolCall{ToolName: "get_time", ToolCallID: "get_time:0_3", Args: `{}`},
		message.ToolCall{ToolName: "get_weather", ToolCallID: "get_time:0_4", Args: `{"city":"Paris"}`},
		message.ToolCall{ToolName: "get_time", ToolCallID: "get_time:0_5", Args: `{}`})
	if want := map[int]string{0: "get_time:0_3", 1: "get_time:0_4", 2: "get_time:0_5"}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("streamed ids %v, want %v", ids, want)
	}

	// Sent back: the assistant message with the three calls, then a tool
	// message for each.
	got := message.NewResponse(resp.Parts...)
	req.Messages = append(req.Messages, got)
	var results []message.Part
	for _, c := range got.ToolCalls() {
		results = append(results, message.ToolReturn{ToolName: c.ToolName, ToolCallID: c.ToolCallID, Content: json.RawMessage(`"r-` + c.ToolCallID + `"`)})
	}
	req.Messages = append(req.Messages, message.NewRequest(results...))
	if _, err := m.Stream(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    string `json:"content"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.requests()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	msgs := body.Messages[len(body.Messages)-4:]
	var sent []string
	for _, c := range msgs[0].ToolCalls {
		sent = append(sent, c.ID)
	}
	if msgs[0].Role != "assistant" || strings.Join(sent, " ") != "get_time:0_3 get_time:0_4 get_time:0_5" {
		t.Fatalf("assistant message %+v", msgs[0])
	}
	for i, id := range sent {
		if m := msgs[1+i]; m.Role != "tool" || m.ToolCallID != id || m.Content != "r-"+id {
			t.Errorf("tool message %d = %+v, want the result of %s", i, m, id)
		}
	}
}

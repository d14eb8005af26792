package openaitest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/message"
)

// funcModel is an llm.Model made of a function; Stream calls stream when
// set (it may send deltas), else gen without deltas.
type funcModel struct {
	gen    func(ctx context.Context, req *llm.Request) (*llm.Response, error)
	stream func(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error)

	mu   sync.Mutex
	seen []*llm.Request
}

func (m *funcModel) Name() string { return "fake-model" }

func (m *funcModel) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req)
	m.mu.Unlock()
	return m.gen(ctx, req)
}

func (m *funcModel) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	if m.stream != nil {
		m.mu.Lock()
		m.seen = append(m.seen, req)
		m.mu.Unlock()
		return m.stream(ctx, req, onDelta)
	}
	return m.Generate(ctx, req)
}

func (m *funcModel) requests() []*llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*llm.Request(nil), m.seen...)
}

var tools = []llm.ToolDef{
	{Name: "get_weather", Description: "Weather of a city", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
	{Name: "get_time"},
}

// weatherScript calls two tools in parallel on the first turn, then answers
// with what the tools returned.
func weatherScript(_ context.Context, req *llm.Request) (*llm.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	if len(req.Messages) == 1 {
		return &llm.Response{
			Parts: []message.Part{
				message.Text{Content: "Let me check the weather."},
				message.ToolCall{ToolName: "get_weather", ToolCallID: "call_a", Args: `{"city":"Paris"}`},
				message.ToolCall{ToolName: "get_time", ToolCallID: "call_b", Args: ""},
			},
			Usage: message.Usage{InputTokens: 10, OutputTokens: 5},
		}, nil
	}
	var texts []string
	for _, p := range last.Parts {
		switch p := p.(type) {
		case message.ToolReturn:
			texts = append(texts, p.ToolName+"="+p.ModelText())
		case message.RetryPrompt:
			texts = append(texts, "retry "+p.ToolName+": "+p.Content)
		}
	}
	return &llm.Response{
		Parts: []message.Part{message.Text{Content: "Done: " + strings.Join(texts, "; ")}},
		Usage: message.Usage{InputTokens: 20, OutputTokens: 3},
	}, nil
}

func newClient(t *testing.T, srv *openaitest.Server, mod ...func(*openaicompat.Config)) *openaicompat.Model {
	t.Helper()
	cfg := openaicompat.Config{BaseURL: srv.URL(), Model: "fake-model", InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, StreamUsage: true}
	for _, f := range mod {
		f(&cfg)
	}
	m, err := openaicompat.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, streamed := range []bool{false, true} {
		name := "generate"
		if streamed {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			model := &funcModel{gen: weatherScript}
			srv := openaitest.NewServer(model)
			defer srv.Close()
			client := newClient(t, srv)

			call := func(req *llm.Request) (*llm.Response, []llm.Delta) {
				t.Helper()
				var deltas []llm.Delta
				var resp *llm.Response
				var err error
				if streamed {
					resp, err = client.Stream(t.Context(), req, func(d llm.Delta) { deltas = append(deltas, d) })
				} else {
					resp, err = client.Generate(t.Context(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				return resp, deltas
			}

			history := []message.Message{message.NewRequest(message.SystemPrompt{Content: "Be brief."}, message.UserText("Weather?"))}
			resp, deltas := call(&llm.Request{Messages: history, Tools: tools})
			got := message.Message{Parts: resp.Parts}
			if got.Text() != "Let me check the weather." {
				t.Errorf("text = %q", got.Text())
			}
			calls := got.ToolCalls()
			if len(calls) != 2 ||
				calls[0] != (message.ToolCall{ToolName: "get_weather", ToolCallID: "call_a", Args: `{"city":"Paris"}`}) ||
				calls[1] != (message.ToolCall{ToolName: "get_time", ToolCallID: "call_b", Args: `{}`}) {
				t.Errorf("calls = %+v", calls)
			}
			if resp.Usage != (message.Usage{InputTokens: 10, OutputTokens: 5}) || resp.FinishReason != "tool_calls" || resp.ModelName != "fake-model" {
				t.Errorf("usage, finish, model = %+v, %q, %q", resp.Usage, resp.FinishReason, resp.ModelName)
			}
			if streamed {
				var words []string
				fragments := 0
				for _, d := range deltas {
					if d.Text != "" {
						words = append(words, d.Text)
					}
					if d.ToolCall != nil {
						fragments++
					}
				}
				if strings.Join(words, "|") != "Let |me |check |the |weather." {
					t.Errorf("text deltas = %q", words)
				}
				if fragments < 5 { // id+name and 4-byte argument fragments
					t.Errorf("%d tool-call fragments, want the arguments split", fragments)
				}
			}

			// The model sees the tools and the history as sent.
			first := model.requests()[0]
			if len(first.Tools) != 2 || first.Tools[0].Name != "get_weather" || string(first.Tools[1].Parameters) != `{"type":"object","properties":{}}` {
				t.Errorf("tools seen = %+v", first.Tools)
			}
			if len(first.Messages) != 1 || len(first.Messages[0].Parts) != 2 {
				t.Fatalf("history seen = %+v", first.Messages)
			}

			history = append(history, message.NewResponse(resp.Parts...), message.NewRequest(
				message.ToolReturn{ToolName: "get_weather", ToolCallID: "call_a", Content: json.RawMessage(`{"temp":21}`)},
				message.RetryPrompt{ToolName: "get_time", ToolCallID: "call_b", Content: "try later"},
			))
			resp, _ = call(&llm.Request{Messages: history, Tools: tools})
			if text := (message.Message{Parts: resp.Parts}).Text(); text != `Done: get_weather={"temp":21}; retry get_time: try later` {
				t.Errorf("final text = %q", text)
			}
			if resp.FinishReason != "stop" {
				t.Errorf("finish = %q", resp.FinishReason)
			}

			second := model.requests()[1].Messages
			if len(second) != 3 || second[1].Role != message.RoleResponse || len(second[1].ToolCalls()) != 2 {
				t.Fatalf("history seen = %+v", second)
			}
			if tr, ok := second[2].Parts[0].(message.ToolReturn); !ok || tr.ToolName != "get_weather" || string(tr.Content) != `"{\"temp\":21}"` {
				t.Errorf("tool return seen = %#v", second[2].Parts[0])
			}

			reqs := srv.Requests()
			if len(reqs) != 2 || reqs[0].Path != "/v1/chat/completions" || !json.Valid(reqs[0].Body) {
				t.Errorf("recorded = %d requests", len(reqs))
			}
		})
	}
}

func TestStreamingModelDeltas(t *testing.T) {
	t.Parallel()
	model := &funcModel{stream: func(_ context.Context, _ *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
		onDelta(llm.Delta{Text: "Calling two"})
		onDelta(llm.Delta{Text: " tools."})
		onDelta(llm.Delta{ToolCallIndex: 0, ToolCall: &message.ToolCall{ToolName: "get_weather", ToolCallID: "call_a"}})
		onDelta(llm.Delta{ToolCallIndex: 1, ToolCall: &message.ToolCall{ToolName: "get_time", ToolCallID: "call_b", Args: "{}"}})
		onDelta(llm.Delta{ToolCallIndex: 0, ToolCall: &message.ToolCall{Args: `{"city":"Oslo"}`}})
		return &llm.Response{Parts: []message.Part{
			message.Text{Content: "Calling two tools."},
			message.ToolCall{ToolName: "get_weather", ToolCallID: "call_a", Args: `{"city":"Oslo"}`},
			message.ToolCall{ToolName: "get_time", ToolCallID: "call_b", Args: "{}"},
		}}, nil
	}}
	srv := openaitest.NewServer(model, openaitest.WithFragmentSize(1))
	defer srv.Close()
	resp, err := newClient(t, srv).Stream(t.Context(), &llm.Request{
		Messages: []message.Message{message.NewRequest(message.UserText("go"))}, Tools: tools,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := message.Message{Parts: resp.Parts}
	calls := got.ToolCalls()
	if got.Text() != "Calling two tools." || len(calls) != 2 || calls[0].Args != `{"city":"Oslo"}` || calls[1].ToolName != "get_time" {
		t.Errorf("response = %+v", resp.Parts)
	}
	body := string(srv.Requests()[0].Body)
	if !strings.Contains(body, `"stream":true`) || !strings.Contains(body, `"include_usage":true`) {
		t.Errorf("request = %s", body)
	}
}

func TestParallelToolCallsOff(t *testing.T) {
	t.Parallel()
	model := &funcModel{gen: weatherScript}
	srv := openaitest.NewServer(model)
	defer srv.Close()
	no := false
	for _, streamed := range []bool{false, true} {
		req := &llm.Request{
			Messages: []message.Message{message.NewRequest(message.UserText("go"))}, Tools: tools,
			Settings: llm.Settings{ParallelToolCalls: &no},
		}
		var resp *llm.Response
		var err error
		if streamed {
			resp, err = newClient(t, srv).Stream(t.Context(), req, nil)
		} else {
			resp, err = newClient(t, srv).Generate(t.Context(), req)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := len(message.Message{Parts: resp.Parts}.ToolCalls()); n != 1 {
			t.Errorf("streamed=%v: %d calls, want 1", streamed, n)
		}
	}
	if p := model.requests()[0].Settings.ParallelToolCalls; p == nil || *p {
		t.Errorf("model saw ParallelToolCalls = %v", p)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("script exhausted")
	model := &funcModel{gen: func(context.Context, *llm.Request) (*llm.Response, error) { return nil, boom }}
	srv := openaitest.NewServer(model, openaitest.WithAPIKey("sk-right"))
	defer srv.Close()
	req := &llm.Request{Messages: []message.Message{message.NewRequest(message.UserText("go"))}}

	_, err := newClient(t, srv, func(c *openaicompat.Config) { c.APIKey = "sk-wrong" }).Generate(t.Context(), req)
	if !errors.Is(err, openaicompat.ErrUnauthorized) {
		t.Errorf("wrong key: err = %v", err)
	}

	client := newClient(t, srv, func(c *openaicompat.Config) { c.APIKey = "sk-right"; c.MaxRetries = -1 })
	var apiErr *openaicompat.APIError
	for _, streamed := range []bool{false, true} {
		if streamed {
			_, err = client.Stream(t.Context(), req, nil)
		} else {
			_, err = client.Generate(t.Context(), req)
		}
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusInternalServerError || !strings.Contains(apiErr.Message, "script exhausted") {
			t.Errorf("streamed=%v: model error: err = %v", streamed, err)
		}
	}

	srv.FailNext(1, 429, "0")
	model.gen = weatherScript
	if _, err := newClient(t, srv, func(c *openaicompat.Config) { c.APIKey = "sk-right" }).Generate(t.Context(), req); err != nil {
		t.Errorf("after one 429: %v", err)
	}
}

func TestModelErrorMidStream(t *testing.T) {
	t.Parallel()
	model := &funcModel{stream: func(_ context.Context, _ *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
		onDelta(llm.Delta{Text: "partial"})
		return nil, errors.New("overloaded")
	}}
	srv := openaitest.NewServer(model)
	defer srv.Close()
	_, err := newClient(t, srv).Stream(t.Context(), &llm.Request{Messages: []message.Message{message.NewRequest(message.UserText("go"))}}, nil)
	var apiErr *openaicompat.APIError
	if !errors.As(err, &apiErr) || !apiErr.InBand || apiErr.StatusCode != http.StatusOK || apiErr.Code != "server_error" {
		t.Errorf("err = %v", err)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	srv := openaitest.NewServer(&funcModel{gen: weatherScript})
	t.Cleanup(srv.Close) // after the parallel subtests
	const (
		user   = `{"role":"user","content":"hi"}`
		tool   = `{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}`
		called = `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
		answer = `{"role":"tool","tool_call_id":"c1","content":"ok"}`
	)
	tests := []struct {
		name, body, param string
	}{
		{"ok", `{"model":"m","messages":[` + user + `,` + called + `,` + answer + `],"tools":[` + tool + `]}`, ""},
		{"no model", `{"messages":[` + user + `]}`, "model"},
		{"no messages", `{"model":"m","messages":[]}`, "messages"},
		{"null parameters", `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":null}}]}`, "tools[0].function.parameters"},
		{"bad tool name", `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"a b","parameters":{}}}]}`, "tools[0].function.name"},
		{"call without type", `{"model":"m","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"","function":{"name":"f","arguments":"{}"}}]},` + answer + `]}`, "messages[1].tool_calls[0].type"},
		{"index in history", `{"model":"m","messages":[` + user + `,{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` + answer + `]}`, "messages[1].tool_calls[0].index"},
		{"arguments missing", `{"model":"m","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f"}}]},` + answer + `]}`, "messages[1].tool_calls[0].function.arguments"},
		{"arguments not JSON", `{"model":"m","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{x"}}]},` + answer + `]}`, "messages[1].tool_calls[0].function.arguments"},
		{"duplicate call id", `{"model":"m","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` + answer + `]}`, "messages[1].tool_calls[1].id"},
		{"unanswered call", `{"model":"m","messages":[` + user + `,` + called + `,` + user + `]}`, "messages[2].role"},
		{"unanswered call at end", `{"model":"m","messages":[` + user + `,` + called + `]}`, "messages"},
		{"unknown tool_call_id", `{"model":"m","messages":[` + user + `,` + answer + `]}`, "messages[1].tool_call_id"},
		{"tool without content", `{"model":"m","messages":[` + user + `,` + called + `,{"role":"tool","tool_call_id":"c1"}]}`, "messages[2].content"},
		{"stream_options without stream", `{"model":"m","messages":[` + user + `],"stream_options":{"include_usage":true}}`, "stream_options"},
		{"parallel_tool_calls without tools", `{"model":"m","messages":[` + user + `],"parallel_tool_calls":false}`, "parallel_tool_calls"},
		{"tool_choice unknown tool", `{"model":"m","messages":[` + user + `],"tools":[` + tool + `],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{"tool_choice bad string", `{"model":"m","messages":[` + user + `],"tools":[` + tool + `],"tool_choice":"always"}`, "tool_choice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if tt.param == "" {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				return
			}
			var e struct {
				Error struct {
					Param *string `json:"param"`
					Type  string  `json:"type"`
				} `json:"error"`
			}
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error.Param == nil || *e.Error.Param != tt.param || e.Error.Type != "invalid_request_error" {
				t.Errorf("status %d, body %s; want 400 with param %q", resp.StatusCode, body, tt.param)
			}
		})
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	srv := openaitest.NewServer(&funcModel{gen: weatherScript})
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+"/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "fake-model" {
		t.Errorf("models = %+v, %v", list, err)
	}
}

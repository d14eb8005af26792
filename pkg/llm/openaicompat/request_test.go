package openaicompat_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/message"
)

// wireRequest is what the tests read back from a request body.
type wireRequest struct {
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			Index    *int    `json:"index"`
			ID       string  `json:"id"`
			Type     *string `json:"type"`
			Function struct {
				Name      string  `json:"name"`
				Arguments *string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	Temperature         *float64        `json:"temperature"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
}

func sendAndRead(t *testing.T, req *llm.Request, mod ...func(*openaicompat.Config)) (wireRequest, []byte) {
	t.Helper()
	f := newFixture(t, jsonFile(t, "parallel_tool_calls.json"))
	m := newModel(t, f.URL, mod...)
	if _, err := m.Generate(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	raw := f.requests()[0].Body
	var w wireRequest
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	return w, raw
}

func historyWithToolTurn() []message.Message {
	return []message.Message{
		message.NewRequest(message.SystemPrompt{Content: "Be brief."}, message.UserText("weather and time?")),
		message.NewResponse(
			message.Text{Content: "Checking."},
			message.ToolCall{ToolName: "get_weather", ToolCallID: "call_1", Args: `{"city":"Paris"}`},
			message.ToolCall{ToolName: "get_time", ToolCallID: "call_2", Args: ""},
			message.ToolCall{ToolName: "get_weather", ToolCallID: "call_3", Args: `{"town":1}`},
		),
		// The user prompt comes first here: tool results must still
		// directly follow the assistant message.
		message.NewRequest(
			message.UserText("and hurry"),
			message.ToolReturn{ToolName: "get_weather", ToolCallID: "call_1", Content: json.RawMessage(`{"temp":21}`)},
			message.ToolReturn{ToolName: "get_time", ToolCallID: "call_2", Content: json.RawMessage(`null`)},
			message.RetryPrompt{ToolName: "get_weather", ToolCallID: "call_3", Content: "city is required"},
		),
		message.NewResponse(message.Text{Content: "Sorry."}),
		message.NewRequest(message.RetryPrompt{Content: "answer in French"}),
	}
}

func TestRequestNormalisation(t *testing.T) {
	t.Parallel()
	w, raw := sendAndRead(t, &llm.Request{Messages: historyWithToolTurn(), Tools: weatherTools})

	type msg struct{ role, content, toolCallID string }
	var got []msg
	for _, m := range w.Messages {
		var content string
		_ = json.Unmarshal(m.Content, &content)
		got = append(got, msg{m.Role, content, m.ToolCallID})
	}
	want := []msg{
		{"system", "Be brief.", ""},
		{"user", "weather and time?", ""},
		{"assistant", "Checking.", ""},
		{"tool", `{"temp":21}`, "call_1"},
		{"tool", openaicompat.EmptyToolResult, "call_2"},
		{"tool", "city is required" + message.RetrySuffix, "call_3"},
		{"user", "and hurry", ""},
		{"assistant", "Sorry.", ""},
		{"user", "answer in French" + message.RetrySuffix, ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("messages:\n got %q\nwant %q", got, want)
	}

	calls := w.Messages[2].ToolCalls
	if len(calls) != 3 {
		t.Fatalf("tool calls = %d, want 3", len(calls))
	}
	for i, c := range calls {
		if c.Index != nil {
			t.Errorf("call %d: index %d sent in history", i, *c.Index)
		}
		if c.Type == nil || *c.Type != "function" {
			t.Errorf("call %d: type = %v, want function", i, c.Type)
		}
		if c.Function.Arguments == nil || !json.Valid([]byte(*c.Function.Arguments)) {
			t.Errorf("call %d: arguments = %v", i, c.Function.Arguments)
		}
	}
	if *calls[1].Function.Arguments != "{}" {
		t.Errorf("empty arguments sent as %q, want {}", *calls[1].Function.Arguments)
	}

	for i, tool := range w.Tools {
		if tool.Type != "function" || !bytes.HasPrefix(tool.Function.Parameters, []byte("{")) {
			t.Errorf("tool %d = %+v", i, tool)
		}
	}
	if got := string(w.Tools[1].Function.Parameters); got != `{"type":"object","properties":{}}` {
		t.Errorf("nil parameters sent as %s", got)
	}
	if bytes.Contains(raw, []byte(`"parameters":null`)) {
		t.Error("null parameters sent")
	}
}

func TestRequestSettings(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	zero, warm := 0.0, 0.5
	tests := []struct {
		name  string
		tools []llm.ToolDef
		s     llm.Settings
		mod   func(*openaicompat.Config)
		check func(t *testing.T, w wireRequest)
	}{
		{"no tools: no parallel_tool_calls nor tool_choice", nil,
			llm.Settings{ParallelToolCalls: &no, ToolChoice: "auto"}, nil,
			func(t *testing.T, w wireRequest) {
				if w.ParallelToolCalls != nil || w.ToolChoice != nil {
					t.Errorf("parallel_tool_calls=%v tool_choice=%s", w.ParallelToolCalls, w.ToolChoice)
				}
			}},
		{"parallel false and required", weatherTools,
			llm.Settings{ParallelToolCalls: &no, ToolChoice: "required"}, nil,
			func(t *testing.T, w wireRequest) {
				if w.ParallelToolCalls == nil || *w.ParallelToolCalls || string(w.ToolChoice) != `"required"` {
					t.Errorf("parallel_tool_calls=%v tool_choice=%s", w.ParallelToolCalls, w.ToolChoice)
				}
			}},
		{"named tool choice", weatherTools, llm.Settings{ToolChoice: "get_time"}, nil,
			func(t *testing.T, w wireRequest) {
				if string(w.ToolChoice) != `{"type":"function","function":{"name":"get_time"}}` {
					t.Errorf("tool_choice=%s", w.ToolChoice)
				}
			}},
		{"config parallel default", weatherTools, llm.Settings{},
			func(c *openaicompat.Config) { c.ParallelToolCalls = &yes },
			func(t *testing.T, w wireRequest) {
				if w.ParallelToolCalls == nil || !*w.ParallelToolCalls {
					t.Errorf("parallel_tool_calls=%v", w.ParallelToolCalls)
				}
			}},
		{"temperature zero is still sent; max_completion_tokens", nil,
			llm.Settings{Temperature: &zero, MaxTokens: 100}, nil,
			func(t *testing.T, w wireRequest) {
				if w.Temperature == nil || *w.Temperature > 1e-6 || w.MaxCompletionTokens != 100 || w.MaxTokens != 0 {
					t.Errorf("temperature=%v max_completion_tokens=%d max_tokens=%d", w.Temperature, w.MaxCompletionTokens, w.MaxTokens)
				}
			}},
		{"legacy max_tokens", nil, llm.Settings{Temperature: &warm, MaxTokens: 7},
			func(c *openaicompat.Config) { c.UseMaxTokens = true },
			func(t *testing.T, w wireRequest) {
				if w.Temperature == nil || *w.Temperature != 0.5 || w.MaxTokens != 7 || w.MaxCompletionTokens != 0 {
					t.Errorf("temperature=%v max_tokens=%d", w.Temperature, w.MaxTokens)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &llm.Request{Messages: []message.Message{message.NewRequest(message.UserText("hi"))}, Tools: tt.tools, Settings: tt.s}
			var mods []func(*openaicompat.Config)
			if tt.mod != nil {
				mods = append(mods, tt.mod)
			}
			w, _ := sendAndRead(t, req, mods...)
			if w.StreamOptions != nil {
				t.Errorf("stream_options sent on a non-stream request: %s", w.StreamOptions)
			}
			tt.check(t, w)
		})
	}
}

func TestRequestUserFiles(t *testing.T) {
	t.Parallel()
	req := &llm.Request{Messages: []message.Message{message.NewRequest(message.UserPrompt{Content: []message.Content{
		message.TextContent("what is this?"),
		message.FileContent("dot.png", "image/png", []byte{0x89, 'P', 'N', 'G'}),
		message.FileContent("notes.txt", "text/plain", []byte("hello")),
	}})}}
	w, _ := sendAndRead(t, req)
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(w.Messages[0].Content, &parts); err != nil {
		t.Fatalf("content %s: %v", w.Messages[0].Content, err)
	}
	if len(parts) != 3 || parts[0].Text != "what is this?" ||
		parts[1].Type != "image_url" || parts[1].ImageURL.URL != "data:image/png;base64,iVBORw==" ||
		parts[2].Type != "text" || parts[2].Text != "notes.txt:\nhello" {
		t.Errorf("parts = %+v", parts)
	}
}

func TestAlwaysSendContent(t *testing.T) {
	t.Parallel()
	history := []message.Message{
		message.NewRequest(message.UserText("time?")),
		message.NewResponse(message.ToolCall{ToolName: "get_time", ToolCallID: "call_1", Args: "{}"}),
		message.NewRequest(message.ToolReturn{ToolName: "get_time", ToolCallID: "call_1", Content: json.RawMessage(`"noon"`)}),
	}
	w, _ := sendAndRead(t, &llm.Request{Messages: history, Tools: weatherTools})
	if w.Messages[1].Content != nil {
		t.Fatalf("default: assistant content = %s, want none", w.Messages[1].Content)
	}
	w, raw := sendAndRead(t, &llm.Request{Messages: history, Tools: weatherTools},
		func(c *openaicompat.Config) { c.AlwaysSendContent = true })
	if string(w.Messages[1].Content) != `""` || len(w.Messages[1].ToolCalls) != 1 {
		t.Errorf("AlwaysSendContent: assistant message = %+v (body %s)", w.Messages[1], raw)
	}
}

func TestSecretNeverShown(t *testing.T) {
	t.Parallel()
	const key = "sk-live-0123456789"
	cfg := openaicompat.Config{APIKey: key, Model: "m", BaseURL: "http://127.0.0.1:1/v1"}

	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("config", "cfg", cfg, "key", cfg.APIKey)
	log.Info("text", slog.Any("key", cfg.APIKey))
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "cfg", cfg, "key", cfg.APIKey)
	out := buf.String() +
		fmt.Sprintf("%v %+v %#v %s %v", cfg, cfg, cfg, cfg.APIKey, cfg.APIKey)
	b, _ := json.Marshal(cfg.APIKey)
	out += string(b)
	if strings.Contains(out, key) {
		t.Errorf("key revealed:\n%s", out)
	}
	if !strings.Contains(buf.String(), `"api_key":"[REDACTED]"`) {
		t.Errorf("log output lacks the redacted key:\n%s", buf.String())
	}
	if string(cfg.APIKey) != key {
		t.Error("string(Secret) must give the key")
	}
}

func TestNewAndConfigFromEnv(t *testing.T) {
	t.Parallel()
	if _, err := openaicompat.New(openaicompat.Config{}); !errors.Is(err, openaicompat.ErrConfig) {
		t.Errorf("New without model: err = %v", err)
	}
	if _, err := openaicompat.New(openaicompat.Config{Model: "m", BaseURL: "ftp://x"}); !errors.Is(err, openaicompat.ErrConfig) {
		t.Errorf("New with bad URL: err = %v", err)
	}
	env := map[string]string{"OPENAI_API_KEY": "sk-1", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
	cfg := openaicompat.ConfigFromEnv(func(k string) string { return env[k] }, "gpt-4o-mini")
	if cfg.APIKey != "sk-1" || cfg.BaseURL != "http://127.0.0.1:9/v1" || cfg.Model != "gpt-4o-mini" {
		t.Errorf("cfg = %+v", cfg)
	}
	m, err := openaicompat.New(openaicompat.ConfigFromEnv(func(string) string { return "" }, "x"))
	if err != nil || m.Name() != "x" {
		t.Errorf("New(empty env) = %v, %v", m, err)
	}
}

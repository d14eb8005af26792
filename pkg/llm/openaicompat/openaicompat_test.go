package openaicompat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/message"
)

// captured is a request seen by a fixture server.
type captured struct {
	Header http.Header
	Body   []byte
}

// fixture is an httptest server answering the n-th request with the n-th
// handler (the last one repeats) and recording the requests.
type fixture struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []captured
}

func newFixture(t *testing.T, handlers ...http.HandlerFunc) *fixture {
	t.Helper()
	f := &fixture{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.reqs)
		f.reqs = append(f.reqs, captured{Header: r.Header.Clone(), Body: body})
		f.mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		handlers[min(n, len(handlers)-1)](w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fixture) requests() []captured {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]captured(nil), f.reqs...)
}

// body decodes the n-th request body.
func (f *fixture) body(t *testing.T, n int) map[string]any {
	t.Helper()
	reqs := f.requests()
	if n >= len(reqs) {
		t.Fatalf("request %d not received (%d received)", n, len(reqs))
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[n].Body, &m); err != nil {
		t.Fatalf("request body: %v", err)
	}
	return m
}

func jsonFile(t *testing.T, name string) http.HandlerFunc {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
}

func sseFile(t *testing.T, name string) http.HandlerFunc {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return sseRaw(string(b))
}

// sseRaw writes body as an event stream, flushing per event.
func sseRaw(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for ev := range strings.SplitAfterSeq(body, "\n\n") {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}
}

// sseChunks writes each chunk as a data event with the standard envelope,
// then the given tail (e.g. "data: [DONE]\n\n" or nothing).
func sseChunks(tail string, chunks ...string) http.HandlerFunc {
	var b strings.Builder
	for _, c := range chunks {
		fmt.Fprintf(&b, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"fake-model",%s}`+"\n\n", c)
	}
	b.WriteString(tail)
	return sseRaw(b.String())
}

const done = "data: [DONE]\n\n"

func status(code int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func newModel(t *testing.T, url string, mod ...func(*openaicompat.Config)) *openaicompat.Model {
	t.Helper()
	cfg := openaicompat.Config{
		BaseURL:        url + "/v1",
		APIKey:         "sk-test-secret-key",
		Model:          "fake-model",
		InitialBackoff: time.Millisecond,
		MaxBackoff:     5 * time.Millisecond,
	}
	for _, f := range mod {
		f(&cfg)
	}
	m, err := openaicompat.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var weatherTools = []llm.ToolDef{
	{Name: "get_weather", Description: "Weather of a city", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
	{Name: "get_time", Description: "Current time"},
}

func userRequest(text string) *llm.Request {
	return &llm.Request{
		Messages: []message.Message{message.NewRequest(message.UserText(text))},
		Tools:    weatherTools,
	}
}

func wantCalls(t *testing.T, resp *llm.Response, want ...message.ToolCall) {
	t.Helper()
	got := message.Message{Parts: resp.Parts}.ToolCalls()
	if len(got) != len(want) {
		t.Fatalf("tool calls = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("tool call %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

var (
	weatherCall = message.ToolCall{ToolName: "get_weather", ToolCallID: "call_0001", Args: `{"city":"Paris"}`}
	timeCall    = message.ToolCall{ToolName: "get_time", ToolCallID: "call_0002", Args: `{}`}
)

func TestGenerateParallelToolCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t, jsonFile(t, "parallel_tool_calls.json"))
	m := newModel(t, f.URL)
	resp, err := m.Generate(t.Context(), userRequest("weather and time?"))
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, resp, weatherCall, timeCall)
	if len(resp.Parts) != 2 {
		t.Errorf("parts = %+v, want only the two calls", resp.Parts)
	}
	if resp.Usage.InputTokens != 82 || resp.Usage.OutputTokens != 17 {
		t.Errorf("usage = %+v", resp.Usage)
	}
	if resp.ModelName != "fake-model" || resp.FinishReason != "tool_calls" {
		t.Errorf("model, finish = %q, %q", resp.ModelName, resp.FinishReason)
	}

	body := f.body(t, 0)
	if body["stream"] != false {
		t.Errorf("stream = %v, want false", body["stream"])
	}
	for _, k := range []string{"stream_options", "parallel_tool_calls", "tool_choice", "temperature"} {
		if _, ok := body[k]; ok {
			t.Errorf("%s sent: %v", k, body[k])
		}
	}
	if got := f.requests()[0].Header.Get("Authorization"); got != "Bearer sk-test-secret-key" {
		t.Errorf("Authorization = %q", got)
	}
}

func TestStreamParallelToolCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sseFile(t, "parallel_tool_calls.sse"))
	m := newModel(t, f.URL)
	var deltas []llm.Delta
	resp, err := m.Stream(t.Context(), userRequest("weather and time?"), func(d llm.Delta) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, resp, weatherCall, timeCall)
	if resp.Usage.InputTokens != 172 || resp.Usage.OutputTokens != 57 {
		t.Errorf("usage = %+v, want 172/57 from the final chunk", resp.Usage)
	}
	if resp.FinishReason != "tool_calls" {
		t.Errorf("finish = %q", resp.FinishReason)
	}

	// The first fragment of each call names it; later fragments carry
	// arguments only; concatenated per index they give the arguments.
	args := map[int]string{}
	for i, d := range deltas {
		if d.ToolCall == nil {
			t.Fatalf("delta %d without a tool call: %+v", i, d)
		}
		args[d.ToolCallIndex] += d.ToolCall.Args
	}
	if deltas[0].ToolCall.ToolCallID != "call_0001" || deltas[0].ToolCall.ToolName != "get_weather" {
		t.Errorf("first delta = %+v", deltas[0].ToolCall)
	}
	if args[0] != `{"city":"Paris"}` || args[1] != `{}` {
		t.Errorf("streamed args = %v", args)
	}

	body := f.body(t, 0)
	if body["stream"] != true {
		t.Errorf("stream = %v", body["stream"])
	}
	if _, ok := body["stream_options"]; ok {
		t.Errorf("stream_options = %v sent without StreamUsage", body["stream_options"])
	}
	if got := f.requests()[0].Header.Get("Accept"); got != "text/event-stream" {
		t.Errorf("Accept = %q", got)
	}
}

func TestStreamText(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sseChunks(done,
		`"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null`,
		`"choices":[{"index":0,"delta":{"content":"Hello "},"finish_reason":null}],"usage":null`,
		`"choices":[{"index":0,"delta":{"content":"world"},"finish_reason":null}],"usage":null`,
		`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null`,
		`"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}`,
	))
	m := newModel(t, f.URL)
	var text []string
	resp, err := m.Stream(t.Context(), userRequest("hi"), func(d llm.Delta) { text = append(text, d.Text) })
	if err != nil {
		t.Fatal(err)
	}
	if got := (message.Message{Parts: resp.Parts}).Text(); got != "Hello world" {
		t.Errorf("text = %q", got)
	}
	if strings.Join(text, "|") != "Hello |world" {
		t.Errorf("deltas = %q", text)
	}
	if resp.Usage != (message.Usage{InputTokens: 5, OutputTokens: 2}) || resp.FinishReason != "stop" {
		t.Errorf("usage, finish = %+v, %q", resp.Usage, resp.FinishReason)
	}
}

func TestStreamQuirks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		chunks   []string
		want     []message.ToolCall
		wantText string
	}{
		{
			name: "ollama: whole calls, all at index 0, role repeated",
			chunks: []string{
				`"choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"call_0001","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"call_0002","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"tool_calls"}]`,
			},
			want: []message.ToolCall{weatherCall, timeCall},
		},
		{
			name: "ollama: index missing",
			chunks: []string{
				`"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_0001","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_0002","type":"function","function":{"name":"get_time"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`,
			},
			want: []message.ToolCall{weatherCall, timeCall},
		},
		{
			name: "interleaved indices after text, first index above 0",
			chunks: []string{
				`"choices":[{"index":0,"delta":{"content":"Let me check."},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_0001","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"call_0002","type":"function","function":{"name":"get_time","arguments":"{"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\""}},{"index":2,"function":{"arguments":"}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":\"Paris\"}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`,
			},
			want:     []message.ToolCall{weatherCall, timeCall},
			wantText: "Let me check.",
		},
		{
			name: "kimi behind ollama-like gateways: whole calls at index 0 sharing an id",
			chunks: []string{
				`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0001","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0001","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_0001","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`,
			},
			want: []message.ToolCall{weatherCall, {ToolName: "get_time", ToolCallID: "call_0001_2", Args: `{}`}, {ToolName: "get_time", ToolCallID: "call_0001_3", Args: `{}`}},
		},
		{
			name: "finish stop despite tool calls; empty arguments",
			chunks: []string{
				`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0002","type":"function","function":{"name":"get_time","arguments":""}}]},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`,
			},
			want: []message.ToolCall{timeCall},
		},
		{
			name: "usage on the finish chunk, no usage chunk",
			chunks: []string{
				`"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]`,
				`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`,
			},
			wantText: "ok",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, sseChunks(done, tt.chunks...))
			m := newModel(t, f.URL)
			indexOf := map[string]int{}
			resp, err := m.Stream(t.Context(), userRequest("go"), func(d llm.Delta) {
				if d.ToolCall != nil && d.ToolCall.ToolCallID != "" {
					indexOf[d.ToolCall.ToolCallID] = d.ToolCallIndex
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			wantCalls(t, resp, tt.want...)
			if got := (message.Message{Parts: resp.Parts}).Text(); got != tt.wantText {
				t.Errorf("text = %q, want %q", got, tt.wantText)
			}
			if len(indexOf) != len(tt.want) {
				t.Errorf("delta indices = %v: want one distinct index per call", indexOf)
			}
			seen := map[int]bool{}
			for _, i := range indexOf {
				if seen[i] {
					t.Errorf("delta indices = %v: two calls share an index", indexOf)
				}
				seen[i] = true
			}
		})
	}
}

func TestStreamIncomplete(t *testing.T) {
	t.Parallel()
	chunks := []string{
		`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0001","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]`,
		`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]},"finish_reason":null}]`,
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"closed without [DONE] nor finish reason", sseChunks("", chunks...)},
		{"connection cut mid-body", func(w http.ResponseWriter, r *http.Request) {
			sseChunks("", chunks...)(w, r)
			_, _ = io.WriteString(w, `data: {"choices":[{"ind`)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.handler, tt.handler, tt.handler)
			m := newModel(t, f.URL, func(c *openaicompat.Config) { c.MaxRetries = 2 })
			var retries []llm.Retry
			req := userRequest("go")
			req.OnRetry = func(r llm.Retry) { retries = append(retries, r) }
			_, err := m.Stream(t.Context(), req, func(llm.Delta) {})
			if !errors.Is(err, llm.ErrIncomplete) {
				t.Fatalf("err = %v, want ErrIncomplete", err)
			}
			if n := len(f.requests()); n != 3 {
				t.Errorf("%d requests, want 3 (an incomplete stream is retried)", n)
			}
			if len(retries) != 2 || retries[0].Attempt != 2 || retries[1].Attempt != 3 || retries[0].Reason == "" {
				t.Errorf("retries = %+v", retries)
			}
		})
	}
}

func TestStreamErrorEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sseRaw(
		`data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`+"\n\n"+
			`data: {"error":{"message":"The server is overloaded","type":"server_error","param":null,"code":"overloaded"}}`+"\n\n"))
	m := newModel(t, f.URL)
	_, err := m.Stream(t.Context(), userRequest("go"), nil)
	var apiErr *openaicompat.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	if apiErr.StatusCode != http.StatusOK || !apiErr.InBand || apiErr.Code != "overloaded" || apiErr.Type != "server_error" || apiErr.Message != "The server is overloaded" {
		t.Errorf("APIError = %+v", apiErr)
	}
}

const rateLimitBody = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`

func TestRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		first http.HandlerFunc
	}{
		{"429 with Retry-After 0", status(429, rateLimitBody, "Retry-After", "0")},
		{"429 with retry-after-ms", status(429, rateLimitBody, "Retry-After-Ms", "1")},
		{"500", status(500, `{"error":{"message":"boom","type":"server_error","code":null}}`)},
		{"503 without JSON", status(503, `upstream unavailable`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.first, jsonFile(t, "parallel_tool_calls.json"))
			m := newModel(t, f.URL)
			resp, err := m.Generate(t.Context(), userRequest("go"))
			if err != nil {
				t.Fatal(err)
			}
			wantCalls(t, resp, weatherCall, timeCall)
			reqs := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			if string(reqs[0].Body) != string(reqs[1].Body) {
				t.Errorf("retried body differs:\n%s\n%s", reqs[0].Body, reqs[1].Body)
			}
		})
	}
}

func TestRetryStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, status(429, rateLimitBody, "Retry-After", "0"), sseFile(t, "parallel_tool_calls.sse"))
	m := newModel(t, f.URL)
	resp, err := m.Stream(t.Context(), userRequest("go"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, resp, weatherCall, timeCall)
}

func TestRateLimitedAfterRetries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, status(429, rateLimitBody, "Retry-After", "0.002"))
	m := newModel(t, f.URL, func(c *openaicompat.Config) { c.MaxRetries = 2 })
	_, err := m.Generate(t.Context(), userRequest("go"))
	if !errors.Is(err, openaicompat.ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited", err)
	}
	var apiErr *openaicompat.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("err = %#v", err)
	}
	if apiErr.RetryAfter != 2*time.Millisecond {
		t.Errorf("RetryAfter = %v, want 2ms", apiErr.RetryAfter)
	}
	if n := len(f.requests()); n != 3 {
		t.Errorf("%d requests, want 1 + 2 retries", n)
	}
}

func TestNoRetryOnClientErrors(t *testing.T) {
	t.Parallel()
	const key = "sk-test-secret-key"
	tests := []struct {
		name         string
		code         int
		body         string
		unauthorized bool
	}{
		{"401", 401, `{"error":{"message":"Incorrect API key provided: ` + key + `","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, true},
		{"403", 403, `{"error":{"message":"forbidden","type":"invalid_request_error","code":"unsupported_country"}}`, true},
		{"400", 400, `{"error":{"message":"bad tools","type":"invalid_request_error","param":"tools","code":null}}`, false},
		{"404 plain", 404, `not found`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, status(tt.code, tt.body))
			m := newModel(t, f.URL)
			_, err := m.Generate(t.Context(), userRequest("go"))
			var apiErr *openaicompat.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.code {
				t.Fatalf("err = %v, want *APIError %d", err, tt.code)
			}
			if errors.Is(err, openaicompat.ErrUnauthorized) != tt.unauthorized {
				t.Errorf("errors.Is(ErrUnauthorized) = %v", !tt.unauthorized)
			}
			if errors.Is(err, openaicompat.ErrRateLimited) {
				t.Error("matches ErrRateLimited")
			}
			if strings.Contains(err.Error(), key) || strings.Contains(fmt.Sprintf("%+v", apiErr), key) {
				t.Errorf("error reveals the key: %v", err)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests, want no retry", n)
			}
		})
	}
}

func TestRetryWaitHonoursContext(t *testing.T) {
	t.Parallel()
	answered := make(chan struct{})
	var once sync.Once
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		status(429, rateLimitBody, "Retry-After", "30")(w, r)
		once.Do(func() { close(answered) })
	})
	m := newModel(t, f.URL, func(c *openaicompat.Config) { c.MaxBackoff = time.Minute })
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, userRequest("go"))
		errc <- err
	}()
	<-answered // the first attempt was answered: the client waits 30s
	cancel()
	err := offloadtest.WaitOrTimeout(t, errc, "Generate to return after cancel")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestTransportErrorRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, jsonFile(t, "parallel_tool_calls.json"))
	calls := 0
	doer := doerFunc(func(r *http.Request) (*http.Response, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("connection reset by peer")
		}
		return http.DefaultClient.Do(r)
	})
	m := newModel(t, f.URL, func(c *openaicompat.Config) { c.HTTPClient = doer })
	if _, err := m.Generate(t.Context(), userRequest("go")); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("%d attempts, want 2", calls)
	}
}

type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

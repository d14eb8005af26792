package openaitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// RecordedRequest is a request the server received.
type RecordedRequest struct {
	// Method and Path are the HTTP method and URL path.
	Method, Path string
	// Header holds the request headers.
	Header http.Header
	// Body is the raw request body (JSON for chat completions).
	Body []byte
}

// Option configures a [Server].
type Option func(*Server)

// WithAPIKey makes the server answer 401 (invalid_api_key) to requests
// without "Authorization: Bearer key".
func WithAPIKey(key string) Option { return func(s *Server) { s.apiKey = key } }

// WithFragmentSize sets the size in bytes of the streamed tool-call argument
// fragments (default 4).
func WithFragmentSize(n int) Option {
	return func(s *Server) {
		if n > 0 {
			s.fragment = n
		}
	}
}

// Server is a fake OpenAI-compatible HTTP server backed by an [llm.Model].
//
// It serves POST /v1/chat/completions (JSON and SSE streams) and
// GET /v1/models, validates requests as strictly as OpenAI does (answering
// 400 to what strict servers reject), converts them back into an
// [llm.Request] for the wrapped model, and renders its answer the way
// OpenAI does. It records every request.
type Server struct {
	model    llm.Model
	srv      *httptest.Server
	apiKey   string
	fragment int

	mu       sync.Mutex
	requests []RecordedRequest
	seq      int
	failures []failure
}

type failure struct {
	status     int
	retryAfter string
}

// NewServer starts a server on a loopback port that answers with m. Close
// it when done.
func NewServer(m llm.Model, opts ...Option) *Server {
	s := &Server{model: m, fragment: 4}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.models)
	s.srv = httptest.NewServer(s.record(mux))
	return s
}

// URL returns the base URL clients use, ending in /v1.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close shuts the server down, closing open connections.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RecordedRequest, len(s.requests))
	copy(out, s.requests)
	return out
}

// FailNext makes the next n chat completion requests fail with status and
// an OpenAI error body (429 answers carry Retry-After: retryAfter when it is
// non-empty). It lets tests exercise client retries.
func (s *Server) FailNext(n, status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, failure{status: status, retryAfter: retryAfter})
	}
}

func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil {
			writeError(w, &apiError{status: 400, Message: "cannot read body", Type: "invalid_request_error"})
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, RecordedRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if s.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+s.apiKey {
			writeError(w, &apiError{status: 401, Message: "Incorrect API key provided.", Type: "invalid_request_error", Code: "invalid_api_key"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) nextID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return fmt.Sprintf("%s%04d", prefix, s.seq)
}

func (s *Server) popFailure() (failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failures) == 0 {
		return failure{}, false
	}
	f := s.failures[0]
	s.failures = s.failures[1:]
	return f, true
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "list",
		"data":   []any{map[string]any{"id": s.model.Name(), "object": "model", "created": 0, "owned_by": "fake"}},
	})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	if f, ok := s.popFailure(); ok {
		e := &apiError{status: f.status, Message: http.StatusText(f.status), Type: "server_error", Code: "server_error"}
		if f.status == http.StatusTooManyRequests {
			e.Type, e.Code, e.Message = "requests", "rate_limit_exceeded", "Rate limit reached."
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
		}
		writeError(w, e)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, badRequest("", "invalid JSON body: %v", err))
		return
	}
	if apiErr := req.validate(); apiErr != nil {
		writeError(w, apiErr)
		return
	}
	lreq, err := req.toLLM()
	if err != nil {
		writeError(w, badRequest("messages", "%v", err))
		return
	}
	r.Body.Close()
	if req.Stream {
		s.stream(r.Context(), w, &req, lreq)
		return
	}
	resp, err := s.model.Generate(r.Context(), lreq)
	if err != nil {
		writeError(w, modelError(err))
		return
	}
	s.writeCompletion(w, &req, resp)
}

func modelError(err error) *apiError {
	return &apiError{status: 500, Message: "model: " + err.Error(), Type: "server_error", Code: "server_error"}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// Output types.

type outFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type outToolCall struct {
	Index        *int            `json:"index,omitempty"`
	ID           string          `json:"id,omitempty"`
	Type         string          `json:"type,omitempty"`
	Function     outFunction     `json:"function"`
	ExtraContent json.RawMessage `json:"extra_content,omitempty"`
}

type outUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(u message.Usage) outUsage {
	return outUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
}

// limitCalls keeps only the first tool call when parallel calls are off.
func limitCalls(req *chatRequest, calls []message.ToolCall) []message.ToolCall {
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls && len(calls) > 1 {
		return calls[:1]
	}
	return calls
}

func finishReason(resp *llm.Response, hasCalls bool) string {
	switch {
	case resp.FinishReason != "":
		return resp.FinishReason
	case hasCalls:
		return "tool_calls"
	default:
		return "stop"
	}
}

func (s *Server) modelName(req *chatRequest, resp *llm.Response) string {
	if resp != nil && resp.ModelName != "" {
		return resp.ModelName
	}
	return req.Model
}

func (s *Server) callID(c message.ToolCall) string {
	if c.ToolCallID != "" {
		return c.ToolCallID
	}
	return s.nextID("call_")
}

func (s *Server) writeCompletion(w http.ResponseWriter, req *chatRequest, resp *llm.Response) {
	type msg struct {
		Role             string        `json:"role"`
		Content          *string       `json:"content"`
		Refusal          *string       `json:"refusal"`
		ReasoningContent string        `json:"reasoning_content,omitempty"`
		ToolCalls        []outToolCall `json:"tool_calls,omitempty"`
	}
	m := msg{Role: "assistant"}
	all := message.Message{Parts: resp.Parts}
	m.ReasoningContent = all.Thinking()
	if text := all.Text(); text != "" {
		m.Content = &text
	}
	calls := limitCalls(req, all.ToolCalls())
	for _, c := range calls {
		m.ToolCalls = append(m.ToolCalls, outToolCall{
			ID: s.callID(c), Type: "function",
			Function:     outFunction{Name: c.ToolName, Arguments: string(c.ArgsJSON())},
			ExtraContent: extraOf(c),
		})
	}
	body := map[string]any{
		"id":      s.nextID("chatcmpl-fake"),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   s.modelName(req, resp),
		"choices": []any{map[string]any{
			"index":         0,
			"message":       m,
			"logprobs":      nil,
			"finish_reason": finishReason(resp, len(calls) > 0),
		}},
		"usage":              usageOf(resp.Usage),
		"system_fingerprint": "fp_fake",
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", s.nextID("req_"))
	_ = json.NewEncoder(w).Encode(body)
}

// sse writes one stream: chunks as single-line "data:" events, flushed one
// by one.
type sse struct {
	s       *Server
	w       http.ResponseWriter
	req     *chatRequest
	id      string
	created int64
	model   string
	started bool

	sentText     bool
	sentThinking bool
	sentCalls    bool
	firstCall    int // the only index kept when parallel calls are off; -1 before any
	callIDs      map[int]string
}

type chunkDelta struct {
	Role             string        `json:"role,omitempty"`
	Content          *string       `json:"content,omitempty"`
	ReasoningContent string        `json:"reasoning_content,omitempty"`
	ToolCalls        []outToolCall `json:"tool_calls,omitempty"`
}

// extraOf returns a call's provider fields, rendered as extra_content.
func extraOf(c message.ToolCall) json.RawMessage {
	if c.ProviderExtra == "" || !json.Valid([]byte(c.ProviderExtra)) {
		return nil
	}
	return json.RawMessage(c.ProviderExtra)
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

func (e *sse) start() {
	if e.started {
		return
	}
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Request-Id", e.s.nextID("req_"))
	e.w.WriteHeader(http.StatusOK)
	empty := ""
	e.choice(chunkDelta{Role: "assistant", Content: &empty}, nil)
}

func (e *sse) write(v any) {
	b, _ := json.Marshal(v)
	_, _ = fmt.Fprintf(e.w, "data: %s\n\n", b)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (e *sse) choice(d chunkDelta, finish *string) {
	c := chunk{
		ID: e.id, Object: "chat.completion.chunk", Created: e.created, Model: e.model,
		SystemFingerprint: "fp_fake",
		Choices:           []chunkChoice{{Delta: d, FinishReason: finish}},
	}
	if e.includeUsage() {
		c.Usage = json.RawMessage("null")
	}
	e.write(c)
}

func (e *sse) includeUsage() bool {
	return e.req.StreamOptions != nil && e.req.StreamOptions.IncludeUsage
}

// text streams text one word per chunk.
func (e *sse) text(s string) {
	e.start()
	for _, w := range strings.SplitAfter(s, " ") {
		if w == "" {
			continue
		}
		e.choice(chunkDelta{Content: &w}, nil)
	}
	e.sentText = true
}

// thinking streams reasoning as one reasoning_content chunk.
func (e *sse) thinking(s string) {
	e.start()
	e.choice(chunkDelta{ReasoningContent: s}, nil)
	e.sentThinking = true
}

// call streams a tool call fragment: a new call's ID, type and name (and
// provider fields), then its arguments in small fragments.
func (e *sse) call(index int, id, name, args string, extra json.RawMessage) {
	if e.req.ParallelToolCalls != nil && !*e.req.ParallelToolCalls {
		if e.firstCall == -1 {
			e.firstCall = index
		}
		if index != e.firstCall {
			return
		}
	}
	e.start()
	e.sentCalls = true
	if _, known := e.callIDs[index]; !known || (id != "" && id != e.callIDs[index]) {
		if id == "" {
			id = e.s.nextID("call_")
		}
		e.callIDs[index] = id
		e.choice(chunkDelta{ToolCalls: []outToolCall{{
			Index: &index, ID: id, Type: "function",
			Function: outFunction{Name: name}, ExtraContent: extra,
		}}}, nil)
	}
	for len(args) > 0 {
		n := min(e.s.fragment, len(args))
		e.choice(chunkDelta{ToolCalls: []outToolCall{{
			Index: &index, Function: outFunction{Arguments: args[:n]},
		}}}, nil)
		args = args[n:]
	}
}

func (s *Server) stream(ctx context.Context, w http.ResponseWriter, req *chatRequest, lreq *llm.Request) {
	e := &sse{
		s: s, w: w, req: req, id: s.nextID("chatcmpl-fake"), created: time.Now().Unix(),
		model: req.Model, firstCall: -1, callIDs: map[int]string{},
	}
	resp, err := s.model.Stream(ctx, lreq, func(d llm.Delta) {
		if d.Thinking != "" {
			e.thinking(d.Thinking)
		}
		if d.Text != "" {
			e.text(d.Text)
		}
		if d.ToolCall != nil {
			e.call(d.ToolCallIndex, d.ToolCall.ToolCallID, d.ToolCall.ToolName, d.ToolCall.Args, extraOf(*d.ToolCall))
		}
	})
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return // the client went away
		}
		apiErr := modelError(err)
		if !e.started {
			writeError(w, apiErr)
			return
		}
		e.write(map[string]any{"error": apiErr})
		return
	}
	if resp.ModelName != "" {
		e.model = resp.ModelName
	}
	// Render what the model did not stream.
	msg := message.Message{Parts: resp.Parts}
	if !e.sentThinking && msg.Thinking() != "" {
		e.thinking(msg.Thinking())
	}
	if !e.sentText && msg.Text() != "" {
		e.text(msg.Text())
	}
	calls := msg.ToolCalls()
	if !e.sentCalls {
		for i, c := range calls {
			e.call(i, c.ToolCallID, c.ToolName, string(c.ArgsJSON()), extraOf(c))
		}
	}
	e.start()
	finish := finishReason(resp, len(calls) > 0)
	e.choice(chunkDelta{}, &finish)
	if e.includeUsage() {
		u, _ := json.Marshal(usageOf(resp.Usage))
		e.write(chunk{
			ID: e.id, Object: "chat.completion.chunk", Created: e.created, Model: e.model,
			SystemFingerprint: "fp_fake", Choices: []chunkChoice{}, Usage: u,
		})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

package openaicompat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/llm"
)

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// Defaults of [Config].
const (
	DefaultMaxRetries     = 3
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
)

// Config configures a [Model].
type Config struct {
	// BaseURL is the API root including /v1, e.g.
	// http://127.0.0.1:11434/v1. Default [DefaultBaseURL].
	BaseURL string
	// APIKey is sent as a bearer token when non-empty.
	APIKey Secret
	// Model is the model name sent with each request. Required.
	Model string
	// HTTPClient sends the requests; default a new http.Client. It needs
	// no timeout: IdleTimeout and the context bound each request.
	HTTPClient HTTPDoer
	// MaxRetries bounds the new attempts of a request answered 429 or 5xx,
	// failing in transport, or cut or silent before its response was
	// complete. 0 means DefaultMaxRetries; negative means none.
	MaxRetries int
	// InitialBackoff is the first wait between attempts, doubled each time
	// (with jitter). Default DefaultInitialBackoff.
	InitialBackoff time.Duration
	// MaxBackoff caps a wait. A provider asking (Retry-After) for a longer
	// one is not retried. Default DefaultMaxBackoff.
	MaxBackoff time.Duration
	// IdleTimeout cuts an attempt when nothing arrives for that long:
	// waiting for the response headers, between stream chunks (keep-alive
	// comments count as something), or while reading a body. 0 means
	// DefaultIdleTimeout; negative means none. A non-streamed response
	// arrives only once complete: give slow models a longer one.
	IdleTimeout time.Duration
	// StreamUsage sends stream_options {"include_usage": true} with
	// streamed requests, for the token usage of streams. Some servers
	// reject the field; it is off by default.
	StreamUsage bool
	// ExtraBody holds fields added to every request body (e.g.
	// {"thinking": {"type": "enabled"}} for DeepSeek, chat_template_kwargs
	// for vLLM). It may not set model, messages, tools or stream.
	ExtraBody map[string]any
	// Logger receives retry warnings. Default: discard.
	Logger *slog.Logger

	// Provider quirks.

	// AlwaysSendContent sends "content":"" on messages without content
	// (assistant tool-call messages), for servers that require the key
	// (DeepSeek).
	AlwaysSendContent bool
	// UseMaxTokens sends Settings.MaxTokens as the legacy max_tokens field
	// (Ollama, llama.cpp) instead of max_completion_tokens.
	UseMaxTokens bool
	// ParallelToolCalls, when non-nil, is sent with every request that
	// offers tools and does not set Settings.ParallelToolCalls (llama.cpp
	// needs true to make parallel calls).
	ParallelToolCalls *bool
}

// LogValue implements slog.LogValuer: the configuration without the key.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.BaseURL),
		slog.String("model", c.Model),
		slog.Any("api_key", c.APIKey),
		slog.Int("max_retries", c.MaxRetries),
		slog.Duration("idle_timeout", c.IdleTimeout),
	)
}

// ConfigFromEnv returns a Config for model with the API key from
// OPENAI_API_KEY and the base URL from OPENAI_BASE_URL (if set).
func ConfigFromEnv(getenv func(string) string, model string) Config {
	return Config{
		BaseURL: strings.TrimSpace(getenv("OPENAI_BASE_URL")),
		APIKey:  Secret(strings.TrimSpace(getenv("OPENAI_API_KEY"))),
		Model:   model,
	}
}

// Model is an [llm.Model] served by an OpenAI-compatible endpoint. It is
// safe for concurrent use.
type Model struct {
	cfg  Config
	url  string
	http HTTPDoer
	log  *slog.Logger
}

var _ llm.Model = (*Model)(nil)

// ErrConfig is returned by [New] for an invalid configuration.
var ErrConfig = errors.New("openaicompat: invalid config")

// reservedBody are the request fields ExtraBody may not set.
var reservedBody = []string{"model", "messages", "tools", "stream"}

// New returns a Model for cfg.
func New(cfg Config) (*Model, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fmt.Errorf("%w: model name required", ErrConfig)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
		return nil, fmt.Errorf("%w: base URL %q is not an http(s) URL", ErrConfig, cfg.BaseURL)
	}
	for _, k := range reservedBody {
		if _, ok := cfg.ExtraBody[k]; ok {
			return nil, fmt.Errorf("%w: extra body may not set %q", ErrConfig, k)
		}
	}
	if _, err := json.Marshal(cfg.ExtraBody); err != nil {
		return nil, fmt.Errorf("%w: extra body: %w", ErrConfig, err)
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	switch {
	case cfg.IdleTimeout == 0:
		cfg.IdleTimeout = DefaultIdleTimeout
	case cfg.IdleTimeout < 0:
		cfg.IdleTimeout = 0
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.InitialBackoff)
	m := &Model{cfg: cfg, url: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions", http: cfg.HTTPClient, log: cfg.Logger}
	if m.http == nil {
		m.http = &http.Client{}
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m, nil
}

// Name implements [llm.Model]: the configured model name.
func (m *Model) Name() string { return m.cfg.Model }

// Generate implements [llm.Model] with a non-streamed request. A 200 body
// holding an error object is an error, never an answer.
func (m *Model) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	body, err := m.encodeRequest(req, false)
	if err != nil {
		return nil, err
	}
	return m.do(ctx, req, func(a *attempt) (*llm.Response, error) {
		resp, err := m.send(a, body, false)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, m.bodyError(a, "response", err)
		}
		var c wireChunk
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("openaicompat: status %d, malformed response body: %w: %s", resp.StatusCode, err, clipMessage(m.cfg.APIKey.redact(string(raw))))
		}
		acc := newAccumulator(req.Messages)
		acc.add(&c, nil)
		if apiErr := acc.failure(m.cfg.APIKey); apiErr != nil {
			return nil, apiErr
		}
		if len(c.Choices) == 0 {
			return nil, fmt.Errorf("openaicompat: status %d, response has no choices: %w", resp.StatusCode, llm.ErrIncomplete)
		}
		return acc.response(m.cfg.Model), nil
	})
}

// Stream implements [llm.Model]. onDelta receives text, thinking and
// tool-call fragments (the first fragment of a call carries its ID and
// name) numbered by order of arrival.
//
// The response is complete at "data: [DONE]", or at the end of the body
// after a finish reason. A stream that ends otherwise, or is silent for
// the idle timeout, is retried (req.OnRetry is told; the deltas already
// delivered are void). An error object in a chunk, or finish_reason
// "error", fails the request.
func (m *Model) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	body, err := m.encodeRequest(req, true)
	if err != nil {
		return nil, err
	}
	return m.do(ctx, req, func(a *attempt) (*llm.Response, error) {
		resp, err := m.send(a, body, true)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		acc := newAccumulator(req.Messages)
		r := newSSEReader(resp.Body)
		for {
			data, err := r.next()
			switch {
			case errors.Is(err, errDone):
				return acc.response(m.cfg.Model), nil
			case errors.Is(err, io.EOF) && acc.finished():
				return acc.response(m.cfg.Model), nil
			case errors.Is(err, io.EOF):
				return nil, &retryableError{
					reason: "stream ended before the response was complete",
					err:    fmt.Errorf("openaicompat: stream ended without a finish reason nor [DONE]: %w", llm.ErrIncomplete),
				}
			case err != nil:
				return nil, m.bodyError(a, "stream", err)
			}
			var c wireChunk
			if err := json.Unmarshal(data, &c); err != nil {
				return nil, fmt.Errorf("openaicompat: malformed stream chunk: %w: %s", err, clipMessage(m.cfg.APIKey.redact(string(data))))
			}
			acc.add(&c, onDelta)
			if apiErr := acc.failure(m.cfg.APIKey); apiErr != nil {
				return nil, apiErr
			}
		}
	})
}

// bodyError classifies a failure to read a response body: silence, the
// caller's cancellation, or a cut connection (retryable).
func (m *Model) bodyError(a *attempt, what string, err error) error {
	switch {
	case a.idled():
		return a.idleError(what)
	case a.ctx.Err() != nil:
		return fmt.Errorf("openaicompat: %w", a.ctx.Err())
	}
	msg := m.cfg.APIKey.redact(err.Error())
	if errors.Is(err, errCut) {
		msg = "the connection was cut in the middle of an event"
	}
	return &retryableError{
		reason: what + " cut: " + msg,
		err:    fmt.Errorf("openaicompat: %s cut before the response was complete: %s: %w", what, msg, llm.ErrIncomplete),
	}
}

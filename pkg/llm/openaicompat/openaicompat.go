package openaicompat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/offload-dev/offload/pkg/llm"
)

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// Defaults for the retry settings of [Config].
const (
	DefaultMaxRetries     = 3
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
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
	// HTTPClient sends the requests; default a new http.Client. It carries
	// no timeout by default: use context deadlines per call.
	HTTPClient HTTPDoer
	// MaxRetries bounds the retries of a request answered 429 or 5xx, or
	// failing in transport. 0 means DefaultMaxRetries; negative means none.
	MaxRetries int
	// InitialBackoff is the first wait between retries, doubled each time
	// (with jitter). Default DefaultInitialBackoff.
	InitialBackoff time.Duration
	// MaxBackoff caps a wait, including one asked for by Retry-After.
	// Default DefaultMaxBackoff.
	MaxBackoff time.Duration
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
	// EmptyMessagesLimit is how many non-data lines a stream may send in a
	// row (keep-alive comments); 0 keeps go-openai's default (300).
	EmptyMessagesLimit uint
}

// LogValue implements slog.LogValuer: the configuration without the key.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.BaseURL),
		slog.String("model", c.Model),
		slog.Any("api_key", c.APIKey),
		slog.Int("max_retries", c.MaxRetries),
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
	cfg    Config
	client *openai.Client
	log    *slog.Logger
}

var _ llm.Model = (*Model)(nil)

// ErrConfig is returned by [New] for an invalid configuration.
var ErrConfig = errors.New("openaicompat: invalid config")

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
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.InitialBackoff)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var next HTTPDoer = cfg.HTTPClient
	if next == nil {
		next = &http.Client{}
	}
	oc := openai.DefaultConfig(string(cfg.APIKey))
	oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.EmptyMessagesLimit > 0 {
		oc.EmptyMessagesLimit = cfg.EmptyMessagesLimit
	}
	oc.HTTPClient = &retryDoer{
		next:              next,
		maxRetries:        cfg.MaxRetries,
		initialBackoff:    cfg.InitialBackoff,
		maxBackoff:        cfg.MaxBackoff,
		alwaysSendContent: cfg.AlwaysSendContent,
		log:               log,
		model:             cfg.Model,
	}
	return &Model{cfg: cfg, client: openai.NewClientWithConfig(oc), log: log}, nil
}

// Name implements [llm.Model]: the configured model name.
func (m *Model) Name() string { return m.cfg.Model }

func (m *Model) modelName(reported string) string {
	if reported != "" {
		return reported
	}
	return m.cfg.Model
}

// Generate implements [llm.Model].
func (m *Model) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	creq, err := m.buildRequest(req, false)
	if err != nil {
		return nil, err
	}
	ctx, info := withCallInfo(ctx)
	resp, err := m.client.CreateChatCompletion(ctx, creq)
	if err != nil {
		return nil, m.wrapErr(ctx, "chat completion", err, info)
	}
	return m.convertResponse(resp)
}

// Stream implements [llm.Model]. onDelta receives text fragments and
// tool-call fragments (the first fragment of a call carries its ID and
// name) numbered by order of arrival.
func (m *Model) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	creq, err := m.buildRequest(req, true)
	if err != nil {
		return nil, err
	}
	ctx, info := withCallInfo(ctx)
	stream, err := m.client.CreateChatCompletionStream(ctx, creq)
	if err != nil {
		return nil, m.wrapErr(ctx, "chat completion stream", err, info)
	}
	defer stream.Close()
	acc := newAccumulator()
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if !acc.finished() {
				return nil, fmt.Errorf("openaicompat: stream ended without a finish reason: %w", llm.ErrIncomplete)
			}
			return acc.response(m.cfg.Model), nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("openaicompat: stream: %w", ctx.Err())
			}
			if apiErr := toAPIError(err, m.cfg.APIKey, nil); apiErr != nil {
				return nil, apiErr
			}
			// A connection cut mid-body (unexpected EOF, reset).
			return nil, fmt.Errorf("openaicompat: stream: %w: %w", llm.ErrIncomplete, err)
		}
		acc.add(chunk, onDelta)
	}
}

// wrapErr converts a go-openai error for the caller.
func (m *Model) wrapErr(ctx context.Context, op string, err error, info *callInfo) error {
	if ctx.Err() == nil {
		if apiErr := toAPIError(err, m.cfg.APIKey, info); apiErr != nil {
			return apiErr
		}
	}
	return fmt.Errorf("openaicompat: %s: %w", op, err)
}

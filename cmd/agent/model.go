package main

import (
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/modelref"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
)

// modelFlags are the model transport flags of SPEC §6.1 and the
// model_settings of --spec.
type modelFlags struct {
	// stream, idleTimeout and retries are flags (and model_settings).
	stream      bool
	idleTimeout time.Duration
	retries     int
	// The rest comes from model_settings only.
	streamUsage       *bool // nil: on for OpenAI itself, off elsewhere
	temperature       *float64
	maxTokens         int
	parallelToolCalls *bool
	extraBody         map[string]any
	// logger receives the adapter's retry warnings.
	logger *slog.Logger
}

// Defaults of the model transport flags.
const (
	defaultIdleTimeout  = 60 * time.Second
	defaultModelRetries = 3
)

// register adds --stream, --model-idle-timeout and --model-retries.
func (mf *modelFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&mf.stream, "stream", true, "stream model responses (--stream=false for servers that stream badly)")
	fl.DurationVar(&mf.idleTimeout, "model-idle-timeout", defaultIdleTimeout, "cut and retry a model response silent that long (0: never)")
	fl.IntVar(&mf.retries, "model-retries", defaultModelRetries, "new attempts of a model request after a 429, a 5xx, or a cut or silent response (0: none)")
}

// validate checks the values of the flags.
func (mf *modelFlags) validate() error {
	switch {
	case mf.idleTimeout < 0:
		return usageErr("--model-idle-timeout must not be negative")
	case mf.retries < 0:
		return usageErr("--model-retries must not be negative")
	case mf.maxTokens < 0:
		return usageErr("model_settings.max_tokens must not be negative")
	}
	return nil
}

// settings returns the request settings of model_settings.
func (mf *modelFlags) settings() llm.Settings {
	return llm.Settings{Temperature: mf.temperature, MaxTokens: mf.maxTokens, ParallelToolCalls: mf.parallelToolCalls}
}

// openAI adjusts the adapter's configuration to the flags.
func (mf *modelFlags) openAI(getenv func(string) string) func(*openaicompat.Config) {
	return func(cfg *openaicompat.Config) {
		cfg.MaxRetries, cfg.IdleTimeout = mf.retries, mf.idleTimeout
		if mf.retries == 0 {
			cfg.MaxRetries = -1 // none; the adapter reads 0 as its default
		}
		if mf.idleTimeout == 0 {
			cfg.IdleTimeout = -1
		}
		// Usage in streams (stream_options) is asked of OpenAI itself, which
		// supports it; other servers get it only when model_settings says so,
		// since some reject the field.
		cfg.StreamUsage = getenv("OPENAI_BASE_URL") == ""
		if mf.streamUsage != nil {
			cfg.StreamUsage = *mf.streamUsage
		}
		cfg.ExtraBody, cfg.Logger = mf.extraBody, mf.logger
	}
}

// testModelArgs are the test model's arguments for the built-in tools
// whose generated ones would show nothing: a sleep that takes visible
// time (with progress) and a note with a name and a sentence.
func testModelArgs() map[string]json.RawMessage {
	return map[string]json.RawMessage{
		"sleep":      json.RawMessage(`{"seconds":3,"message":"rested"}`),
		"write_file": json.RawMessage(`{"path":"note.txt","content":"A note written by the offload test model.\n"}`),
	}
}

// newModel builds the model named by --model: openai:NAME, test or
// script:FILE (see modelref). tools restricts the test model's calls; mf
// configures the transport of openai models (the others have none).
func newModel(ref string, getenv func(string) string, tools []string, mf *modelFlags) (llm.Model, error) {
	if err := mf.validate(); err != nil {
		return nil, err
	}
	m, err := modelref.New(ref, modelref.Options{Getenv: getenv, OpenAI: mf.openAI(getenv),
		Test: testmodel.Config{CallTools: tools, Prose: true, Args: testModelArgs()}})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return m, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

package agentproc

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/modelref"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
)

// ModelOptions name an agent's model and its transport (SPEC §6.1).
type ModelOptions struct {
	// Ref names the model (modelref: openai:NAME, test, script:FILE).
	Ref string
	// Getenv reads the environment (OPENAI_API_KEY, OPENAI_BASE_URL).
	Getenv func(string) string
	// Spec, if set, adjusts the OpenAI-compatible client (its
	// model_settings).
	Spec *agentspec.Spec
	// Retries are the new attempts of a request after a 429, a 5xx, or
	// a cut or silent response (0: none).
	Retries int
	// IdleTimeout cuts and retries a response silent that long (0:
	// never).
	IdleTimeout time.Duration
	// Logger receives the adapter's retry warnings.
	Logger *slog.Logger
}

// Model builds the model of o: the test model calls every tool it is
// offered, with visible arguments for the built-in tools whose generated
// ones would show nothing; an OpenAI-compatible model is called with o's
// transport and the spec's settings.
func Model(o ModelOptions) (llm.Model, error) {
	return modelref.New(o.Ref, modelref.Options{Getenv: o.Getenv,
		Test: testmodel.Config{Prose: true, Args: testModelArgs()},
		OpenAI: func(cfg *openaicompat.Config) {
			cfg.MaxRetries, cfg.IdleTimeout, cfg.Logger = o.Retries, o.IdleTimeout, o.Logger
			if o.Retries == 0 {
				cfg.MaxRetries = -1 // none; the adapter reads 0 as its default
			}
			if o.IdleTimeout == 0 {
				cfg.IdleTimeout = -1
			}
			o.Spec.AdjustOpenAI(cfg, o.Getenv("OPENAI_BASE_URL"))
		}})
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

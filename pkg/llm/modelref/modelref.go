// Package modelref builds a model from its reference, the string that
// names a model on offload's command line and in an agent's spec
// (SPEC §6.1): openai:NAME (an OpenAI-compatible server, configured from
// the environment: OPENAI_API_KEY, OPENAI_BASE_URL), test (the built-in
// test model) or script:FILE (a scripted model, see package script).
package modelref

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
)

// ErrInvalid is wrapped by the error of a reference that names no model.
var ErrInvalid = errors.New("modelref: invalid model reference")

// Default returns the default reference: openai:gpt-4o-mini when
// OPENAI_API_KEY is set, else test. getenv defaults to os.Getenv.
func Default(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if getenv("OPENAI_API_KEY") != "" {
		return "openai:gpt-4o-mini"
	}
	return "test"
}

// Options configure [New].
type Options struct {
	// Getenv reads the OPENAI_* variables of openai:NAME. Defaults to
	// os.Getenv.
	Getenv func(string) string
	// Test is the test model's configuration (reference test).
	Test testmodel.Config
	// OpenAI, when set, adjusts the adapter's configuration of
	// openai:NAME after it was read from the environment
	// (openaicompat.ConfigFromEnv): retries, timeouts, extra fields.
	OpenAI func(*openaicompat.Config)
}

// New builds the model ref names. A reference that names no model (an
// unknown scheme, openai: without a name, script: without a file) is an
// error wrapping [ErrInvalid]; a script that does not load, or an OpenAI
// configuration the adapter refuses, is the error of package script or
// openaicompat.
func New(ref string, opts Options) (llm.Model, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	switch {
	case ref == "test":
		return testmodel.New(opts.Test), nil
	case strings.HasPrefix(ref, "script:"):
		path := strings.TrimPrefix(ref, "script:")
		if path == "" {
			return nil, fmt.Errorf("%w: script:FILE needs a file", ErrInvalid)
		}
		m, err := script.Load(path)
		if err != nil {
			return nil, err
		}
		return m, nil
	case strings.HasPrefix(ref, "openai:"):
		name := strings.TrimPrefix(ref, "openai:")
		if name == "" {
			return nil, fmt.Errorf("%w: openai:NAME needs a model name", ErrInvalid)
		}
		cfg := openaicompat.ConfigFromEnv(getenv, name)
		if opts.OpenAI != nil {
			opts.OpenAI(&cfg)
		}
		m, err := openaicompat.New(cfg)
		if err != nil {
			return nil, err
		}
		return m, nil
	default:
		return nil, fmt.Errorf("%w %q: use openai:NAME, test or script:FILE", ErrInvalid, ref)
	}
}

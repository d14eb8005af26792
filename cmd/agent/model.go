package main

import (
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
)

// defaultModel is openai:gpt-4o-mini when OPENAI_API_KEY is set, else the
// built-in test model.
func defaultModel(getenv func(string) string) string {
	if getenv("OPENAI_API_KEY") != "" {
		return "openai:gpt-4o-mini"
	}
	return "test"
}

// newModel builds the model named by --model: openai:NAME, test or
// script:FILE. tools restricts the test model's calls.
func newModel(spec string, getenv func(string) string, tools []string) (llm.Model, error) {
	switch {
	case spec == "test":
		return testmodel.New(testmodel.Config{CallTools: tools}), nil
	case strings.HasPrefix(spec, "script:"):
		path := strings.TrimPrefix(spec, "script:")
		if path == "" {
			return nil, usageErr("--model script:FILE needs a file")
		}
		m, err := script.Load(path)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		return m, nil
	case strings.HasPrefix(spec, "openai:"):
		name := strings.TrimPrefix(spec, "openai:")
		if name == "" {
			return nil, usageErr("--model openai:NAME needs a model name")
		}
		m, err := openaicompat.New(openaicompat.ConfigFromEnv(getenv, name))
		if err != nil {
			return nil, usageErr("%v", err)
		}
		return m, nil
	default:
		return nil, usageErr("unknown --model %q: use openai:NAME, test or script:FILE", spec)
	}
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

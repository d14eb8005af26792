package modelref_test

import (
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/llm/modelref"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
)

func TestDefault(t *testing.T) {
	t.Parallel()
	key := func(v string) func(string) string {
		return func(k string) string {
			if k == "OPENAI_API_KEY" {
				return v
			}
			return ""
		}
	}
	if got := modelref.Default(key("sk-x")); got != "openai:gpt-4o-mini" {
		t.Errorf("with a key: %q", got)
	}
	if got := modelref.Default(key("")); got != "test" {
		t.Errorf("without a key: %q", got)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	if m, err := modelref.New("test", modelref.Options{}); err != nil || m == nil {
		t.Fatalf("test: %v", err)
	}
	adjusted := false
	if _, err := modelref.New("openai:gpt-x", modelref.Options{Getenv: func(string) string { return "" },
		OpenAI: func(c *openaicompat.Config) { adjusted = c.Model == "gpt-x" }}); err != nil || !adjusted {
		t.Fatalf("openai: %v, adjusted %v", err, adjusted)
	}
	for _, ref := range []string{"", "gpt-4", "openai:", "script:"} {
		if _, err := modelref.New(ref, modelref.Options{}); !errors.Is(err, modelref.ErrInvalid) {
			t.Errorf("%q: err %v, want ErrInvalid", ref, err)
		}
	}
	if _, err := modelref.New("script:/nonexistent.yaml", modelref.Options{}); err == nil || errors.Is(err, modelref.ErrInvalid) {
		t.Errorf("a missing script: err %v, want the script's own", err)
	}
}

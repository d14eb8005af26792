package openaitest_test

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
)

// TestProvidersAreSourced: every fixture names its provider and shape and
// cites a public source; names are unique; an error fixture expects no
// calls; every fixture has a reply.
func TestProvidersAreSourced(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, fx := range openaitest.Providers() {
		if seen[fx.Name] || !strings.Contains(fx.Name, "/") {
			t.Errorf("fixture name %q duplicated or not provider/shape", fx.Name)
		}
		seen[fx.Name] = true
		if fx.Provider == "" || fx.Shape == "" || !strings.Contains(fx.Source, "https://") {
			t.Errorf("%s: provider %q, shape %q, source %q", fx.Name, fx.Provider, fx.Shape, fx.Source)
		}
		if len(fx.Replies) != 1+fx.Retries {
			t.Errorf("%s: %d replies for %d retries", fx.Name, len(fx.Replies), fx.Retries)
		}
		if len(fx.Err) > 0 && (len(fx.Calls) > 0 || fx.Text != "") {
			t.Errorf("%s: an error fixture expects an answer", fx.Name)
		}
	}
	if len(seen) < 20 {
		t.Errorf("%d fixtures", len(seen))
	}
}

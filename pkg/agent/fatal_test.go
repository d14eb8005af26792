package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/tool"
)

var errInfra = errors.New("the server is gone")

// A tool error marked fatal ends the run with it, inline or in the
// background; the model is not asked again.
func TestFatalToolErrorEndsTheRun(t *testing.T) {
	for _, bg := range []bool{false, true} {
		opts := []tool.Option{}
		if bg {
			opts = append(opts, tool.Meta(map[string]any{"background": true}))
		}
		broken := tool.Func("broken", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
			return "", tool.Fatal(errInfra)
		}, opts...)
		m := turns(calls(call("broken", "c1", "{}")), text("waiting"), text("never"))
		a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{})}}, broken)
		res, err := a.Run(context.Background(), "go", nil)
		var fe *tool.FatalError
		if !errors.Is(err, errInfra) || !errors.As(err, &fe) {
			t.Fatalf("background %v: err = %v", bg, err)
		}
		if agent.StatusOf(res, err) != agent.StatusFailed {
			t.Errorf("background %v: status %s", bg, agent.StatusOf(res, err))
		}
		// Inline: the first request only. In the background the outcome is
		// seen at the next boundary: before or after the model's turn on
		// the acknowledgement, never later.
		if n := len(m.Requests()); n < 1 || n > 2 || (!bg && n != 1) {
			t.Errorf("background %v: %d model requests", bg, n)
		}
	}
}

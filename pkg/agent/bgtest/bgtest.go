// Package bgtest is a reusable scenario suite for [background.Tools]:
// the upstream scenarios of pydantic-ai-harness's BackgroundTools tests
// (reference §8.7) and offload's acceptance scenarios, written once and run
// against every [background.Executor]. pkg/agent/background runs it with
// the in-process executor; natsjs runs it with workers serving the tools
// over JetStream.
//
// A [Harness] turns plain *tool.Tool values into a toolset and the
// executor that runs their background calls. The tools are gated on
// channels (no sleeps) and carry metadata background: true (or
// "optional") where the scenario needs it; scenarios never rely on the
// identity of tool values, so a harness may serve them from another
// goroutine or process. Every wait of the suite is bounded.
package bgtest

import (
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/tool"
)

// Timeout bounds every wait of a scenario: a run that does not return in
// time fails the scenario instead of hanging it.
const Timeout = offloadtest.Wait

// Harness provides the tools of a scenario and the executor of their
// background calls.
type Harness struct {
	// Name names the harness in failure messages.
	Name string
	// Remote is true when the tools run in another process (a worker):
	// scenarios in which a tool acts on the agent's run from inside
	// (RunContext.Cancel, Enqueue) skip themselves.
	Remote bool
	// New returns a toolset serving tools and the executor that runs their
	// background calls. It registers its own cleanup with t.
	New func(t *testing.T, tools ...*tool.Tool) (tool.Toolset, background.Executor)
}

// Run runs every scenario against h, each as a subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.fn(t, h)
		})
	}
}

// Scenarios returns the names of the scenarios, in order.
func Scenarios() []string {
	out := make([]string, len(scenarios))
	for i, sc := range scenarios {
		out[i] = sc.name
	}
	return out
}

type scenario struct {
	name string
	fn   func(t *testing.T, h Harness)
}

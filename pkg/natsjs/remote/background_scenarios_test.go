package remote_test

import (
	"slices"
	"testing"

	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/agent/bgtest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// The background-tool scenarios (timing, failures, cancellation, limits)
// against the JetStream executor: each scenario's tools are served by two
// worker replicas on an embedded server, the agent reaches them through the
// registry, and their background calls travel as tasks with mode
// background.
func TestBackgroundScenariosJetStream(t *testing.T) {
	bgtest.Run(t, bgtest.Harness{
		Name:   "jetstream",
		Remote: true,
		New: func(t *testing.T, tools ...*tool.Tool) (tool.Toolset, background.Executor) {
			b := setup(t)
			var names []string
			for _, x := range tools {
				names = append(names, x.Name)
			}
			if len(tools) > 0 {
				b.worker(t, worker.Config{ID: "bg-a", Tools: tools, Concurrency: 8})
				b.worker(t, worker.Config{ID: "bg-b", Tools: tools, Concurrency: 8})
			}
			d, _ := b.dispatcher(t, remote.DispatcherConfig{})
			ts := b.toolset(t, d, nil)
			slices.Sort(names)
			waitTools(t, ts, slices.Compact(names)...)
			return ts, ts.Executor(background.InProcessExecutor{})
		},
	})
}

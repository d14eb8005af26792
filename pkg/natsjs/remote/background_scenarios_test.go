package remote_test

import (
	"slices"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/bgtest"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
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
		New: func(t *testing.T, tools ...*tool.Tool) (tool.Toolset, agent.Executor) {
			srv := natstest.Start(t)
			var names []string
			for _, x := range tools {
				names = append(names, x.Name)
			}
			if len(tools) > 0 {
				jstest.StartWorker(t, srv, worker.Config{ID: "bg-a", Tools: tools, Concurrency: 8})
				jstest.StartWorker(t, srv, worker.Config{ID: "bg-b", Tools: tools, Concurrency: 8})
			}
			d, _ := jstest.StartDispatcher(t, srv, remote.DispatcherConfig{})
			ts := newRemote(t, srv, d, nil)
			slices.Sort(names)
			waitTools(t, ts, slices.Compact(names)...)
			return ts, ts.Executor(agent.InProcessExecutor{})
		},
	})
}

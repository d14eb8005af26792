package background

import (
	"context"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
)

// Call is a tool call that [Tools] runs in the background, handed to an
// [Executor].
type Call struct {
	// TaskID names the call on the wire, in events and in the texts the
	// model sees (a ULID minted by the capability). It stays the same when
	// the call is dispatched again.
	TaskID string
	// Attempt counts dispatches of the same task: 0 for the first.
	Attempt int
	// Call is the tool call: tool, call part, validated arguments and run
	// context.
	Call *agent.ToolCall
	// Run executes the call in this process: the rest of the
	// ToolCallWrapper chain. An executor that runs calls elsewhere (a
	// worker) may ignore it for the tools it serves.
	Run agent.ToolCallFunc
}

// Executor starts background calls: the seam between [Tools] and where the
// calls run. Two implementations exist: [InProcessExecutor] (goroutines)
// and natsjs/remote's, which hands the tools that workers serve to them as
// background tasks over JetStream. Package agent/bgtest holds the scenario
// suite every executor must pass.
type Executor interface {
	// Start starts call and returns without waiting for it to finish. ctx
	// is the run's context: it carries the run's values (the progress
	// reporter) but its end does not by itself stop the task; the caller
	// ends every task it started with Cancel or Detach. An error means
	// the call did not start.
	Start(ctx context.Context, call *Call) (agent.BackgroundTask, error)
}

// Attacher is an [Executor] that can take over a task an earlier run
// started and detached (a background task that outlived its process): the
// returned task reports its outcome as if this process had started it.
// Only a run whose executor is one keeps the calls tools hand off
// ([agent.Handoff]).
type Attacher interface {
	// Attach takes over task of the run described by info. ctx is as for
	// Start.
	Attach(ctx context.Context, info *agent.RunInfo, task deferred.PendingTask) (agent.BackgroundTask, error)
}

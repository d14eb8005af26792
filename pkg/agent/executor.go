package agent

import (
	"context"

	"github.com/offload-dev/offload/pkg/deferred"
)

// BackgroundCall is a tool call that BackgroundTools runs in the
// background, handed to an [Executor].
type BackgroundCall struct {
	// TaskID names the call on the wire, in events and in the texts the
	// model sees (a ULID minted by the agent). It stays the same when the
	// call is dispatched again.
	TaskID string
	// Attempt counts dispatches of the same task: 0 for the first.
	Attempt int
	// Call is the tool call: tool, call part, validated arguments and run
	// context.
	Call *ToolCall
	// Run executes the call in this process: the rest of the
	// ToolCallWrapper chain. An executor that runs calls elsewhere (a
	// worker) may ignore it for the tools it serves.
	Run ToolCallFunc
}

// Executor starts background calls. Two implementations exist: the
// in-process one of this package (goroutines) and natsjs's, which hands the
// tools that workers serve to them as background tasks over JetStream.
type Executor interface {
	// Start starts call and returns without waiting for it to finish. ctx
	// is the run's context: it carries the run's values (the progress
	// reporter) but its end does not by itself stop the task; the caller
	// ends every task it started with Cancel or Detach. An error means
	// the call did not start.
	Start(ctx context.Context, call *BackgroundCall) (BackgroundTask, error)
}

// BackgroundTask is a background call that an [Executor] started.
type BackgroundTask interface {
	// Done is closed once the outcome is known.
	Done() <-chan struct{}
	// Outcome returns what the call returned, as a [ToolCallFunc] would
	// (a value, or an error such as tool.ModelRetry or tool.ToolFailed).
	// It is valid once Done is closed.
	Outcome() (any, error)
	// Cancel asks the task to stop, giving reason (sent to a remote
	// worker). Done is closed once the task has stopped; its outcome is
	// then a cancellation unless it had finished first. It does not wait.
	Cancel(reason string)
	// Detach lets the task run on after the run ends (a pause, SIGTERM)
	// and releases what this process holds for it; its outcome is
	// delivered by a later run. Done may be closed by the detach: what
	// Outcome reports then is not the task's and is ignored (the task has
	// not finished: no background_task_finished event is emitted for it).
	// It reports false when the task cannot outlive the process
	// (in-process tasks): the caller cancels it then.
	Detach() bool
}

// Attacher is an [Executor] that can take over a task an earlier run
// started and detached (a background task that outlived its process): the
// returned task reports its outcome as if this process had started it.
type Attacher interface {
	// Attach takes over task of the run described by info. ctx is as for
	// Start.
	Attach(ctx context.Context, info *RunInfo, task deferred.PendingTask) (BackgroundTask, error)
}

// AdoptedTask is a background task of an earlier run handed to a new one
// (RunOptions.Background).
type AdoptedTask struct {
	// Task is the pending record's entry.
	Task deferred.PendingTask
	// Done is true when the task's outcome arrived while no run waited for
	// it; Value and Err are then what the call returned, as
	// [BackgroundTask.Outcome] reports it.
	Done  bool
	Value any
	Err   error
}

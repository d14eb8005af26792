package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/tool"
)

// This file holds the run's view of work that goes on elsewhere: a task's
// handle, the tasks an earlier run left, and the calls tools hand off when
// the run suspends. The capability that owns such work (package
// agent/background) keeps it through the hooks [HandoffKeeper] and
// [RunWrapper].

// BackgroundTask is a call that runs on outside the loop: started by an
// executor of package agent/background, waited for by one of its
// DeferredWaiters, or handed off by its tool ([Handoff]).
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

// Handoff is the error a tool returns when its run is suspending (see
// [Suspending]) while the call it was waiting for still runs elsewhere, a
// task on a worker, and can go on without this process. The run's
// [HandoffKeeper] keeps the call: in package agent/background it becomes
// a background task of the run, its tool result is the acknowledgement of
// a background call (SPEC §4), the suspended run lists it in
// Result.Background, and the run that continues the conversation delivers
// its outcome as a follow-up message, once.
type Handoff struct {
	// Task is the running call; the run owns it from now on (it detaches
	// it when it suspends, cancels it when it ends otherwise).
	Task BackgroundTask
	// TaskID and Attempt name the call's task on the wire.
	TaskID  string
	Attempt int
	// Deadline is the task's deadline, if it has one: a later run waits
	// for the outcome until then, not longer.
	Deadline time.Time
	// StartedAt is when the call started; zero means now.
	StartedAt time.Time
}

func (h *Handoff) Error() string {
	return "agent: call handed off as background task " + h.TaskID
}

// runKey is the context key of the run, for [Suspending].
type runKey struct{}

// Suspending returns a channel that is closed when the run of a tool call
// is asked to suspend (RunOptions.Suspend, SIGTERM) while the call runs,
// for a call whose ctx is the one its tool was given. A tool whose call
// waits for work done elsewhere, and that can be waited for again by a
// later run, may then stop waiting and return a [Handoff]. The channel is
// nil (it never fires) when the run cannot keep such a call: when no
// [HandoffKeeper] of the run can keep it (without a background.Tools
// capability whose executor is an Attacher, or for a call already running
// in the background).
func Suspending(ctx context.Context) <-chan struct{} {
	r, _ := ctx.Value(runKey{}).(*run)
	if r == nil {
		return nil
	}
	_, ch := r.keeper(ctx)
	return ch
}

// keeper returns the first HandoffKeeper that can keep the call of ctx,
// and the channel it gives [Suspending].
func (r *run) keeper(ctx context.Context) (HandoffKeeper, <-chan struct{}) {
	for _, c := range r.caps {
		if k, ok := c.(HandoffKeeper); ok {
			if ch := k.Suspending(ctx, r.info); ch != nil {
				return k, ch
			}
		}
	}
	return nil, nil
}

// handOff has a call handed off by its tool kept by the run's
// HandoffKeeper and returns the keeper's acknowledgement as the call's
// result.
func (r *run) handOff(ctx context.Context, s *slot, call *ToolCall, h *Handoff) (any, error) {
	k, ch := r.keeper(ctx)
	if ch == nil || h.Task == nil || h.TaskID == "" {
		if h.Task != nil {
			h.Task.Cancel("the run cannot keep a call handed off")
			<-h.Task.Done()
		}
		// Only a tool that ignored Suspending gets here: a programming
		// error, which ends the run rather than losing the call.
		return nil, tool.Fatal(errors.New("agent: a tool handed off its call, but the run cannot keep it (no BackgroundTools capability with an Attacher executor)"))
	}
	if call == nil {
		call = &ToolCall{Tool: s.t, Call: s.call, Args: s.args}
	}
	call.TaskID = h.TaskID
	v, err := k.KeepHandoff(ctx, r.info, call, h)
	if err != nil {
		return nil, fmt.Errorf("agent: keep call %s handed off: %w", s.call.ToolCallID, err)
	}
	return v, nil
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/tool"
)

// Handoff is the error a tool returns when its run is suspending (see
// [Suspending]) while the call it was waiting for still runs elsewhere, a
// task on a worker, and can go on without this process. The call becomes
// a background task of the run: its tool result is the acknowledgement
// of a background call (SPEC §4), the suspended run lists it in
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

// Suspending returns a channel that is closed when the run of a tool call
// is asked to suspend (RunOptions.Suspend, SIGTERM) while the call runs,
// for a call whose ctx is the one its tool was given. A tool whose call
// waits for work done elsewhere, and that can be waited for again by a
// later run, may then stop waiting and return a [Handoff]. The channel is
// nil (it never fires) when the run cannot keep such a call: without a
// [BackgroundTools] capability whose executor is an [Attacher], or for a
// call already running in the background.
func Suspending(ctx context.Context) <-chan struct{} {
	br := bgRunOf(ctx)
	if br == nil || inBackground(ctx) {
		return nil
	}
	if _, ok := br.owner.exec.(Attacher); !ok {
		return nil
	}
	return br.r.opts.Suspend
}

// handOff makes a call handed off by its tool a background task of the
// run and returns its acknowledgement as the call's result.
func (r *run) handOff(ctx context.Context, s *slot, call *ToolCall, h *Handoff) (any, error) {
	br := bgRunOf(ctx)
	if Suspending(ctx) == nil || h.Task == nil || h.TaskID == "" {
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
	started := h.StartedAt
	if started.IsZero() {
		started = time.Now()
	}
	v, err := br.track(&bgTask{id: h.TaskID, attempt: h.Attempt, deadline: h.Deadline, call: call, task: h.Task, started: started.UTC()})
	if err != nil {
		return nil, fmt.Errorf("agent: keep call %s handed off: %w", s.call.ToolCallID, err)
	}
	return v, nil
}

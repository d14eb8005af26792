package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// Executor returns the executor of background calls of this toolset's
// tools, with fallback for the others (see [Executor]).
func (r *Toolset) Executor(fallback background.Executor) *Executor {
	return &Executor{r: r, fallback: fallback}
}

// Executor is the [background.Executor] that runs background calls of a
// toolset's tools on workers: each call is published as a task with mode
// background and the call's task ID and attempt, the workers' progress
// reports are relayed to the run, and the task outlives the run when it
// pauses ([agent.BackgroundTask.Detach] reports true): its result stays in
// the results stream for a later run. Calls of other tools (in-process
// ones) go to its fallback; with a nil fallback they fail to start. It is
// an [background.Attacher]: a later run attaches to the tasks an earlier one
// left running. Build it with [Toolset.Executor].
type Executor struct {
	r        *Toolset
	fallback background.Executor

	mu       sync.Mutex
	attached map[string]*Handle // waited for ahead of a run (attachAll), by task ID
}

var (
	_ background.Executor = (*Executor)(nil)
	_ background.Attacher = (*Executor)(nil)
)

// Start implements [background.Executor].
func (e *Executor) Start(ctx context.Context, c *background.Call) (agent.BackgroundTask, error) {
	name := c.Call.Call.ToolName
	if !e.r.serves(name) {
		if e.fallback == nil {
			return nil, fmt.Errorf("%w: %s", natsjs.ErrNotRemote, name)
		}
		return e.fallback.Start(ctx, c)
	}
	task := callTask(c.Call.RunContext, name, c.Call.Args, protocol.ModeBackground)
	task.TaskID, task.Attempt = c.TaskID, c.Attempt
	if c.Call.Tool != nil && c.Call.Tool.Timeout > 0 {
		// Bounded by its tool's timeout, as its registry entry states it
		// (SPEC §20); without one, by the dispatcher's default.
		task.Deadline = time.Now().Add(c.Call.Tool.Timeout).UTC()
	}
	task.Limits = e.r.cfg.Policies[name].Limits // the agent's own, beside the worker's (SPEC §19)
	// Subscribe to progress before the task exists, so no report is missed.
	stop := e.r.relayProgress(ctx, task.ConversationID, task.TaskID, task.Tool)
	dispatch := e.r.cfg.Dispatcher.Dispatch
	if rc := c.Call.RunContext; rc != nil && rc.Again {
		dispatch = e.r.cfg.Dispatcher.DispatchAgain // its result may be stored already
	}
	h, err := dispatch(context.WithoutCancel(ctx), task)
	if err != nil {
		stop()
		return nil, tool.Fatal(err)
	}
	unrelayWhenDone(ctx, h, stop)
	return &remoteTask{h: h, log: e.r.log}, nil
}

// Attach implements [background.Attacher]: a task an earlier run left running
// on a worker is waited for again (its progress relayed), as if this
// process had started it. Its tool need not be advertised any more. A task
// attached ahead of the run ([Client.Attach]) keeps the handle that has
// waited for it since.
func (e *Executor) Attach(ctx context.Context, info *agent.RunInfo, pt deferred.PendingTask) (agent.BackgroundTask, error) {
	task := pendingTask(info.ConversationID, pt)
	task.RunID = info.RunID
	stop := e.r.relayProgress(ctx, task.ConversationID, task.TaskID, task.Tool)
	h := e.takeAttached(pt.TaskID)
	var err error
	if h == nil {
		h, err = e.r.cfg.Dispatcher.Attach(task)
	}
	if err != nil {
		stop()
		return nil, tool.Fatal(err)
	}
	unrelayWhenDone(ctx, h, stop)
	return &remoteTask{h: h, log: e.r.log}, nil
}

// attachAll waits, from now on, for the results of tasks, the background
// tasks conversation conv left running (see [Client.Attach]).
func (e *Executor) attachAll(conv string, tasks []deferred.PendingTask) error {
	for _, pt := range tasks {
		e.mu.Lock()
		_, dup := e.attached[pt.TaskID]
		e.mu.Unlock()
		if dup {
			continue
		}
		h, err := e.r.cfg.Dispatcher.Attach(pendingTask(conv, pt))
		if err != nil {
			return err
		}
		e.mu.Lock()
		if e.attached == nil {
			e.attached = map[string]*Handle{}
		}
		e.attached[pt.TaskID] = h
		e.mu.Unlock()
	}
	return nil
}

// release lets go of a task attached ahead of a run.
func (e *Executor) release(taskID string) {
	if h := e.takeAttached(taskID); h != nil {
		h.Detach()
	}
}

// takeAttached removes and returns the handle attached for taskID, if any.
func (e *Executor) takeAttached(taskID string) *Handle {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.attached[taskID]
	delete(e.attached, taskID)
	return h
}

// callTask is the task of a call of the tool name by the run of rc: its
// task ID and attempt are the caller's to set.
func callTask(rc *tool.RunContext, name string, args json.RawMessage, mode protocol.Mode) protocol.Task {
	return protocol.Task{
		Tool:             name,
		Args:             args,
		ConversationID:   rc.ConversationID,
		Tenant:           rc.Tenant,
		Agent:            rc.Agent,
		RunID:            rc.RunID,
		ToolCallID:       rc.ToolCallID,
		Mode:             mode,
		Approved:         rc.ToolCallApproved,
		ToolCallMetadata: rc.ToolCallMetadata,
		Retry:            rc.Retry,
	}
}

// pendingTask is the task of a background task conversation conv left
// running, as its pending record has it.
func pendingTask(conv string, pt deferred.PendingTask) protocol.Task {
	return protocol.Task{TaskID: pt.TaskID, Attempt: pt.Attempt, Tool: pt.Tool, Args: pt.Args, ToolCallID: pt.ToolCallID,
		Mode: protocol.ModeBackground, ConversationID: conv, Deadline: pt.Deadline}
}

// cancelConfirmWait bounds how long a cancelled background task waits for
// its worker to confirm that the tool stopped.
const cancelConfirmWait = 5 * time.Second

// remoteTask is a background task run by a worker. Cancel waits for the
// worker's confirmation (at most cancelConfirmWait), so that a run that
// ends has its tools stopped, not just asked to stop.
type remoteTask struct {
	h   *Handle
	log *slog.Logger
}

// Done implements [agent.BackgroundTask].
func (t *remoteTask) Done() <-chan struct{} { return t.h.Done() }

// Outcome implements [agent.BackgroundTask].
func (t *remoteTask) Outcome() (any, error) {
	res, err := t.h.Result()
	if err != nil {
		return nil, tool.Fatal(err) // the server was lost or the dispatcher stopped
	}
	return res.Outcome()
}

// Cancel implements [agent.BackgroundTask].
func (t *remoteTask) Cancel(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if err := t.h.CancelAndWait(ctx, reason, cancelConfirmWait); err != nil {
		t.log.Warn("cancel not published", slog.String("task_id", t.h.task.TaskID), slog.Any("error", err))
	}
}

// Detach implements [agent.BackgroundTask].
func (t *remoteTask) Detach() bool {
	t.h.Detach()
	return true
}

// fatalUnlessCancelled marks an error of the transport (no result can
// come: the server is lost, the dispatcher stopped, the task could not be
// published) as ending the run; the caller's own cancellation stays as it
// is.
func fatalUnlessCancelled(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	return tool.Fatal(err)
}

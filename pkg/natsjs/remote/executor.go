package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// Executor returns the [agent.Executor] that runs background calls of this
// toolset's tools on workers: each call is published as a task with mode
// background and the call's task ID and attempt, the workers' progress
// reports are relayed to the run, and the task outlives the run when it
// pauses ([agent.BackgroundTask.Detach] reports true): its result stays in
// the results stream for a later run. Calls of other tools (in-process
// ones) go to fallback; with a nil fallback they fail to start.
func (r *Toolset) Executor(fallback agent.Executor) agent.Executor {
	return &Executor{r: r, fallback: fallback}
}

type Executor struct {
	r        *Toolset
	fallback agent.Executor
}

func (e *Executor) Start(ctx context.Context, c *agent.BackgroundCall) (agent.BackgroundTask, error) {
	name := c.Call.Call.ToolName
	if !e.r.serves(name) {
		if e.fallback == nil {
			return nil, fmt.Errorf("%w: %s", natsjs.ErrNotRemote, name)
		}
		return e.fallback.Start(ctx, c)
	}
	rc := c.Call.RunContext
	task := protocol.Task{
		TaskID:           c.TaskID,
		Attempt:          c.Attempt,
		Tool:             name,
		Args:             c.Call.Args,
		ConversationID:   rc.ConversationID,
		RunID:            rc.RunID,
		ToolCallID:       rc.ToolCallID,
		Mode:             protocol.ModeBackground,
		Approved:         rc.ToolCallApproved,
		ToolCallMetadata: rc.ToolCallMetadata,
		Retry:            rc.Retry,
	}
	// Subscribe to progress before the task exists, so no report is missed.
	stop := e.r.relayProgress(ctx, task.ConversationID, task.TaskID)
	h, err := e.r.cfg.Dispatcher.Dispatch(context.WithoutCancel(ctx), task)
	if err != nil {
		stop()
		return nil, tool.Fatal(err)
	}
	unrelayWhenDone(ctx, h, stop)
	return &remoteTask{h: h, log: e.r.log}, nil
}

// Attach implements [agent.Attacher]: a task an earlier run left running
// on a worker is waited for again (its progress relayed), as if this
// process had started it. Its tool need not be advertised any more.
func (e *Executor) Attach(ctx context.Context, info *agent.RunInfo, pt deferred.PendingTask) (agent.BackgroundTask, error) {
	task := protocol.Task{TaskID: pt.TaskID, Attempt: pt.Attempt, Tool: pt.Tool, Args: pt.Args, ToolCallID: pt.ToolCallID,
		Mode: protocol.ModeBackground, ConversationID: info.ConversationID, RunID: info.RunID, Deadline: pt.Deadline}
	stop := e.r.relayProgress(ctx, task.ConversationID, task.TaskID)
	h := e.r.takeHeld(pt.TaskID)
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

func (t *remoteTask) Done() <-chan struct{} { return t.h.Done() }

func (t *remoteTask) Outcome() (any, error) {
	res, err := t.h.Result()
	if err != nil {
		return nil, tool.Fatal(err) // the server was lost or the dispatcher stopped
	}
	return res.Outcome()
}

func (t *remoteTask) Cancel(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if err := t.h.Stop(ctx, reason, cancelConfirmWait); err != nil {
		t.log.Warn("cancel not published", slog.String("task_id", t.h.task.TaskID), slog.Any("error", err))
	}
}

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

// serves reports whether a worker advertises the named tool now.
func (r *Toolset) serves(name string) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.filter != nil && !r.filter[name] {
		return false
	}
	for _, e := range r.entries {
		if e.Name == name && e.ExpiresAt.After(now) {
			return true
		}
	}
	return false
}

// unrelayWhenDone calls stop once h is done, when ctx has a progress
// reporter (otherwise relayProgress relays nothing and there is nothing to
// stop: no goroutine is kept per pending task).
func unrelayWhenDone(ctx context.Context, h *Handle, stop func()) {
	if _, ok := progress.FromContext(ctx); !ok {
		return
	}
	go func() {
		<-h.Done()
		stop()
	}()
}

// relayProgress relays the worker's progress reports on task taskID (of
// conversation conv) to whoever listens in ctx (the agent turns them into
// progress events), best effort, until the returned function is called.
// Call it before dispatching.
func (r *Toolset) relayProgress(ctx context.Context, conv, taskID string) (stop func()) {
	if _, ok := progress.FromContext(ctx); !ok {
		return func() {}
	}
	subject := protocol.Subjects{Prefix: r.cfg.Prefix}.Progress(conv, taskID)
	// On the dispatcher's connection: the server handles a connection's
	// messages in order, so the subscription exists before the task does.
	sub, err := r.cfg.Dispatcher.cfg.Conn.Subscribe(subject, func(m *nats.Msg) {
		p, err := protocol.DecodeProgress(m.Data, taskID, nil)
		if err != nil {
			r.log.Debug("progress report refused", slog.String("task_id", taskID), slog.Any("error", err))
			return
		}
		progress.ReportTask(ctx, taskID, p.Message, p.Fraction)
	})
	if err != nil {
		r.log.Debug("progress not relayed", slog.String("task_id", taskID), slog.Any("error", err))
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}

// Hold waits, from now on, for the results of the background tasks that
// conversation conv left running, before a resume reads the results
// stream: the dispatcher drops a result nobody waits for, so without it a
// result stored between that read and the run's Attach would be missed.
// The run's Attach takes the held handle; Release lets go of a task whose
// outcome the resume read from the stream.
func (r *Toolset) Hold(conv string, tasks []deferred.PendingTask) error {
	for _, pt := range tasks {
		r.mu.Lock()
		_, dup := r.held[pt.TaskID]
		r.mu.Unlock()
		if dup {
			continue
		}
		h, err := r.cfg.Dispatcher.Attach(protocol.Task{TaskID: pt.TaskID, Attempt: pt.Attempt, Tool: pt.Tool, Args: pt.Args,
			ToolCallID: pt.ToolCallID, Mode: protocol.ModeBackground, ConversationID: conv, Deadline: pt.Deadline})
		if err != nil {
			return err
		}
		r.mu.Lock()
		if r.held == nil {
			r.held = map[string]*Handle{}
		}
		r.held[pt.TaskID] = h
		r.mu.Unlock()
	}
	return nil
}

// Release lets go of a held task (its outcome came another way).
func (r *Toolset) Release(taskID string) {
	if h := r.takeHeld(taskID); h != nil {
		h.Detach()
	}
}

// takeHeld removes and returns the handle held for taskID, if any.
func (r *Toolset) takeHeld(taskID string) *Handle {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.held[taskID]
	delete(r.held, taskID)
	return h
}

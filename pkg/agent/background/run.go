package background

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// bgRunKey is the context key of a run's background state, in the
// contexts of its hooks and tool calls.
type bgRunKey struct{}

// inBackgroundKey marks the context of a call already running in the
// background, so that inner [Tools] wrappers let it through.
type inBackgroundKey struct{}

func bgRunOf(ctx context.Context) *bgRun {
	br, _ := ctx.Value(bgRunKey{}).(*bgRun)
	return br
}

func inBackground(ctx context.Context) bool {
	v, _ := ctx.Value(inBackgroundKey{}).(bool)
	return v
}

// Live returns the run's background tasks whose outcomes have not reached
// the model yet (running, or finished and waiting for the next model
// request), and its non-blocking calls still waiting, as pending tasks in
// start order. ctx is the context a capability hook was called with;
// outside a run with a [Tools] capability it returns nil. A conversation
// store saves them with the history at each step, so that a later run
// delivers their outcomes if this process dies.
func Live(ctx context.Context) []deferred.PendingTask {
	br := bgRunOf(ctx)
	if br == nil {
		return nil
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	out := make([]deferred.PendingTask, 0, len(br.live))
	for _, t := range br.live {
		out = append(out, t.pending())
	}
	return out
}

// bgRun is the background state of one run: its live tasks and the
// outcomes that arrived and wait for delivery. The first [Tools]
// capability of the run (the owner) creates it in WrapRun and ends it when
// the run returns; the others register their selectors with it.
type bgRun struct {
	owner *capability
	caps  []*capability // in capability order, owner first
	info  *agent.RunInfo
	log   *slog.Logger // nil: the run's

	stop    chan struct{} // closed when the run ends: watchers return
	arrival chan struct{} // signalled (capacity 1) when an outcome arrives
	wg      sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	live    []*bgTask  // started and not yet delivered, in start order
	arrived []*bgTask  // finished and not yet delivered, in completion order
	closed  bool       // the run is ending: late outcomes are refused
	running int        // live tasks whose outcome was not taken yet
	// unwatched is the one running task without a watcher goroutine, if
	// any. A run that no one observes (no OnEvent) starts a task that runs
	// alone without one: the loop takes its outcome itself, in the idle
	// wait or when it delivers outcomes, and so in completion order too.
	// Once a second task runs, the first gets its watcher.
	unwatched *bgTask
	// unwaited are the adopted non-blocking calls still waiting for their
	// outcome until a capability with a waiter takes them (adoptWaits);
	// touched only by the run's goroutine, before its first request.
	unwaited []agent.AdoptedTask
}

// bgTask is one background call.
type bgTask struct {
	id       string
	attempt  int
	deadline time.Time // zero but for an inline call handed off (handoff.go)
	call     *agent.ToolCall
	task     agent.BackgroundTask
	started  time.Time

	// progress relays the task's progress reports until its finished
	// event; nil when the run has no reporter (or the task was adopted).
	progress *taskReporter
	// span is the span context of the call that started it (its
	// execute_tool span), the parent of its injected result's span;
	// invalid when the run is not traced or the task was adopted.
	span trace.SpanContext
	// meta is the deferral's metadata of a non-blocking deferred call.
	meta map[string]any

	// Set under bgRun.mu.
	// wait is KindApproval or KindExternal while the task is a
	// non-blocking deferred call waiting for its decision or answer
	// (nonblocking.go); empty once it runs, and for every other task.
	wait      deferred.Kind
	cancelled bool // cancelled by the run: its outcome is dropped
	// detached is set when the run ends paused and the task runs on: what
	// its Done then reports is not its outcome (a resume delivers that),
	// so it gets no finished event.
	detached bool
	finished bool // its outcome was taken (by its watcher or the idle wait)
	val      any
	err      error
	doneAt   time.Time // when its outcome was taken
}

func newBgRun(owner *capability, info *agent.RunInfo, log *slog.Logger) *bgRun {
	return &bgRun{
		owner:   owner,
		caps:    []*capability{owner},
		info:    info,
		log:     log,
		stop:    make(chan struct{}),
		arrival: make(chan struct{}, 1),
	}
}

// mode says how t runs: sequential tools never in the background; a
// selector match wins over optional metadata.
func (br *bgRun) mode(ctx context.Context, t *tool.Tool) bgMode {
	if t == nil || t.Sequential || t.Kind == tool.KindExternal {
		return bgNone
	}
	for _, c := range br.caps {
		if c.sel.Matches(ctx, br.info, t) {
			return bgAlways
		}
	}
	if v, ok := t.Metadata["background"].(string); ok && v == "optional" {
		return bgOptional
	}
	return bgNone
}

// executor returns the executor of the first capability choosing t, else
// the owner's.
func (br *bgRun) executor(ctx context.Context, t *tool.Tool) Executor {
	for _, c := range br.caps {
		if c.sel.Matches(ctx, br.info, t) {
			return c.exec
		}
	}
	return br.owner.exec
}

// taskReporter gives a background call's progress reports its task ID,
// and drops the reports that come once the task's finished event was
// emitted (a worker's last report can arrive after its result): no
// progress event follows a background_task_finished of the same task.
type taskReporter struct {
	inner  progress.Reporter
	taskID string

	mu    sync.Mutex // held while a report or the finished event is emitted
	ended bool
}

func (p *taskReporter) Report(message string, fraction *float64) {
	p.ReportTask(p.taskID, message, fraction)
}

func (p *taskReporter) ReportTask(_ string, message string, fraction *float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	if tr, ok := p.inner.(progress.TaskReporter); ok {
		tr.ReportTask(p.taskID, message, fraction)
		return
	}
	p.inner.Report(message, fraction)
}

// ReportQueued relays that the task waits in its tool's queue
// (progress.QueueReporter), as its progress when the inner reporter
// shows no queued calls.
func (p *taskReporter) ReportQueued(_, message string, q progress.Queued) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	if qr, ok := p.inner.(progress.QueueReporter); ok {
		qr.ReportQueued(p.taskID, message, q)
		return
	}
	if tr, ok := p.inner.(progress.TaskReporter); ok {
		tr.ReportTask(p.taskID, message, nil)
		return
	}
	p.inner.Report(message, nil)
}

// endWith ends the reports and calls emit (which emits the finished
// event) once no report is being emitted. A nil p just calls emit.
func (p *taskReporter) endWith(emit func()) {
	if p == nil {
		emit()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	emit()
}

// spawn starts call in the background and returns its acknowledgement.
func (br *bgRun) spawn(ctx context.Context, exec Executor, call *agent.ToolCall, next agent.ToolCallFunc) (any, error) {
	if br.isClosed() {
		return nil, agent.ErrRunCancelled
	}
	tctx := context.WithValue(ctx, inBackgroundKey{}, true)
	var tr *taskReporter
	if rep, ok := progress.FromContext(ctx); ok {
		tr = &taskReporter{inner: rep, taskID: call.TaskID}
		tctx = progress.WithReporter(tctx, tr)
	}
	attempt := 0
	if call.RunContext != nil {
		attempt = call.RunContext.Attempt
	}
	task, err := exec.Start(tctx, &Call{TaskID: call.TaskID, Attempt: attempt, Call: call, Run: next})
	if err != nil {
		return nil, fmt.Errorf("start background task: %w", err)
	}
	return br.track(&bgTask{id: call.TaskID, attempt: attempt, call: call, task: task, started: time.Now().UTC(), progress: tr,
		span: trace.SpanContextFromContext(ctx)})
}

// isClosed reports whether the run is ending.
func (br *bgRun) isClosed() bool {
	br.mu.Lock()
	defer br.mu.Unlock()
	return br.closed
}

// track makes t, whose task has started, one of the run's live tasks and
// returns its acknowledgement.
func (br *bgRun) track(t *bgTask) (any, error) {
	if err := br.add(t, true); err != nil {
		return nil, err
	}
	return "Tool '" + t.call.Call.ToolName + "' is running in the background as task " + t.id + ". Its result will arrive later as a follow-up message; continue with other work meanwhile.", nil
}

// add makes t, whose task has started, one of the run's live tasks (it may
// be one already: a non-blocking call that starts running once approved),
// watched for its outcome; started emits its background_task_started
// event.
func (br *bgRun) add(t *bgTask, started bool) error {
	call := t.call
	br.mu.Lock()
	if br.closed {
		// The run ended while the task started.
		br.mu.Unlock()
		t.task.Cancel("run ended")
		<-t.task.Done()
		return agent.ErrRunCancelled
	}
	if !slices.Contains(br.live, t) {
		br.live = append(br.live, t)
	}
	// Only an observed run needs a task's finished event when it finishes
	// rather than when the loop takes its outcome.
	lazy := !br.info.Observed() && br.running == 0
	br.running++
	prev := br.unwatched
	br.unwatched = nil
	if lazy {
		br.unwatched = t
	} else {
		br.wg.Add(1)
	}
	if prev != nil {
		br.wg.Add(1)
	}
	br.mu.Unlock()
	if started {
		br.info.Emit(agent.Event{Type: agent.EventBackgroundTaskStarted, TaskID: t.id, Tool: call.Call.ToolName, ToolCallID: call.Call.ToolCallID})
	}
	if prev != nil {
		go br.watch(prev, prev.task)
	}
	if !lazy {
		go br.watch(t, t.task)
	}
	return nil
}

// pending is t as a pending task of the conversation.
// Called with bgRun.mu held, or once no other goroutine has t.
func (t *bgTask) pending() deferred.PendingTask {
	if t.wait != "" {
		return deferred.PendingTask{TaskID: t.id, Kind: t.wait, Tool: t.call.Call.ToolName, ToolCallID: t.call.Call.ToolCallID,
			Args: t.call.Args, Metadata: tool.DeepCopy(t.meta), Attempt: t.attempt, NonBlocking: true}
	}
	return deferred.PendingTask{TaskID: t.id, Kind: deferred.KindBackground, Tool: t.call.Call.ToolName, ToolCallID: t.call.Call.ToolCallID,
		Args: t.call.Args, Attempt: t.attempt, StartedAt: t.started, Deadline: t.deadline}
}

// retries is the task's tool's retry budget; an adopted task whose tool
// this run does not know has the default.
func (t *bgTask) retries() int {
	if t.call.Tool == nil {
		return tool.DefaultRetries
	}
	return t.call.Tool.Retries
}

// adopt takes over the background tasks an earlier run left: the outcomes
// that arrived are queued for the first model request, in the order given;
// the tasks still running are attached through the owner's executor and
// watched like the run's own. Each holds a tool call slot, as it did in
// the run that started it.
func (br *bgRun) adopt(ctx context.Context, tasks []agent.AdoptedTask) error {
	for _, a := range tasks {
		pt := a.Task
		call := &agent.ToolCall{Call: message.ToolCall{ToolName: pt.Tool, ToolCallID: pt.ToolCallID, Args: string(pt.Args)}, Args: pt.Args, TaskID: pt.TaskID}
		t := &bgTask{id: pt.TaskID, attempt: pt.Attempt, deadline: pt.Deadline, call: call, started: pt.StartedAt}
		if pt.NonBlocking && !pt.Background() {
			t.wait, t.meta = pt.Kind, tool.DeepCopy(pt.Metadata)
		}
		br.info.ReserveToolCalls(1)
		if a.Done {
			t.val, t.err, t.finished = a.Value, a.Err, true
			br.mu.Lock()
			br.live = append(br.live, t)
			br.arrived = append(br.arrived, t)
			br.mu.Unlock()
			continue
		}
		if t.wait != "" {
			// Still waiting for its decision or answer: this run watches,
			// with the waiter of the first capability that has one (it may
			// register after this adoption: adoptWaits).
			br.info.ReserveToolCalls(-1) // adoptWaits reserves it
			br.unwaited = append(br.unwaited, a)
			continue
		}
		at, ok := br.owner.exec.(Attacher)
		if !ok {
			return fmt.Errorf("agent: background task %s of tool %s is still running, but the executor cannot attach to it", pt.TaskID, pt.Tool)
		}
		task, err := at.Attach(ctx, br.info, pt)
		if err != nil {
			return fmt.Errorf("agent: attach background task %s: %w", pt.TaskID, err)
		}
		t.task = task
		br.mu.Lock()
		br.live = append(br.live, t)
		br.running++
		br.wg.Add(1)
		br.mu.Unlock()
		go br.watch(t, t.task)
	}
	return nil
}

// adoptWaits makes the adopted non-blocking calls still waiting for their
// outcome live tasks, watched by w.
func (br *bgRun) adoptWaits(ctx context.Context, w DeferredWaiter) error {
	waits := br.unwaited
	br.unwaited = nil
	for _, a := range waits {
		pt := a.Task
		task, err := w.Wait(ctx, br.info, pt)
		if err != nil {
			return fmt.Errorf("agent: wait for the outcome of task %s: %w", pt.TaskID, err)
		}
		br.info.ReserveToolCalls(1)
		call := &agent.ToolCall{Call: message.ToolCall{ToolName: pt.Tool, ToolCallID: pt.ToolCallID, Args: string(pt.Args)}, Args: pt.Args, TaskID: pt.TaskID}
		t := &bgTask{id: pt.TaskID, attempt: pt.Attempt, call: call, task: task, started: time.Now().UTC(), wait: pt.Kind, meta: tool.DeepCopy(pt.Metadata)}
		if err := br.add(t, false); err != nil {
			return err
		}
	}
	return nil
}

// watch waits for the outcome of t's task and queues it for delivery.
// The task is the one t had when the watch started (a non-blocking call's
// wait is replaced by its execution once approved: a new watch starts).
func (br *bgRun) watch(t *bgTask, task agent.BackgroundTask) {
	defer br.wg.Done()
	select {
	case <-task.Done():
	case <-br.stop:
		select {
		case <-task.Done():
		default:
			return // detached
		}
	}
	br.finish(t, task)
}

// finish queues the outcome of t, whose task is done, for delivery, emits
// its background_task_finished event and signals its arrival. Its watcher
// calls it, and so does the idle wait when t is the one task it waits for
// (one goroutine hand-off less between the outcome and the loop), and the
// end of the run for a task it cancelled; the first call does the work. A
// detached task is left alone: it has not finished, it runs on.
func (br *bgRun) finish(t *bgTask, task agent.BackgroundTask) {
	br.mu.Lock()
	if t.finished || t.detached || t.task != task {
		// (A task t no longer has: the wait its execution replaced.)
		br.mu.Unlock()
		return
	}
	t.finished = true
	br.running--
	if br.unwatched == t {
		br.unwatched = nil
	}
	br.mu.Unlock()
	val, err := task.Outcome()
	br.mu.Lock()
	t.val, t.err, t.doneAt = val, err, time.Now()
	cancelled, wait := t.cancelled, t.wait
	if !cancelled && !br.closed {
		br.arrived = append(br.arrived, t)
	}
	br.mu.Unlock()
	if wait != "" {
		// A decision or an answer: its deferred_tool_results event is
		// emitted when it is applied (deliver).
		select {
		case br.arrival <- struct{}{}:
		default:
		}
		return
	}
	status := "completed"
	var tc *tool.TaskCancelled
	switch {
	case cancelled || errors.As(err, &tc):
		status = "cancelled"
	case err != nil:
		status = "failed"
	}
	ev := agent.Event{Type: agent.EventBackgroundTaskFinished, TaskID: t.id, Tool: t.call.Call.ToolName, ToolCallID: t.call.Call.ToolCallID, Status: status}
	if status == "completed" {
		// Its result, as the follow-up will carry it (a face shows it
		// when it arrives: AG-UI's TOOL_CALL_RESULT, SPEC §18).
		if part, _, err := agent.ReturnPart(t.call.Call.ToolName, t.call.Call.ToolCallID, val); err == nil {
			ev.Content = part.Content
		}
	}
	t.progress.endWith(func() { br.info.Emit(ev) })
	select {
	case br.arrival <- struct{}{}:
	default:
	}
}

// detach lets t run on after the run, when its executor can: marked
// detached first, so that its Done closing on the detach (a remote task's
// handle does) is not taken for its outcome.
func (br *bgRun) detach(t *bgTask) bool {
	br.mu.Lock()
	t.detached = true
	br.mu.Unlock()
	if t.task.Detach() {
		return true
	}
	br.mu.Lock()
	t.detached = false
	br.mu.Unlock()
	return false
}

// stamp gives m the run's IDs and, unless it has one, the time, as the
// loop stamps the messages it records.
func (br *bgRun) stamp(m message.Message) message.Message {
	m.RunID, m.ConversationID = br.info.RunID, br.info.ConversationID
	if m.Timestamp.IsZero() {
		m.Timestamp = time.Now().UTC()
	}
	return m
}

// logger returns the capability's logger, else the run's.
func (br *bgRun) logger() *slog.Logger {
	if br.log != nil {
		return br.log
	}
	return br.info.Logger()
}

// liveCount returns the number of tasks not yet delivered.
func (br *bgRun) liveCount() int {
	br.mu.Lock()
	defer br.mu.Unlock()
	return len(br.live)
}

// end stops the run's background work once the run returned res, err. An
// ended run cancels every live task (and waits for them); a paused one
// detaches the tasks that can outlive the process, lists them in
// res.Background, and cancels the others.
func (br *bgRun) end(res *agent.Result, err error) (*agent.Result, error) {
	br.takeUnwatched() // as its watcher would have
	br.mu.Lock()
	br.closed = true
	live := append([]*bgTask(nil), br.live...)
	arrived := br.arrived
	br.arrived = nil
	br.mu.Unlock()

	paused := err == nil && res != nil && res.Paused()
	reason := "run ended"
	switch {
	case err != nil && br.info.Cancelled():
		reason = "run cancelled"
	case err != nil && errors.Is(err, context.Canceled):
		reason = "run interrupted"
	case err != nil:
		reason = "run failed"
	case paused:
		reason = "run paused"
	}
	var cancelled []*bgTask
	var kept []deferred.PendingTask
	for _, t := range live {
		if slices.Contains(arrived, t) {
			continue // finished: its outcome is handled below
		}
		if paused && br.detach(t) {
			kept = append(kept, t.pending())
			continue
		}
		br.mu.Lock()
		t.cancelled = true
		br.mu.Unlock()
		t.task.Cancel(reason)
		cancelled = append(cancelled, t)
	}
	// Cleanup waits for the cancelled tasks (each gets its finished event,
	// cancelled unless it had finished), then for the watchers.
	for _, t := range cancelled {
		<-t.task.Done()
		br.finish(t, t.task)
	}
	close(br.stop)
	br.wg.Wait()
	// A cancelled task gives back its tool call slot; so does a failed one
	// whose outcome is dropped (a completed one counts once).
	release := len(cancelled)
	if !paused {
		for _, t := range arrived {
			if t.err != nil || t.wait != "" {
				release++ // failed, or a non-blocking call that never ran
			}
		}
	}
	if release > 0 {
		br.info.ReserveToolCalls(-release)
		if res != nil {
			res.Usage = br.info.Usage()
		}
	}
	if !paused {
		return res, err
	}
	// A decision or answer that arrived but was not applied yet stays
	// pending: the waiter keeps it for the later run (a durable one reads
	// it again from its stream).
	var outcomes []*bgTask
	for _, t := range arrived {
		if t.wait != "" {
			kept = append(kept, t.pending())
			continue
		}
		outcomes = append(outcomes, t)
	}
	for _, a := range br.unwaited {
		kept = append(kept, a.Task) // adopted, never watched: still pending
	}
	res.Background = append(res.Background, kept...)
	// Outcomes that arrived before the pause are kept in the history: the
	// resume sends them with its first request. A fatal one ends the run.
	parts, ferr := br.followUps(outcomes)
	if ferr != nil {
		return res, ferr
	}
	if len(parts) > 0 {
		res.Messages = append(res.Messages, br.stamp(message.NewRequest(parts...)))
	}
	res.Usage = br.info.Usage()
	return res, nil
}

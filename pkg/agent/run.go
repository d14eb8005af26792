package agent

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// run is the state of one Agent.Run.
type run struct {
	a             *Agent
	prompt        string
	opts          *RunOptions
	caps          []Capability
	limits        UsageLimits
	allowDeferred bool
	// records is set when a capability is a StepRecorder: the run keeps
	// its steps done once (once.go).
	records bool
	info    *RunInfo

	// logOnce builds log, the agent's logger with the run's IDs, when the
	// run first logs: most runs never do.
	logOnce sync.Once
	log     *slog.Logger

	runID, convID string
	// traceID and spanID are the run span's IDs when it records (set
	// before the first event, then only read).
	traceID, spanID string
	newFrom         int
	// promptLast is set while the first request ends with the run's
	// prompt: the parts hooks add (follow-ups) go before it, so that the
	// new prompt stays the last thing the model reads.
	promptLast bool

	// emitMu serialises the events; finalSent, under it, is the one owner
	// of "the run has ended" for observers: nothing is emitted after the
	// final event.
	emitMu    sync.Mutex
	finalSent bool

	// state is what changes while the run runs (state.go).
	state runState
}

func newRun(a *Agent, prompt string, opts *RunOptions) *run {
	r := &run{
		a:             a,
		prompt:        prompt,
		opts:          opts,
		caps:          append(slices.Clone(a.cfg.Capabilities), opts.Capabilities...),
		limits:        a.cfg.Limits,
		allowDeferred: a.cfg.AllowDeferred || opts.AllowDeferred,
		runID:         cmp.Or(opts.RunID, ulid.Make().String()),
	}
	history := slices.Grow(repairDangling(opts.History), 8) // room for a few steps' messages
	r.state = runState{history: history, retries: map[string]int{}}
	if opts.Limits != nil {
		r.limits = *opts.Limits
	}
	r.convID = opts.ConversationID
	if r.convID == "" {
		for i := len(history) - 1; i >= 0; i-- {
			if id := history[i].ConversationID; id != "" {
				r.convID = id
				break
			}
		}
	}
	if r.convID == "" {
		r.convID = ulid.Make().String()
	}
	r.newFrom = len(history)
	r.info = &RunInfo{RunID: r.runID, ConversationID: r.convID, Deps: opts.Deps, r: r}
	r.records = len(r.recorders()) > 0
	return r
}

// logger returns the agent's logger with the run's IDs.
func (r *run) logger() *slog.Logger {
	r.logOnce.Do(func() {
		r.log = r.a.log.With(slog.String("run_id", r.runID), slog.String("conversation_id", r.convID))
		if r.traceID != "" {
			r.log = r.log.With(slog.String("trace_id", r.traceID), slog.String("span_id", r.spanID))
		}
	})
	return r.log
}

func (r *run) emit(e Event) {
	if r.opts.OnEvent == nil {
		return
	}
	e.RunID, e.ConversationID = r.runID, r.convID
	e.TraceID, e.SpanID = r.traceID, r.spanID
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	if r.finalSent {
		return // a leftover goroutine reporting after the end
	}
	r.finalSent = e.Type == EventFinal
	r.opts.OnEvent(e)
}

// Cancel implements tool.RunControl.
func (r *run) Cancel() {
	if cancel := r.state.cancel(); cancel != nil {
		cancel(ErrRunCancelled)
	}
}

// Enqueue implements tool.RunControl.
func (r *run) Enqueue(p tool.Priority, content ...message.Content) error {
	if len(content) == 0 {
		return nil
	}
	return r.state.enqueue(p, content)
}

// appendMessage records m in the history, stamped with the run's IDs.
func (r *run) appendMessage(m message.Message) { r.state.appendMessage(r.stamp(m)) }

func (r *run) stamp(m message.Message) message.Message {
	m.RunID, m.ConversationID = r.runID, r.convID
	if m.Timestamp.IsZero() {
		m.Timestamp = time.Now().UTC()
	}
	return m
}

// execute runs the capability chain around the loop and emits the final
// event.
func (r *run) execute(ctx context.Context) (*Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx = context.WithValue(ctx, runKey{}, r) // for Suspending
	r.state.started(cancel)
	ctx, span := r.startRunSpan(ctx)

	r.emit(Event{Type: EventRunStarted})
	// The RunWrappers see the run's error as the caller will (a
	// cancellation by Cancel as ErrRunCancelled), so that what they record
	// of the run agrees with its final event.
	next := func(ctx context.Context) (*Result, error) {
		res, err := r.loop(ctx)
		if err != nil {
			err = r.runError(ctx, err)
		}
		return res, err
	}
	for i := len(r.caps) - 1; i >= 0; i-- {
		if w, ok := r.caps[i].(RunWrapper); ok {
			inner := next
			next = func(ctx context.Context) (*Result, error) { return w.WrapRun(ctx, r.info, inner) }
		}
	}
	res, err := next(ctx)
	if err != nil {
		err = r.runError(ctx, err)
	}
	if res == nil {
		res = r.result("", nil)
	}
	r.state.end()
	final := finalOf(res, err)
	if final.Status == StatusInterrupted {
		final.Error = interruptedText(context.Cause(ctx))
	}
	endRunSpan(span, final)
	r.emit(Event{Type: EventFinal, Final: final})
	if err != nil {
		return res, err
	}
	return res, nil
}

// runError turns a context error caused by Cancel into ErrRunCancelled.
func (r *run) runError(ctx context.Context, err error) error {
	if r.state.isCancelled() && (errors.Is(err, context.Canceled) || errors.Is(err, ErrRunCancelled)) {
		return ErrRunCancelled
	}
	if errors.Is(err, context.Canceled) {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
	}
	return err
}

func (r *run) result(output string, reqs *deferred.Requests) *Result {
	history, usage := r.state.snapshot()
	return &Result{
		Output:         output,
		Deferred:       reqs,
		Messages:       history,
		Usage:          usage,
		RunID:          r.runID,
		ConversationID: r.convID,
		newFrom:        r.newFrom,
	}
}

// interruptedText is the final event's error of an interrupted run: what
// interrupted it, cause (the cause of the run's context, e.g. "interrupted
// by SIGINT"), and what that did, rather than the bare "context canceled".
func interruptedText(cause error) string {
	if cause == nil || cause == context.Canceled { //nolint:errorlint // only the bare context.Canceled says nothing; a cause wrapping it has words of its own
		return "interrupted: the run's context was cancelled; live tasks were cancelled"
	}
	return cause.Error() + ": live tasks were cancelled"
}

// StatusOf returns how a run that returned res and err ended, as in its
// final event.
func StatusOf(res *Result, err error) Status {
	if res == nil {
		res = &Result{}
	}
	return finalOf(res, err).Status
}

// finalOf describes a run's outcome for the final event.
func finalOf(res *Result, err error) *Final {
	f := &Final{Output: res.Output, Usage: res.Usage, Status: StatusFinished}
	switch {
	case err != nil && errors.Is(err, context.Canceled) && !errors.Is(err, ErrRunCancelled):
		f.Status, f.Error, f.Err = StatusInterrupted, err.Error(), err
	case err != nil:
		f.Status, f.Error, f.Err = StatusFailed, err.Error(), err
	case res.Paused():
		f.Status = StatusPaused
		f.Pending = res.PendingRecord().Tasks
	}
	return f
}

// loop is the run: handle the starting point, then alternate model requests
// and tool steps until the model answers with no calls pending.
func (r *run) loop(ctx context.Context) (*Result, error) {
	req, res, err := r.start(ctx)
	if err != nil || res != nil {
		return res, err
	}
	for {
		// A model request is a side effect: none starts once the run was
		// cancelled or interrupted. What the last step produced is kept.
		if err := r.alive(ctx); err != nil {
			r.keep(req)
			return nil, err
		}
		if r.suspendRequested() {
			r.keep(req)
			return r.suspended(), nil
		}
		resp, idle, err := r.request(ctx, req)
		if err != nil {
			return nil, err
		}
		if res := r.idleEnd(idle); res != nil {
			// A resumed run that waited for its background tasks: it was
			// suspended meanwhile, or only non-blocking calls still wait.
			return res, nil
		}
		if len(resp.ToolCalls()) > 0 {
			parts, reqs, err := r.step(ctx, r.state.lastIndex(), nil)
			if err != nil {
				return nil, err
			}
			if reqs != nil {
				return r.pause(ctx, parts, reqs)
			}
			more, _, err := r.afterStep(ctx, false)
			if err != nil {
				r.keep(message.NewRequest(parts...))
				return nil, err
			}
			req = message.NewRequest(append(parts, more...)...)
			continue
		}
		// The model answered without tool calls: the run ends unless queued
		// messages or capabilities keep it going.
		more, idle, err := r.afterStep(ctx, true)
		if err != nil {
			return nil, err
		}
		if res := r.idleEnd(idle); res != nil {
			return res, nil
		}
		if queued := r.state.drainAtEnd(); len(queued) > 0 || len(more) > 0 {
			if len(queued) == 0 {
				req = message.NewRequest(more...)
				continue
			}
			for _, q := range queued[:len(queued)-1] {
				r.appendMessage(message.NewRequest(message.UserPrompt{Content: q}))
			}
			req = message.NewRequest(append(more, message.UserPrompt{Content: queued[len(queued)-1]})...)
			continue
		}
		return r.result(resp.Text(), nil), nil
	}
}

// alive reports why no new side effect may start: ErrRunCancelled after
// RunContext.Cancel, the context's error after an interrupt, else nil.
func (r *run) alive(ctx context.Context) error {
	if r.state.isCancelled() {
		return ErrRunCancelled
	}
	return ctx.Err()
}

// suspendRequested reports whether RunOptions.Suspend is closed.
func (r *run) suspendRequested() bool {
	select {
	case <-r.opts.Suspend:
		return true
	default:
		return false
	}
}

// suspended is the result of a run stopped by RunOptions.Suspend. Queued
// messages are kept in the history, as on a pause.
func (r *run) suspended() *Result {
	for _, q := range r.state.drainAtEnd() {
		r.appendMessage(message.NewRequest(message.UserPrompt{Content: q}))
	}
	res := r.result("", nil)
	res.Suspended = true
	return res
}

// idleEnd is the result of a run that an IdleHook ended (paused or
// suspended), or nil when none did.
func (r *run) idleEnd(idle Idle) *Result {
	switch {
	case idle.Suspend:
		return r.suspended()
	case idle.Pause:
		return r.waitPaused()
	}
	return nil
}

// waitPaused is the result of a run that an IdleHook paused (only
// non-blocking deferred calls wait): its capability lists what the run
// waits for in Result.Background as its RunWrapper returns. Queued
// messages are kept in the history, as on a pause.
func (r *run) waitPaused() *Result {
	for _, q := range r.state.drainAtEnd() {
		r.appendMessage(message.NewRequest(message.UserPrompt{Content: q}))
	}
	res := r.result("", nil)
	res.waiting = true
	return res
}

// keep records a request that will not be sent (the run ends first), so
// that the results it carries stay in the history.
func (r *run) keep(req message.Message) {
	if len(req.Parts) > 0 {
		r.appendMessage(req)
	}
}

// afterStep runs the StepHooks and, when the model ended its turn
// (final), the IdleHooks, each right after its capability's StepHook. An
// IdleHook that ends the run leaves the parts unused.
func (r *run) afterStep(ctx context.Context, final bool) ([]message.Part, Idle, error) {
	var parts []message.Part
	for _, c := range r.caps {
		if h, ok := c.(StepHook); ok {
			p, err := h.AfterStep(ctx, r.info, final)
			if err != nil {
				return nil, Idle{}, err
			}
			parts = append(parts, p...)
		}
		if h, ok := c.(IdleHook); ok && final {
			idle, err := h.WhenIdle(ctx, r.info)
			if err != nil || idle.Pause || idle.Suspend {
				return nil, idle, err
			}
			parts = append(parts, idle.Parts...)
		}
	}
	return parts, Idle{}, nil
}

// pause ends the run with deferred requests, recording the results of the
// calls that did run.
func (r *run) pause(ctx context.Context, parts []message.Part, reqs *deferred.Requests) (*Result, error) {
	// What ran stays recorded, also when the run ends here: a continued
	// history must not run it again (its deferred calls are deferred
	// again).
	r.keep(message.NewRequest(parts...))
	// A pause is a side effect too (state saved, people asked): a
	// cancelled or interrupted run ends as such, not as paused.
	if err := r.alive(ctx); err != nil {
		return nil, err
	}
	if !r.allowDeferred {
		return nil, userErrorf(ErrDeferredNotAllowed, "A deferred tool call was present, but neither the agent nor the run allows ending with DeferredToolRequests. To resolve this, set AllowDeferred on the agent or the run, or use a HandleDeferredToolCalls capability to handle deferred tool calls inline.")
	}
	// Messages enqueued in this step are kept in the history: the resume
	// sends them with its first request.
	for _, q := range r.state.drainAtEnd() {
		r.appendMessage(message.NewRequest(message.UserPrompt{Content: q}))
	}
	return r.result("", reqs), nil
}

// start works out the first request from the prompt and the history, or
// handles the tool calls the history ended with.
func (r *run) start(ctx context.Context) (message.Message, *Result, error) {
	if r.opts.DeferredResults != nil {
		parts, reqs, err := r.resume(ctx, r.opts.DeferredResults)
		if err != nil {
			return message.Message{}, nil, err
		}
		if reqs != nil {
			res, err := r.pause(ctx, parts, reqs)
			return message.Message{}, res, err
		}
		if r.prompt != "" {
			parts = append(parts, message.UserText(r.prompt))
			r.promptLast = true
		}
		return message.NewRequest(parts...), nil, nil
	}
	h := r.state.historySnapshot()
	if li := lastResponse(h); li >= 0 && len(unanswered(h, li)) > 0 {
		// Calls of the last response without a result (also after a
		// trailing request holding some results): a new prompt would send
		// the model a call without its result, so it is refused; without
		// one the calls are processed as a first pass (approvals are
		// deferred again, never dropped). A step a process began and
		// stored (SPEC §20: it died while the calls ran) is finished
		// first, and a new prompt follows its results.
		recorded := hasStepRecord(h[li])
		if r.prompt != "" && !recorded {
			return message.Message{}, nil, userErrorf(ErrPendingCalls, "Cannot provide a new user prompt when the message history contains unprocessed tool calls.")
		}
		parts, reqs, err := r.step(ctx, li, nil)
		if err != nil {
			return message.Message{}, nil, err
		}
		if r.prompt != "" {
			parts = append(parts, message.UserText(r.prompt))
			r.promptLast = true
		}
		if reqs != nil {
			res, err := r.pause(ctx, parts, reqs)
			return message.Message{}, res, err
		}
		return message.NewRequest(parts...), nil, nil
	}
	var parts []message.Part
	if len(h) == 0 {
		if sys := r.instructions(); sys != "" {
			parts = append(parts, message.SystemPrompt{Content: sys})
		}
	}
	if r.prompt != "" {
		parts = append(parts, message.UserText(r.prompt))
		r.promptLast = true
	}
	return message.NewRequest(parts...), nil, nil
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
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
	info          *RunInfo

	// logOnce builds log, the agent's logger with the run's IDs, when the
	// run first logs: most runs never do.
	logOnce sync.Once
	log     *slog.Logger

	runID, convID string
	newFrom       int
	// promptLast is set while the first request ends with the run's
	// prompt: the parts hooks add (follow-ups) go before it, so that the
	// new prompt stays the last thing the model reads.
	promptLast bool

	// emitMu serialises the events; finalSent, under it, is the one owner
	// of "the run has ended" for observers: nothing is emitted after the
	// final event.
	emitMu    sync.Mutex
	finalSent bool

	// mu guards the fields below; see state.go.
	mu        sync.Mutex
	history   message.History
	usage     message.Usage
	retries   map[string]int
	asap      [][]message.Content
	whenIdle  [][]message.Content
	cancelled bool
	ended     bool // the run has returned: Enqueue refuses, Cancel is moot
	cancelRun context.CancelCauseFunc
}

func newRun(a *Agent, prompt string, opts *RunOptions) *run {
	r := &run{
		a:             a,
		prompt:        prompt,
		opts:          opts,
		caps:          append(slices.Clone(a.cfg.Capabilities), opts.Capabilities...),
		limits:        a.cfg.Limits,
		allowDeferred: a.cfg.AllowDeferred || opts.AllowDeferred,
		runID:         ulid.Make().String(),
		history:       slices.Grow(repairDangling(opts.History), 8), // room for a few steps' messages
		retries:       map[string]int{},
	}
	if opts.Limits != nil {
		r.limits = *opts.Limits
	}
	r.convID = opts.ConversationID
	if r.convID == "" {
		for i := len(r.history) - 1; i >= 0; i-- {
			if id := r.history[i].ConversationID; id != "" {
				r.convID = id
				break
			}
		}
	}
	if r.convID == "" {
		r.convID = ulid.Make().String()
	}
	r.newFrom = len(r.history)
	r.info = &RunInfo{RunID: r.runID, ConversationID: r.convID, Deps: opts.Deps, r: r}
	return r
}

// logger returns the agent's logger with the run's IDs.
func (r *run) logger() *slog.Logger {
	r.logOnce.Do(func() {
		r.log = r.a.log.With(slog.String("run_id", r.runID), slog.String("conversation_id", r.convID))
	})
	return r.log
}

func (r *run) emit(e Event) {
	if r.opts.OnEvent == nil {
		return
	}
	e.RunID, e.ConversationID = r.runID, r.convID
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
	r.mu.Lock()
	r.cancelled = true
	cancel := r.cancelRun
	r.mu.Unlock()
	if cancel != nil {
		cancel(ErrRunCancelled)
	}
}

// Enqueue implements tool.RunControl.
func (r *run) Enqueue(p tool.Priority, content ...message.Content) error {
	if len(content) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return tool.ErrNoRun
	}
	if p == tool.PriorityWhenIdle {
		r.whenIdle = append(r.whenIdle, slices.Clone(content))
	} else {
		r.asap = append(r.asap, slices.Clone(content))
	}
	return nil
}

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
	r.mu.Lock()
	r.cancelRun = cancel
	r.mu.Unlock()

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
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
	r.emit(Event{Type: EventFinal, Final: finalOf(res, err)})
	if err != nil {
		return res, err
	}
	return res, nil
}

// runError turns a context error caused by Cancel into ErrRunCancelled.
func (r *run) runError(ctx context.Context, err error) error {
	r.mu.Lock()
	cancelled := r.cancelled
	r.mu.Unlock()
	if cancelled && (errors.Is(err, context.Canceled) || errors.Is(err, ErrRunCancelled)) {
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
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Result{
		Output:         output,
		Deferred:       reqs,
		Messages:       slices.Clone(r.history),
		Usage:          r.usage,
		RunID:          r.runID,
		ConversationID: r.convID,
		newFrom:        r.newFrom,
	}
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
	f := &Final{Output: res.Output, Usage: res.Usage, Status: StatusFinished, ExitCode: 0}
	switch {
	case err != nil && errors.Is(err, context.Canceled) && !errors.Is(err, ErrRunCancelled):
		f.Status, f.ExitCode, f.Error = StatusInterrupted, 130, err.Error()
	case err != nil:
		f.Status, f.ExitCode, f.Error = StatusFailed, 1, err.Error()
		var ue *UserError
		if errors.As(err, &ue) {
			f.ExitCode = 2
		}
	case res.Paused():
		f.Status, f.ExitCode = StatusPaused, 3
		f.Pending = PendingOf(res.Deferred)
		for _, b := range res.Background {
			f.Pending = append(f.Pending, Pending{TaskID: b.TaskID, ToolCallID: b.ToolCallID, Kind: b.Kind, Tool: b.Tool, Args: b.Args})
		}
	}
	return f
}

// PendingOf lists deferred requests as final-event entries: approvals
// first, then external calls.
func PendingOf(reqs *deferred.Requests) []Pending {
	if reqs == nil {
		return nil
	}
	var out []Pending
	add := func(kind deferred.Kind, calls []message.ToolCall) {
		for _, c := range calls {
			out = append(out, Pending{TaskID: reqs.TaskIDs[c.ToolCallID], ToolCallID: c.ToolCallID, Kind: kind, Tool: c.ToolName, Args: c.ArgsJSON()})
		}
	}
	add(deferred.KindApproval, reqs.Approvals)
	add(deferred.KindExternal, reqs.Calls)
	return out
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
		resp, err := r.request(ctx, req)
		if errors.Is(err, errSuspend) {
			// Suspended while a hook waited (a resumed run waiting for
			// its background tasks): what req carried was kept.
			return r.suspended(), nil
		}
		if err != nil {
			return nil, err
		}
		if len(resp.ToolCalls()) > 0 {
			parts, reqs, err := r.step(ctx, r.lastIndex(), nil)
			if err != nil {
				return nil, err
			}
			if reqs != nil {
				return r.pause(ctx, parts, reqs)
			}
			more, err := r.afterStep(ctx, false)
			if err != nil {
				r.keep(message.NewRequest(parts...))
				if errors.Is(err, errSuspend) {
					return r.suspended(), nil
				}
				return nil, err
			}
			req = message.NewRequest(append(parts, more...)...)
			continue
		}
		// The model answered without tool calls: the run ends unless queued
		// messages or capabilities keep it going.
		more, err := r.afterStep(ctx, true)
		if errors.Is(err, errSuspend) {
			return r.suspended(), nil
		}
		if err != nil {
			return nil, err
		}
		if queued := r.drainAtEnd(); len(queued) > 0 || len(more) > 0 {
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
	r.mu.Lock()
	cancelled := r.cancelled
	r.mu.Unlock()
	if cancelled {
		return ErrRunCancelled
	}
	return ctx.Err()
}

// errSuspend is returned by hooks (the background tasks' idle wait) that
// saw RunOptions.Suspend closed: the run returns suspended.
var errSuspend = errors.New("agent: run suspended")

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
	for _, q := range r.drainAtEnd() {
		r.appendMessage(message.NewRequest(message.UserPrompt{Content: q}))
	}
	res := r.result("", nil)
	res.Suspended = true
	return res
}

// keep records a request that will not be sent (the run ends first), so
// that the results it carries stay in the history.
func (r *run) keep(req message.Message) {
	if len(req.Parts) > 0 {
		r.appendMessage(req)
	}
}

// afterStep runs the StepHooks.
func (r *run) afterStep(ctx context.Context, final bool) ([]message.Part, error) {
	var parts []message.Part
	for _, c := range r.caps {
		if h, ok := c.(StepHook); ok {
			p, err := h.AfterStep(ctx, r.info, final)
			if err != nil {
				return nil, err
			}
			parts = append(parts, p...)
		}
	}
	return parts, nil
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
	for _, q := range r.drainAtEnd() {
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
	h := r.historySnapshot()
	if li := lastResponse(h); li >= 0 && len(unanswered(h, li)) > 0 {
		// Calls of the last response without a result (also after a
		// trailing request holding some results): a new prompt would send
		// the model a call without its result, so it is refused; without
		// one the calls are processed as a first pass (approvals are
		// deferred again, never dropped).
		if r.prompt != "" {
			return message.Message{}, nil, userErrorf(ErrPendingCalls, "Cannot provide a new user prompt when the message history contains unprocessed tool calls.")
		}
		parts, reqs, err := r.step(ctx, li, nil)
		if err != nil {
			return message.Message{}, nil, err
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

func (r *run) instructions() string {
	texts := []string{}
	if r.a.cfg.Instructions != "" {
		texts = append(texts, r.a.cfg.Instructions)
	}
	for _, c := range r.caps {
		if p, ok := c.(InstructionsProvider); ok {
			// Several capabilities of one kind give the same text once.
			if s := p.Instructions(); s != "" && !slices.Contains(texts, s) {
				texts = append(texts, s)
			}
		}
	}
	return strings.Join(texts, "\n\n")
}

// request sends req (plus queued asap messages) to the model and records the
// response.
func (r *run) request(ctx context.Context, req message.Message) (message.Message, error) {
	// The hooks see the whole request; what they add goes before the
	// run's prompt when the request ends with it.
	promptAt := -1
	if r.promptLast && len(req.Parts) > 0 {
		promptAt = len(req.Parts) - 1
	}
	r.promptLast = false
	for _, c := range r.caps {
		if h, ok := c.(ModelRequestHook); ok {
			err := h.BeforeModelRequest(ctx, r.info, &req)
			if err != nil {
				// The run ends here; the results req carries stay in the
				// history, so that a continued history does not run their
				// calls again.
				r.keep(promptLastOf(req, promptAt))
				return message.Message{}, err
			}
		}
	}
	req = promptLastOf(req, promptAt)
	r.mu.Lock()
	queued := r.asap
	r.asap = nil
	r.mu.Unlock()
	if len(req.Parts) > 0 {
		r.appendMessage(req)
	}
	for _, q := range queued {
		r.appendMessage(message.NewRequest(message.UserPrompt{Content: q}))
	}

	usage := r.usageSnapshot()
	if max := r.requestLimit(); max >= 0 && usage.Requests >= max {
		return message.Message{}, &UsageLimitExceeded{Limit: "request_limit", Max: max, Count: usage.Requests + 1}
	}
	tools, err := r.tools(ctx)
	if err != nil {
		return message.Message{}, err
	}
	lreq := &llm.Request{Messages: r.wireHistory(), Settings: r.a.cfg.Settings}
	lreq.OnRetry = r.onRetry
	if len(tools) > 0 {
		lreq.Tools = make([]llm.ToolDef, 0, len(tools))
	}
	for _, t := range tools {
		lreq.Tools = append(lreq.Tools, llm.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	r.emit(Event{Type: EventModelRequestStarted})
	var resp *llm.Response
	if r.a.cfg.Stream {
		resp, err = r.a.cfg.Model.Stream(ctx, lreq, func(d llm.Delta) {
			if d.Text != "" {
				r.emit(Event{Type: EventTextDelta, Delta: d.Text})
			}
		})
	} else {
		resp, err = r.a.cfg.Model.Generate(ctx, lreq)
	}
	r.mu.Lock()
	r.usage.Requests++
	r.mu.Unlock()
	if err != nil {
		return message.Message{}, fmt.Errorf("model %s: %w", r.a.cfg.Model.Name(), err)
	}
	m := message.NewResponse(resp.Parts...)
	m.ModelName, m.FinishReason, m.Usage = resp.ModelName, resp.FinishReason, resp.Usage
	if m.ModelName == "" {
		m.ModelName = r.a.cfg.Model.Name()
	}
	r.mu.Lock()
	r.usage.InputTokens += resp.Usage.InputTokens
	r.usage.OutputTokens += resp.Usage.OutputTokens
	usage = r.usage
	r.mu.Unlock()
	r.appendMessage(m)
	if err := r.checkTokens(usage); err != nil {
		return message.Message{}, err
	}
	return r.message(r.lastIndex()), nil
}

// promptLastOf moves the part at promptAt (the run's prompt) behind the
// parts the hooks appended after it; promptAt < 0 leaves req as it is.
func promptLastOf(req message.Message, promptAt int) message.Message {
	if promptAt < 0 || promptAt >= len(req.Parts)-1 {
		return req
	}
	parts := make([]message.Part, 0, len(req.Parts))
	parts = append(parts, req.Parts[:promptAt]...)
	parts = append(parts, req.Parts[promptAt+1:]...)
	req.Parts = append(parts, req.Parts[promptAt])
	return req
}

// onRetry reports a model request's retry as an event.
func (r *run) onRetry(rt llm.Retry) {
	r.emit(Event{Type: EventModelRequestRetry, Attempt: rt.Attempt, Reason: rt.Reason})
}

func (r *run) requestLimit() int {
	if r.limits.Requests == nil {
		return DefaultRequestLimit
	}
	return *r.limits.Requests
}

func (r *run) checkTokens(u message.Usage) error {
	check := func(limit *int, name string, n int) error {
		if limit != nil && n > *limit {
			return &UsageLimitExceeded{Limit: name, Max: *limit, Count: n}
		}
		return nil
	}
	// The first limit exceeded is the error: one clear message.
	if err := check(r.limits.InputTokens, "input_tokens_limit", u.InputTokens); err != nil {
		return err
	}
	if err := check(r.limits.OutputTokens, "output_tokens_limit", u.OutputTokens); err != nil {
		return err
	}
	return check(r.limits.TotalTokens, "total_tokens_limit", u.TotalTokens())
}

// tools returns the tools of this step: every toolset's, prepared by the
// capabilities. Duplicate names are an error.
func (r *run) tools(ctx context.Context) ([]*tool.Tool, error) {
	var all []*tool.Tool
	for _, ts := range r.a.cfg.Toolsets {
		tools, err := ts.Tools(ctx)
		if err != nil {
			return nil, fmt.Errorf("agent: list tools: %w", err)
		}
		all = append(all, tools...)
	}
	if name, dup := duplicateName(all); dup {
		return nil, &UserError{Message: fmt.Sprintf("agent: tool name %q is offered by more than one toolset", name)}
	}
	for _, c := range r.caps {
		if p, ok := c.(ToolsPreparer); ok {
			var err error
			if all, err = p.PrepareTools(ctx, r.info, all); err != nil {
				return nil, err
			}
		}
	}
	return all, nil
}

// duplicateName returns the first name that two of tools share, if any.
func duplicateName(tools []*tool.Tool) (string, bool) {
	if len(tools) <= 16 {
		for i, t := range tools {
			for _, u := range tools[:i] {
				if u.Name == t.Name {
					return t.Name, true
				}
			}
		}
		return "", false
	}
	seen := make(map[string]bool, len(tools))
	for _, t := range tools {
		if seen[t.Name] {
			return t.Name, true
		}
		seen[t.Name] = true
	}
	return "", false
}

// wireMessages prepares the history for the model: consecutive requests are
// merged (a paused run's trailing request and the resume's request, queued
// messages), and in every request tool results come before other parts, as
// OpenAI-compatible APIs require tool messages right after the assistant
// message that called them. A history that needs neither is returned as
// it is (capped, so that appending to it copies it).
func wireMessages(h message.History) []message.Message {
	if wireReady(h) {
		return h[:len(h):len(h)]
	}
	out := make([]message.Message, 0, len(h))
	for _, m := range h {
		if n := len(out); n > 0 && m.Role == message.RoleRequest && out[n-1].Role == message.RoleRequest {
			prev := out[n-1]
			prev.Parts = append(slices.Clone(prev.Parts), m.Parts...)
			out[n-1] = prev
			continue
		}
		out = append(out, m)
	}
	for i, m := range out {
		if m.Role != message.RoleRequest || resultsFirst(m.Parts) {
			continue
		}
		var results, rest []message.Part
		for _, p := range m.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				results = append(results, p)
			case message.RetryPrompt:
				if x.ToolCallID != "" {
					results = append(results, p)
					continue
				}
				rest = append(rest, p)
			default:
				rest = append(rest, p)
			}
		}
		m.Parts = append(results, rest...)
		out[i] = m
	}
	return out
}

// wireReady reports whether wireMessages would leave h as it is: no two
// requests in a row, and tool results first in every request.
func wireReady(h message.History) bool {
	for i, m := range h {
		if m.Role != message.RoleRequest {
			continue
		}
		if i > 0 && h[i-1].Role == message.RoleRequest || !resultsFirst(m.Parts) {
			return false
		}
	}
	return true
}

// resultsFirst reports whether no tool result (a tool return, or a retry
// prompt answering a call) follows another part in parts: wireMessages
// leaves such a request as it is.
func resultsFirst(parts []message.Part) bool {
	other := false
	for _, p := range parts {
		result := false
		switch x := p.(type) {
		case message.ToolReturn:
			result = true
		case message.RetryPrompt:
			result = x.ToolCallID != ""
		}
		if result && other {
			return false
		}
		other = other || !result
	}
	return true
}

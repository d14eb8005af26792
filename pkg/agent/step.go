package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// callKind classifies a tool call of a model response.
type callKind int

const (
	kindFunction callKind = iota // executed now
	kindUnknown                  // no such tool: a retry prompt
	kindApproval                 // RequiresApproval: deferred by kind
	kindExternal                 // external tool: deferred by kind
)

// deferredMetaKey is the key, in a response's Metadata, of the record of its
// deferred calls: tool call ID → {"kind", "task_id"}. It keeps task IDs
// stable across resumes and lets a resume check each result's category.
const deferredMetaKey = "offload.deferred"

// slot is the processing state of one tool call of a response.
type slot struct {
	index int
	call  message.ToolCall
	t     *tool.Tool
	kind  callKind

	args     json.RawMessage // validated arguments
	held     error           // a deferral raised by the args validator
	approved bool
	metadata map[string]any // ToolCallMetadata of an approved call

	part    message.Part      // the call's result part, once it has one
	content []message.Content // extra user content from a tool.Return

	deferKind deferred.Kind // set when the call is (still) deferred
	deferMeta map[string]any
	hasMeta   bool
	byKind    bool // deferred by its tool's kind rather than by raising

	callEmitted bool // its tool_call event was sent
	skip        bool // answered in the history already
	ran         bool // its tool was started
}

// stepState tracks the retry accounting of one step.
type stepState struct {
	mu     sync.Mutex
	failed map[string]bool
	ok     map[string]bool
}

// step handles the tool calls of the response at history[respIdx]. Without
// supplied results it is a first pass: function calls run, the others are
// deferred. With supplied results (a resume), every unprocessed call is
// answered from them. It returns the result parts for the next request and
// the deferred calls that remain unresolved, if any.
func (r *run) step(ctx context.Context, respIdx int, supplied *deferred.Results) ([]message.Part, *deferred.Requests, error) {
	resp := r.history[respIdx]
	tools, err := r.tools(ctx)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]*tool.Tool{}
	var names []string
	for _, t := range tools {
		byName[t.Name] = t
		names = append(names, "'"+t.Name+"'")
	}
	st := &stepState{failed: map[string]bool{}, ok: map[string]bool{}}
	var slots []*slot
	for i, c := range resp.ToolCalls() {
		s := &slot{index: i, call: c, t: byName[c.ToolName]}
		switch {
		case s.t == nil:
			s.kind = kindUnknown
		case s.t.Kind == tool.KindExternal:
			s.kind = kindExternal
		case s.t.RequiresApproval:
			s.kind = kindApproval
		}
		slots = append(slots, s)
	}
	defer r.endStep(st)
	done := answeredAfter(r.historySnapshot(), respIdx)
	for _, s := range slots {
		s.skip = done[s.call.ToolCallID]
	}

	fail := func(err error) ([]message.Part, *deferred.Requests, error) {
		// Record what ran, so that a continued history never repeats a
		// side effect; calls that did not run get cancelled returns.
		if errors.Is(err, context.Canceled) || errors.Is(err, ErrRunCancelled) || ranAny(slots) {
			r.cancelDangling(slots)
		}
		return nil, nil, err
	}
	var reqs *deferred.Requests
	if supplied == nil {
		reqs, err = r.firstPass(ctx, st, slots, names, respIdx)
	} else {
		reqs, err = r.resumePass(ctx, st, slots, names, respIdx, supplied)
	}
	if err != nil {
		return fail(err)
	}
	if reqs != nil {
		// Asking the handlers, like pausing, must not start once the run
		// was cancelled or interrupted.
		if err := r.alive(ctx); err != nil {
			return fail(err)
		}
		if reqs, err = r.resolveInline(ctx, st, slots, names, respIdx, reqs); err != nil {
			return fail(err)
		}
	}
	return resultParts(slots), reqs, nil
}

func ranAny(slots []*slot) bool {
	for _, s := range slots {
		if s.ran {
			return true
		}
	}
	return false
}

// cancelDangling answers every call left without a result by a step that
// ends the run with a synthetic cancelled return, so the history stays well
// formed and records the results of the calls that did run.
func (r *run) cancelDangling(slots []*slot) {
	var parts []message.Part
	for _, s := range slots {
		if s.skip {
			continue
		}
		if s.part == nil {
			s.part = cancelledReturn(s.call)
		}
		parts = append(parts, s.part)
	}
	for _, s := range slots {
		if !s.skip && len(s.content) > 0 {
			parts = append(parts, message.UserPrompt{Content: s.content})
		}
	}
	r.keep(message.NewRequest(parts...))
}

func resultParts(slots []*slot) []message.Part {
	var parts []message.Part
	for _, s := range slots {
		if s.part != nil {
			parts = append(parts, s.part)
		}
	}
	for _, s := range slots {
		if s.part != nil && len(s.content) > 0 {
			parts = append(parts, message.UserPrompt{Content: s.content})
		}
	}
	return parts
}

func (r *run) firstPass(ctx context.Context, st *stepState, slots []*slot, names []string, respIdx int) (*deferred.Requests, error) {
	var exec []*slot
	for _, s := range slots {
		if !s.skip && (s.kind == kindFunction || s.kind == kindUnknown) {
			exec = append(exec, s)
		}
	}
	if err := r.precheck(len(exec)); err != nil {
		return nil, err
	}
	var runnable []*slot
	for _, s := range exec {
		if err := r.validate(ctx, st, s, names, false); err != nil {
			return nil, err
		}
		if s.part == nil {
			runnable = append(runnable, s)
		}
	}
	if err := r.executeAll(ctx, st, runnable); err != nil {
		return nil, err
	}
	for _, k := range []callKind{kindExternal, kindApproval} {
		for _, s := range slots {
			if s.kind != k || s.skip {
				continue
			}
			if err := r.validate(ctx, st, s, names, true); err != nil {
				return nil, err
			}
			if s.part == nil {
				s.byKind = true
				s.deferKind = deferred.KindApproval
				if k == kindExternal {
					s.deferKind = deferred.KindExternal
				}
			}
		}
	}
	return r.collectDeferred(slots, respIdx)
}

// collectDeferred builds the requests of the deferred slots: in each
// category, calls that raised a deferral first, then those deferred by
// their tool's kind, each in emission order. Task IDs are minted here, or
// reused from the response's record when the call was deferred before.
func (r *run) collectDeferred(slots []*slot, respIdx int) (*deferred.Requests, error) {
	var pending []*slot
	for _, s := range slots {
		if s.deferKind != "" && s.part == nil && !s.byKind {
			pending = append(pending, s)
		}
	}
	for _, s := range slots {
		if s.deferKind != "" && s.part == nil && s.byKind {
			pending = append(pending, s)
		}
	}
	if len(pending) == 0 {
		return nil, nil
	}
	seen, dups := map[string]bool{}, map[string]bool{}
	for _, s := range pending {
		if seen[s.call.ToolCallID] {
			dups[s.call.ToolCallID] = true
		}
		seen[s.call.ToolCallID] = true
	}
	if len(dups) > 0 {
		return nil, &UnexpectedModelBehavior{Message: "Deferred tool calls must have unique tool_call_id values; duplicate ids: " + idList(keys(dups))}
	}
	reqs := &deferred.Requests{Metadata: map[string]map[string]any{}, TaskIDs: map[string]string{}}
	record := r.deferredRecord(respIdx)
	for _, s := range pending {
		id := s.call.ToolCallID
		if s.deferKind == deferred.KindApproval {
			reqs.Approvals = append(reqs.Approvals, s.call)
		} else {
			reqs.Calls = append(reqs.Calls, s.call)
		}
		if s.hasMeta {
			reqs.Metadata[id] = tool.DeepCopy(s.deferMeta)
		}
		taskID := record[id].TaskID
		if taskID == "" {
			taskID = ulid.Make().String()
		}
		reqs.TaskIDs[id] = taskID
		record[id] = deferredEntry{Kind: s.deferKind, TaskID: taskID}
	}
	r.setDeferredRecord(respIdx, record)
	return reqs, nil
}

type deferredEntry struct {
	Kind   deferred.Kind `json:"kind"`
	TaskID string        `json:"task_id"`
}

// deferredRecord reads the record of deferred calls kept in the response's
// metadata (it survives a JSON round trip as map[string]any).
func (r *run) deferredRecord(respIdx int) map[string]deferredEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return readDeferredRecord(r.history[respIdx])
}

func readDeferredRecord(m message.Message) map[string]deferredEntry {
	out := map[string]deferredEntry{}
	raw, ok := m.Metadata[deferredMetaKey]
	if !ok {
		return out
	}
	b, err := json.Marshal(raw)
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

func (r *run) setDeferredRecord(respIdx int, rec map[string]deferredEntry) {
	m := map[string]any{}
	for id, e := range rec {
		m[id] = map[string]any{"kind": string(e.Kind), "task_id": e.TaskID}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := r.history[respIdx]
	md := tool.DeepCopy(msg.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md[deferredMetaKey] = m
	msg.Metadata = md
	r.history[respIdx] = msg
}

// resolveInline asks the DeferredHandler chain to resolve reqs, executes
// what it resolved, and returns what remains (including calls that deferred
// again).
func (r *run) resolveInline(ctx context.Context, st *stepState, slots []*slot, names []string, respIdx int, reqs *deferred.Requests) (*deferred.Requests, error) {
	r.emit(Event{Type: EventDeferredToolRequests, Requests: reqs.Clone()})
	var handlers []DeferredHandler
	for _, c := range r.caps {
		if h, ok := c.(DeferredHandler); ok {
			handlers = append(handlers, h)
		}
	}
	if len(handlers) == 0 {
		return reqs, nil
	}
	var acc *deferred.Results
	remaining := reqs
	rc := r.runContext(nil)
	for _, h := range handlers {
		res, err := h.HandleDeferred(ctx, rc, remaining.Clone())
		if err != nil {
			return nil, fmt.Errorf("deferred handler: %w", err)
		}
		if res.Empty() {
			continue
		}
		if acc == nil {
			acc = &deferred.Results{}
		}
		acc.Update(res)
		if remaining = reqs.Remaining(acc); remaining == nil {
			break
		}
	}
	if acc == nil {
		return reqs, nil
	}
	// Only answers for calls of this batch, in their own category, count.
	answered := &deferred.Results{Calls: map[string]any{}, Approvals: map[string]any{}, Metadata: acc.Metadata}
	for _, c := range reqs.Approvals {
		if v, ok := acc.Approvals[c.ToolCallID]; ok {
			if _, err := deferred.NormalizeApproval(v); err != nil {
				return nil, &UserError{Message: fmt.Sprintf("deferred handler: approval for %q: %v", c.ToolCallID, err), Err: err}
			}
			answered.Approvals[c.ToolCallID] = v
		}
	}
	for _, c := range reqs.Calls {
		if v, ok := acc.Calls[c.ToolCallID]; ok {
			answered.Calls[c.ToolCallID] = v
		}
	}
	r.emit(Event{Type: EventDeferredToolResults, Results: answered})
	var resolved []*slot
	for _, s := range slots {
		id := s.call.ToolCallID
		_, inA := answered.Approvals[id]
		_, inC := answered.Calls[id]
		if s.deferKind != "" && s.part == nil && (inA || inC) {
			resolved = append(resolved, s)
		}
	}
	// Approvals first, then external calls, as the reference does.
	for _, kind := range []deferred.Kind{deferred.KindApproval, deferred.KindExternal} {
		var group []*slot
		for _, s := range resolved {
			if s.deferKind == kind {
				group = append(group, s)
			}
		}
		if err := r.answer(ctx, st, group, names, answered, false); err != nil {
			return nil, err
		}
	}
	remaining = reqs.Remaining(answered)
	again, err := r.collectDeferred(resolved, respIdx)
	if err != nil {
		return nil, err
	}
	if again != nil {
		if remaining == nil {
			remaining = &deferred.Requests{Metadata: map[string]map[string]any{}, TaskIDs: map[string]string{}}
		}
		remaining.Approvals = append(remaining.Approvals, again.Approvals...)
		remaining.Calls = append(remaining.Calls, again.Calls...)
		for k, v := range again.Metadata {
			remaining.Metadata[k] = v
		}
		for k, v := range again.TaskIDs {
			remaining.TaskIDs[k] = v
		}
	}
	return remaining, nil
}

// answer applies supplied results to slots: approved calls are validated
// (with override arguments) and executed; denials, external values, retries
// and failures become result parts directly. emitCalls adds the tool_call
// events (a resume; the inline path emitted them in the first pass).
func (r *run) answer(ctx context.Context, st *stepState, slots []*slot, names []string, res *deferred.Results, emitCalls bool) error {
	var runnable []*slot
	for _, s := range slots {
		id := s.call.ToolCallID
		s.deferKind, s.deferMeta, s.hasMeta, s.byKind = "", nil, false, false
		s.callEmitted = !emitCalls
		if v, ok := res.Approvals[id]; ok {
			n, err := deferred.NormalizeApproval(v)
			if err != nil {
				return &UserError{Message: fmt.Sprintf("approval for tool call %q: %v", id, err), Err: err}
			}
			switch a := n.(type) {
			case deferred.ToolApproved:
				if s.t == nil {
					s.part = message.RetryPrompt{ToolName: s.call.ToolName, ToolCallID: id, Content: unknownToolText(s.call.ToolName, names)}
					r.emitCall(s, boolPtr(false))
					r.emitResult(s)
					continue
				}
				if s.t.Kind == tool.KindExternal {
					return &UserError{Message: tool.ErrExternal.Error(), Err: tool.ErrExternal}
				}
				s.approved = true
				s.metadata = tool.DeepCopy(res.Metadata[id])
				if a.OverrideArgs != nil {
					s.call.Args = string(a.OverrideArgs)
				}
				if err := r.validate(ctx, st, s, names, false); err != nil {
					return err
				}
				if s.part == nil {
					runnable = append(runnable, s)
				}
			case deferred.ToolDenied:
				s.part = message.ToolReturn{ToolName: s.call.ToolName, ToolCallID: id, Content: jsonString(a.Text()), Outcome: message.OutcomeDenied}
				if emitCalls {
					r.emitCall(s, nil)
				}
				r.emitResult(s)
			}
			continue
		}
		v := res.Calls[id]
		if emitCalls {
			r.emitCall(s, nil)
		}
		if err := r.supplied(s, v); err != nil {
			return err
		}
		r.emitResult(s)
	}
	return r.executeAll(ctx, st, runnable)
}

// supplied turns an external result into the call's result part. Supplied
// retries do not consume the retry budget.
func (r *run) supplied(s *slot, v any) error {
	id, name := s.call.ToolCallID, s.call.ToolName
	switch x := v.(type) {
	case *tool.ModelRetry:
		s.part = message.RetryPrompt{ToolName: name, ToolCallID: id, Content: x.Message}
	case *tool.ToolFailed:
		s.part = message.ToolReturn{ToolName: name, ToolCallID: id, Content: jsonString(x.Message), Outcome: message.OutcomeFailed}
	case message.RetryPrompt:
		x.ToolName, x.ToolCallID = name, id
		s.part = x
	default:
		part, content, err := returnPart(name, id, v)
		if err != nil {
			return &UserError{Message: fmt.Sprintf("result for tool call %q: %v", id, err), Err: err}
		}
		s.part, s.content = part, content
	}
	return nil
}

// precheck refuses a batch of n calls that would exceed the tool call limit.
func (r *run) precheck(n int) error {
	if n == 0 || r.limits.ToolCalls == nil {
		return nil
	}
	projected := r.usageSnapshot().ToolCalls + n
	if projected > *r.limits.ToolCalls {
		return &UsageLimitExceeded{Limit: "tool_calls_limit", Max: *r.limits.ToolCalls, Count: projected}
	}
	return nil
}

// validate checks a call's arguments (schema, then the args validator) and
// emits its tool_call event. A failure gives the slot a retry part (or a
// failed return); kindDeferred ignores a deferral raised by the validator
// (the call is deferred by its kind anyway).
func (r *run) validate(ctx context.Context, st *stepState, s *slot, names []string, kindDeferred bool) error {
	fail := func(msg string) error {
		max := tool.DefaultRetries
		if s.t != nil {
			max = s.t.Retries
		}
		if err := r.consumeRetry(st, s.call.ToolName, max); err != nil {
			r.emitCall(s, boolPtr(false))
			return err
		}
		s.part = message.RetryPrompt{ToolName: s.call.ToolName, ToolCallID: s.call.ToolCallID, Content: msg}
		r.emitCall(s, boolPtr(false))
		r.emitResult(s)
		return nil
	}
	if s.t == nil {
		return fail(unknownToolText(s.call.ToolName, names))
	}
	args, err := s.t.ParseArgs(s.call.Args)
	if err != nil {
		return fail(validationText(err))
	}
	s.args = args
	if s.t.Validator != nil {
		_, verr := protect(func() (any, error) { return nil, s.t.Validator(ctx, r.runContext(s), args) })
		var retry *tool.ModelRetry
		var inval *tool.ValidationError
		var ar *tool.ApprovalRequired
		var cd *tool.CallDeferred
		switch {
		case verr == nil:
		case errors.As(verr, &retry):
			return fail(retry.Message)
		case errors.As(verr, &inval):
			return fail(validationText(inval))
		case errors.As(verr, &ar), errors.As(verr, &cd):
			if !kindDeferred && !s.approved {
				s.held = verr
			}
		default:
			if err := r.unexpected(s, verr); err != nil {
				r.emitCall(s, boolPtr(false))
				return err
			}
			r.emitCall(s, boolPtr(false))
			r.emitResult(s)
			return nil
		}
	}
	r.emitCall(s, boolPtr(true))
	return nil
}

func unknownToolText(name string, names []string) string {
	if len(names) == 0 {
		return fmt.Sprintf("Unknown tool name: '%s'. No tools available.", name)
	}
	return fmt.Sprintf("Unknown tool name: '%s'. Available tools: %s", name, strings.Join(names, ", "))
}

func validationText(err error) string {
	return "Invalid arguments: " + err.Error()
}

func (r *run) consumeRetry(st *stepState, name string, max int) error {
	r.mu.Lock()
	used := r.retries[name]
	r.mu.Unlock()
	if used >= max {
		return retriesExceeded(name, max)
	}
	st.mu.Lock()
	st.failed[name] = true
	st.mu.Unlock()
	return nil
}

// endStep applies the step's retry accounting: a tool that failed in the
// step uses one more retry; a tool that only succeeded starts over.
func (r *run) endStep(st *stepState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range st.failed {
		r.retries[name]++
	}
	for name := range st.ok {
		if !st.failed[name] {
			delete(r.retries, name)
		}
	}
}

func (r *run) runContext(s *slot) *tool.RunContext {
	rc := &tool.RunContext{
		RunID:          r.runID,
		ConversationID: r.convID,
		Usage:          r.usageSnapshot(),
		Deps:           r.opts.Deps,
		Control:        r,
	}
	if s != nil {
		rc.ToolCallID, rc.ToolName = s.call.ToolCallID, s.call.ToolName
		rc.ToolCallApproved = s.approved
		rc.ToolCallMetadata = s.metadata
		if s.t != nil {
			rc.MaxRetries = s.t.Retries
		}
		r.mu.Lock()
		rc.Retry = r.retries[s.call.ToolName]
		r.mu.Unlock()
	}
	return rc
}

// executeAll runs the slots' tools: concurrently, except that a sequential
// tool runs alone. The first fatal error cancels the others.
func (r *run) executeAll(ctx context.Context, st *stepState, slots []*slot) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var batch []*slot
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var wg sync.WaitGroup
		errs := make([]error, len(batch))
		// Starting a group of tools is a side effect: none starts once the
		// run was cancelled or interrupted.
		if err := r.alive(ctx); err != nil {
			batch = nil
			return err
		}
		for i, s := range batch {
			s.ran = s.held == nil
			wg.Go(func() {
				if err := r.runCall(ctx, st, s); err != nil {
					errs[i] = err
					cancel(err)
				}
			})
		}
		wg.Wait()
		batch = nil
		return firstError(errs)
	}
	for _, s := range slots {
		if s.t != nil && s.t.Sequential {
			if err := flush(); err != nil {
				return err
			}
			batch = []*slot{s}
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		batch = append(batch, s)
	}
	return flush()
}

// firstError prefers a real failure over the cancellations it caused.
func firstError(errs []error) error {
	var cancelled error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if cancelled == nil {
			cancelled = err
		}
	}
	return cancelled
}

// runCall runs one call (through the ToolCallWrappers) and records its
// outcome. It returns only fatal errors.
func (r *run) runCall(ctx context.Context, st *stepState, s *slot) error {
	var val any
	var err error
	if s.held != nil {
		err, s.held = s.held, nil
	} else {
		if r.opts.OnEvent != nil {
			// Only an observed run turns progress into events; without a
			// reporter, remote calls skip relaying their workers' reports.
			ctx = progress.WithReporter(ctx, callProgress{r: r, s: s})
		}
		call := &ToolCall{Tool: s.t, Call: s.call, Args: s.args, RunContext: r.runContext(s)}
		next := func(ctx context.Context, c *ToolCall) (any, error) {
			return c.Tool.Run(ctx, c.RunContext, c.Args)
		}
		for i := len(r.caps) - 1; i >= 0; i-- {
			if w, ok := r.caps[i].(ToolCallWrapper); ok {
				inner := next
				next = func(ctx context.Context, c *ToolCall) (any, error) { return w.WrapToolCall(ctx, c, inner) }
			}
		}
		val, err = protect(func() (any, error) { return next(ctx, call) })
	}
	if err := r.outcome(ctx, st, s, val, err); err != nil {
		return err
	}
	if s.part != nil {
		r.emitResult(s)
	}
	return nil
}

// outcome interprets what a tool returned.
func (r *run) outcome(ctx context.Context, st *stepState, s *slot, val any, err error) error {
	name, id := s.call.ToolName, s.call.ToolCallID
	var retry *tool.ModelRetry
	var failed *tool.ToolFailed
	var ar *tool.ApprovalRequired
	var cd *tool.CallDeferred
	var inval *tool.ValidationError
	switch {
	case err == nil:
		part, content, merr := returnPart(name, id, val)
		if merr != nil {
			return r.unexpected(s, merr)
		}
		s.part, s.content = part, content
		r.addToolCalls(1)
		st.mu.Lock()
		st.ok[name] = true
		st.mu.Unlock()
	case errors.As(err, &ar):
		s.deferKind, s.deferMeta, s.hasMeta = deferred.KindApproval, tool.DeepCopy(ar.Metadata), ar.Metadata != nil
	case errors.As(err, &cd):
		s.deferKind, s.deferMeta, s.hasMeta = deferred.KindExternal, tool.DeepCopy(cd.Metadata), cd.Metadata != nil
	case errors.As(err, &retry):
		if e := r.consumeRetry(st, name, s.t.Retries); e != nil {
			return e
		}
		s.part = message.RetryPrompt{ToolName: name, ToolCallID: id, Content: retry.Message}
	case errors.As(err, &inval):
		if e := r.consumeRetry(st, name, s.t.Retries); e != nil {
			return e
		}
		s.part = message.RetryPrompt{ToolName: name, ToolCallID: id, Content: validationText(inval)}
	case errors.As(err, &failed):
		s.part = message.ToolReturn{ToolName: name, ToolCallID: id, Content: jsonString(failed.Message), Outcome: message.OutcomeFailed}
	case errors.Is(err, ErrRunCancelled), ctx.Err() != nil && errors.Is(err, context.Canceled):
		return err
	default:
		return r.unexpected(s, err)
	}
	return nil
}

// unexpected handles an error that is not a tool outcome: logged with its
// message; the model sees only the error's type. With FailOnToolError it
// ends the run.
func (r *run) unexpected(s *slot, err error) error {
	typ := tool.ErrorType(err)
	r.log.Error("tool failed", slog.String("tool", s.call.ToolName), slog.String("tool_call_id", s.call.ToolCallID), slog.String("error_type", typ), slog.Any("error", err))
	if r.a.cfg.FailOnToolError {
		return fmt.Errorf("tool %s: %w", s.call.ToolName, err)
	}
	s.part = message.ToolReturn{ToolName: s.call.ToolName, ToolCallID: s.call.ToolCallID, Content: jsonString(typ), Outcome: message.OutcomeFailed}
	return nil
}

// returnPart turns a tool's return value into a result part and extra user
// content.
func returnPart(name, id string, val any) (message.ToolReturn, []message.Content, error) {
	var content []message.Content
	var md map[string]any
	switch x := val.(type) {
	case tool.Return:
		val, content, md = x.Value, x.Content, x.Metadata
	case *tool.Return:
		if x == nil {
			val = nil
			break
		}
		val, content, md = x.Value, x.Content, x.Metadata
	}
	var raw json.RawMessage
	if r, ok := val.(json.RawMessage); ok {
		if len(r) == 0 {
			r = json.RawMessage("null")
		}
		if !json.Valid(r) {
			return message.ToolReturn{}, nil, errors.New("return value is not valid JSON")
		}
		raw = r
	} else {
		b, err := json.Marshal(val)
		if err != nil {
			return message.ToolReturn{}, nil, fmt.Errorf("marshal return value: %w", err)
		}
		raw = b
	}
	return message.ToolReturn{ToolName: name, ToolCallID: id, Content: raw, Outcome: message.OutcomeSuccess, Metadata: tool.DeepCopy(md)}, slices.Clone(content), nil
}

func (r *run) emitCall(s *slot, valid *bool) {
	if s.callEmitted {
		return
	}
	s.callEmitted = true
	r.emit(Event{Type: EventToolCall, ToolCallID: s.call.ToolCallID, Tool: s.call.ToolName, Args: json.RawMessage(s.call.Args), ArgsValid: valid})
}

func (r *run) emitResult(s *slot) {
	e := Event{Type: EventToolResult, ToolCallID: s.call.ToolCallID, Tool: s.call.ToolName}
	switch p := s.part.(type) {
	case message.ToolReturn:
		e.Outcome, e.Content = string(p.Outcome), p.Content
	case message.RetryPrompt:
		e.Outcome, e.Content = "retry", jsonString(p.Content)
	}
	r.emit(e)
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

func boolPtr(b bool) *bool { return &b }

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func idList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = "'" + id + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// callProgress turns a running call's progress reports (its own, or relayed
// from the worker running it) into progress events.
type callProgress struct {
	r *run
	s *slot
}

func (p callProgress) Report(message string, fraction *float64) { p.ReportTask("", message, fraction) }

func (p callProgress) ReportTask(taskID, message string, fraction *float64) {
	p.r.emit(Event{Type: EventProgress, TaskID: taskID, ToolCallID: p.s.call.ToolCallID, Tool: p.s.call.ToolName, Message: message, Fraction: fraction})
}

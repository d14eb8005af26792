package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// deferredMetaKey is the key, in a response's Metadata, of the record of its
// deferred calls: tool call ID → {"kind", "task_id"}. It keeps task IDs
// stable across resumes and lets a resume check each result's category.
const deferredMetaKey = "offload.deferred"

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
	// A deferred call's ID must name it alone in the response: a decision
	// or result for it could not be told from another call's (one that
	// ran would even refuse it as already executed).
	uses, dups := make(map[string]int, len(slots)), map[string]bool{}
	for _, s := range slots {
		uses[s.call.ToolCallID]++
	}
	for _, s := range pending {
		if uses[s.call.ToolCallID] > 1 {
			dups[s.call.ToolCallID] = true
		}
	}
	if len(dups) > 0 {
		return nil, &UnexpectedModelBehavior{Message: "Deferred tool calls must have unique tool_call_id values; duplicate ids: " + idList(keys(dups))}
	}
	reqs := &deferred.Requests{Metadata: map[string]map[string]any{}, TaskIDs: map[string]string{}}
	record := r.state.deferredRecord(respIdx)
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
		entry := record[id]
		if s.deferTask != "" && s.deferTask == entry.TaskID {
			// Deferred again by the task it ran as (approved, its attempt
			// became an unknown effect): once resolved, the next attempt.
			entry.Attempt = max(entry.Attempt, s.attempt+1)
		}
		if entry.TaskID == "" {
			entry.TaskID = s.deferTask
			switch {
			case entry.TaskID != "":
				// The tool ran as a task that asked to be deferred: once
				// resolved, the call is that task's next attempt.
				entry.Attempt = s.attempt + 1
			case s.dispatchID != "":
				entry.TaskID = s.dispatchID // named when it was validated
			case s.taskID != "":
				// Named as a task by a preparer, but held back by its args
				// validator before it started: its tool_call event showed
				// this ID.
				entry.TaskID = s.taskID
			case s.stepTask != "":
				entry.TaskID = s.stepTask // named by its recorded step
			default:
				entry.TaskID = ulid.Make().String()
			}
		}
		entry.Kind = s.deferKind
		entry.AnswerNext = s.deferKind == deferred.KindExternal && tool.AnswersNextAttempt(s.deferMeta)
		entry.AnswerHolder = ""
		if entry.AnswerNext {
			entry.AnswerHolder, _ = s.deferMeta[tool.AnswerHolderMetaKey].(string)
		}
		entry.Effect = ""
		if v, _ := s.deferMeta[tool.EffectMetaKey].(string); v == tool.EffectUnknown {
			entry.Effect = v
		}
		reqs.TaskIDs[id] = entry.TaskID
		record[id] = entry
	}
	r.state.setDeferredRecord(respIdx, record)
	return reqs, nil
}

type deferredEntry struct {
	Kind   deferred.Kind `json:"kind"`
	TaskID string        `json:"task_id"`
	// Attempt is the attempt the call's task takes when it runs once
	// resolved: 1 after a worker's deferral of attempt 0.
	Attempt int `json:"attempt,omitempty"`
	// Effect is tool.EffectUnknown for a call whose worker stopped
	// while running it (SPEC §13): denied, the model is told its outcome
	// is unknown.
	Effect string `json:"effect,omitempty"`
	// AnswerNext marks an external call whose answer goes to its task's
	// next attempt instead of being its result (tool.AnswersNextAttempt).
	AnswerNext bool `json:"answer_next,omitempty"`
	// AnswerHolder is the worker that holds such a call's open work
	// (tool.AnswerHolderMetaKey), named on the answer's attempt.
	AnswerHolder string `json:"answer_holder,omitempty"`
}

// deferredRecord reads the record of deferred calls kept in the response's
// metadata (it survives a JSON round trip as map[string]any).
func (s *runState) deferredRecord(respIdx int) map[string]deferredEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return readDeferredRecord(s.history[respIdx])
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

// setResponseMeta sets key of the metadata of response respIdx of the
// history to v, on a copy (the message may be shared with a snapshot).
func (s *runState) setResponseMeta(respIdx int, key string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := s.history[respIdx]
	md := tool.DeepCopy(msg.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md[key] = v
	msg.Metadata = md
	s.history[respIdx] = msg
}

func (s *runState) setDeferredRecord(respIdx int, rec map[string]deferredEntry) {
	m := map[string]any{}
	for id, e := range rec {
		v := map[string]any{"kind": string(e.Kind), "task_id": e.TaskID}
		if e.Attempt > 0 {
			v["attempt"] = e.Attempt
		}
		if e.Effect != "" {
			v["effect"] = e.Effect
		}
		if e.AnswerNext {
			v["answer_next"] = true
		}
		if e.AnswerHolder != "" {
			v["answer_holder"] = e.AnswerHolder
		}
		m[id] = v
	}
	s.setResponseMeta(respIdx, deferredMetaKey, m)
}

// resolveInline asks the DeferredHandler chain to resolve reqs, executes
// what it resolved, and returns what remains (including calls that deferred
// again).
func (r *run) resolveInline(ctx context.Context, st *stepState, slots []*slot, names []string, respIdx int, reqs *deferred.Requests) (*deferred.Requests, error) {
	r.emit(Event{Type: EventDeferredToolRequests, Requests: reqs.Clone()})
	// Held calls (non-blocking ones, SPEC §12) leave the step with their
	// acknowledgement; their outcomes come as follow-ups.
	reqs, err := r.hold(ctx, slots, respIdx, reqs)
	if err != nil || reqs == nil {
		return nil, err
	}
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
				return nil, approvalError(fmt.Sprintf("deferred handler: approval for %q: %v", c.ToolCallID, err), err)
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
			s.deferredTaskID = reqs.TaskIDs[id]
			entry := r.state.deferredRecord(respIdx)[id]
			s.attempt, s.effect, s.answerNext, s.answerHolder = entry.Attempt, entry.Effect, entry.AnswerNext, entry.AnswerHolder
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
				return approvalError(fmt.Sprintf("approval for tool call %q: %v", id, err), err)
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
					override := string(a.OverrideArgs)
					s.override = &override
				}
				if err := r.validate(ctx, st, s, names, false); err != nil {
					return err
				}
				if s.part == nil {
					runnable = append(runnable, s)
				}
			case deferred.ToolDenied:
				text := a.Text()
				if s.effect == tool.EffectUnknown {
					// SPEC §13: the model is told the outcome is unknown,
					// and why, with the person's reason if they gave one.
					text = deferred.UnknownEffectText(s.call.ToolName)
					if a.Message != "" {
						text += " " + a.Message
					}
				}
				s.part = message.ToolReturn{ToolName: s.call.ToolName, ToolCallID: id, Content: jsonString(text), Outcome: message.OutcomeDenied}
				if emitCalls {
					r.emitCall(s, nil)
				}
				r.emitResult(s)
			}
			continue
		}
		v := res.Calls[id]
		if s.answerNext && s.t != nil {
			// The answer is the tool's input: the call runs again as its
			// task's next attempt, with the answer (tool.AnswerMetaKey).
			s.approved = true
			s.metadata = AnswerMetadata(v, s.answerHolder)
			if err := r.validate(ctx, st, s, names, false); err != nil {
				return err
			}
			if s.part == nil {
				runnable = append(runnable, s)
			}
			continue
		}
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
		part, content, err := ReturnPart(name, id, v)
		if err != nil {
			return &UserError{Message: fmt.Sprintf("result for tool call %q: %v", id, err), Err: err}
		}
		s.part, s.content = part, content
	}
	return nil
}

// AnswerMetadata is the ToolCallMetadata of the attempt that takes an
// answer v to an external call whose answer goes to its task's next
// attempt: the answer (tool.AnswerMetaKey, AnswerInput) and, when the
// deferral named one, the worker that holds the call
// (tool.AnswerHolderMetaKey), so that the attempt reaches it.
func AnswerMetadata(v any, holder string) map[string]any {
	md := map[string]any{tool.AnswerMetaKey: AnswerInput(v)}
	if holder != "" {
		md[tool.AnswerHolderMetaKey] = holder
	}
	return md
}

// AnswerInput is the answer to an external call whose answer goes to its
// task's next attempt (tool.AnswersNextAttempt), as that attempt gets it
// under tool.AnswerMetaKey: a value (a tool.Return's) accepts with it as
// the content, a failure or a retry declines with its message, a cancel
// cancels.
func AnswerInput(v any) map[string]any {
	switch x := v.(type) {
	case tool.Return:
		return AnswerInput(x.Value)
	case *tool.Return:
		return AnswerInput(x.Value)
	case json.RawMessage:
		var content any
		if err := json.Unmarshal(x, &content); err != nil {
			return map[string]any{"action": "decline", "message": "the answer is not JSON"}
		}
		return map[string]any{"action": "accept", "content": content}
	case *tool.TaskCancelled:
		return map[string]any{"action": "cancel"}
	case *tool.ToolFailed:
		return map[string]any{"action": "decline", "message": x.Message}
	case *tool.ModelRetry:
		return map[string]any{"action": "decline", "message": x.Message}
	case message.RetryPrompt:
		return map[string]any{"action": "decline", "message": x.Content}
	default:
		return map[string]any{"action": "accept", "content": v}
	}
}

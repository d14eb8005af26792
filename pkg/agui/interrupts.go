package agui

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/events"
	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/types"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// The reasons of this face's interrupts.
const (
	// ReasonToolCall is an approval's interrupt.
	ReasonToolCall = "tool_call"
	// ReasonInputRequired is an external call's.
	ReasonInputRequired = "input_required"
)

// fromStore ends the stream with what is stored of the conversation: a
// STATE_SNAPSHOT and a MESSAGES_SNAPSHOT, then RUN_FINISHED, whose
// outcome holds the interrupts of the calls that wait for people, or is
// success with output as the result. fin, when set, is the final event
// of the run that just ended: what it left pending is what waits (the
// people's record of it may be written a moment after the event).
func (s *stream) fromStore(output string, fin *coreEvent) error {
	st, err := s.f.cfg.Core.State(s.ctx, s.conv)
	if errors.Is(err, conversation.ErrNotFound) {
		st = &conversation.State{ID: s.conv}
	} else if err != nil {
		return s.fail(err)
	}
	calls, err := s.waiting(fin)
	if err != nil {
		return s.fail(err)
	}
	var interrupts []types.Interrupt
	waiting := []map[string]any{}
	for _, c := range calls {
		// A frontend tool's call (SPEC §18) is the frontend's to run: a
		// tool call its next input's tool message answers, no interrupt.
		frontend := c.Kind == deferred.KindExternal && st.FrontendTool(c.Tool)
		waiting = append(waiting, map[string]any{"task_id": c.TaskID, "kind": c.Kind, "tool": c.Tool,
			"tool_call_id": c.ToolCallID, "nonblocking": c.NonBlocking, "frontend": frontend})
		if slices.Contains(pending.ForPeople, c.Kind) && !c.NonBlocking && !frontend {
			interrupts = append(interrupts, s.interrupt(c))
		}
	}
	status := "finished"
	if len(calls) > 0 {
		status = "paused"
	}
	if output == "" {
		output = lastOutput(st.History)
	}
	snapshot := map[string]any{"conversation_id": s.conv, "agent": s.agent, "status": status, "pending": waiting}
	if err := s.send(events.NewStateSnapshotEvent(snapshot)); err != nil {
		return err
	}
	msgs := messagesOf(s.conv, st.History)
	if fin != nil && fin.Status == "finished" && fin.Output != "" && !endsWith(st.History, fin.Output) {
		// The run's last save not read (it failed: the final event is
		// told after it, session.Run): its answer, as the stream sent it.
		msgs = append(msgs, types.Message{ID: s.messageID(), Role: types.RoleAssistant, Content: fin.Output})
	}
	if err := s.send(events.NewMessagesSnapshotEvent(msgs)); err != nil {
		return err
	}
	if len(interrupts) > 0 {
		return s.send(events.NewRunFinishedEventWithOptions(s.thread, s.run, events.WithInterruptOutcome(interrupts)))
	}
	return s.send(events.NewRunFinishedEventWithOptions(s.thread, s.run, events.WithSuccessOutcome(), events.WithResult(output)))
}

// waiting returns the calls that wait: those fin left pending, as the
// desk tells them when their record holds them already (else as the
// event does, their expiry from their policy), or without fin the
// desk's.
func (s *stream) waiting(fin *coreEvent) ([]pending.Call, error) {
	if fin == nil {
		return s.f.cfg.Desk.Calls(s.ctx, pending.Filter{Conversation: s.conv})
	}
	out := make([]pending.Call, 0, len(fin.Pending))
	for _, t := range fin.Pending {
		c, err := s.f.cfg.Desk.Call(s.ctx, s.conv, t.TaskID)
		switch {
		case errors.Is(err, pending.ErrNotPending):
			c = &pending.Call{ConversationID: s.conv, Agent: s.agent, PendingTask: t}
			if t.Kind == deferred.KindApproval && t.Expiry != nil && t.Expiry.After > 0 {
				if at := c.Requested(); !at.IsZero() {
					c.Expires, c.OnTimeout = at.Add(t.Expiry.After), t.Expiry.OnTimeout
				}
			}
		case err != nil:
			return nil, err
		}
		out = append(out, *c)
	}
	return out, nil
}

// endsWith reports whether h ends with the model's answer output.
func endsWith(h message.History, output string) bool {
	return len(h) > 0 && h[len(h)-1].Role == message.RoleResponse && h[len(h)-1].Text() == output
}

// lastOutput is the text of h's last model response.
func lastOutput(h message.History) string {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Role == message.RoleResponse {
			return h[i].Text()
		}
	}
	return ""
}

// interrupt is waiting call c as an AG-UI interrupt: its id the task ID.
func (s *stream) interrupt(c pending.Call) types.Interrupt {
	digest, _ := protocol.ArgsDigest(c.Args)
	meta := map[string]any{"args_digest": digest, "tool": c.Tool, "args": c.Args, "conversation_id": s.conv}
	in := types.Interrupt{ID: c.TaskID, ToolCallID: c.ToolCallID, Metadata: meta}
	if c.Kind == deferred.KindExternal {
		in.Reason = ReasonInputRequired
		in.Message = fmt.Sprintf("%s(%s) waits for its answer", c.Tool, c.Args)
		in.ResponseSchema = map[string]any{"description": "the call's result: any JSON value, or an answer object {content, status?, message?} (SPEC §5.2)"}
		return in
	}
	in.Reason = ReasonToolCall
	override := map[string]any{"type": "object", "description": "the arguments to run the call with instead"}
	description := c.Description // the desk's, when the call's record is written already
	if s.f.cfg.Tools != nil {
		if tl, err := s.f.cfg.Tools(s.ctx, s.agent, c.Tool); err == nil && tl != nil {
			description = tl.Description
			var schema map[string]any
			if len(tl.Parameters) > 0 && json.Unmarshal(tl.Parameters, &schema) == nil {
				override = schema
			}
		}
	}
	in.Message = fmt.Sprintf("approve %s(%s)?", c.Tool, c.Args)
	if description != "" {
		in.Message += " " + description
	}
	in.ResponseSchema = map[string]any{
		"type": "object",
		"properties": map[string]any{
			"approved":      map[string]any{"type": "boolean"},
			"message":       map[string]any{"type": "string"},
			"override_args": override,
			"args_digest":   map[string]any{"type": "string", "description": "metadata.args_digest: the arguments decided on"},
		},
		"required": []string{"approved"},
	}
	if !c.Expires.IsZero() {
		in.ExpiresAt = c.Expires.UTC().Format(time.RFC3339Nano)
		meta["on_timeout"] = c.OnTimeout
	}
	if c.Required > 1 {
		meta["required"] = c.Required
	}
	return in
}

// resumeStep is a resume entry to publish, with the call it answers.
type resumeStep struct {
	entry types.ResumeEntry
	call  *pending.Call
}

// approvalPayload is a resume entry's payload for an approval.
type approvalPayload struct {
	Approved     *bool           `json:"approved"`
	Message      string          `json:"message"`
	OverrideArgs json.RawMessage `json:"override_args"`
	ArgsDigest   string          `json:"args_digest"`
}

// resume publishes the decisions and answers of entries, each through
// the desk (the one decision path), once every entry is checked: an
// entry of a call decided or answered already is answered from what is
// stored (nothing published again), one of a call whose approval expired
// or whose arguments changed is a RUN_ERROR naming it, and nothing of
// the input is published then. It streams the continuation.
func (s *stream) resume(st *conversation.State, c Caller, entries []types.ResumeEntry) error {
	if st == nil {
		return s.runError("not_found", fmt.Sprintf("thread %s has no conversation: nothing to resume", s.thread))
	}
	var steps []resumeStep
	for _, e := range entries {
		call, err := s.f.cfg.Desk.Call(s.ctx, s.conv, e.InterruptID)
		if errors.Is(err, pending.ErrNotPending) {
			by, found := session.DecidedBy(st, e.InterruptID)
			switch {
			case by == protocol.TimeoutDecider:
				return s.runError("expired", fmt.Sprintf("interrupt %s expired: its approval was not given in time and its timeout decided it", e.InterruptID))
			case !found:
				return s.runError("unknown_interrupt", fmt.Sprintf("interrupt %s is not a call of this thread", e.InterruptID))
			}
			continue // decided or answered already: nothing asked again
		}
		if err != nil {
			return s.fail(err)
		}
		if err := s.check(c, e, call); err != nil {
			return err
		}
		steps = append(steps, resumeStep{entry: e, call: call})
	}
	return s.follow(func() (bool, error) {
		published := false
		for _, st := range steps {
			err := s.publish(c, st)
			var re *conversation.RefusedError
			if errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate {
				continue // decided meanwhile, or the same resume twice at once
			}
			if err != nil {
				return false, fmt.Errorf("interrupt %s (%s): %w", st.entry.InterruptID, st.call.Tool, err)
			}
			published = true
		}
		if published {
			return true, nil
		}
		// Nothing new: a run still live carries on what was decided.
		cv, err := s.f.cfg.Core.Get(s.ctx, s.conv)
		return err == nil && cv.Status == conversation.StatusRunning, nil
	})
}

// check refuses entry e of call as a RUN_ERROR naming it: a call the
// caller's role may not settle, an approval expired, a decision for
// arguments that changed since.
func (s *stream) check(c Caller, e types.ResumeEntry, call *pending.Call) error {
	switch call.Kind {
	case deferred.KindApproval:
		if !c.Decide {
			return s.runError("forbidden", fmt.Sprintf("interrupt %s is an approval: only an approver decides it", e.InterruptID))
		}
		if !call.Expires.IsZero() && !s.f.cfg.Now().Before(call.Expires) {
			return s.runError("expired", fmt.Sprintf("interrupt %s expired at %s: it is decided by its timeout (%s)", e.InterruptID,
				call.Expires.UTC().Format(time.RFC3339), call.OnTimeout))
		}
		p, err := decodePayload[approvalPayload](e.Payload)
		if err != nil {
			return s.runError("bad_request", fmt.Sprintf("interrupt %s: the payload is not {approved, message?, override_args?, args_digest?}: %v", e.InterruptID, err))
		}
		if p.ArgsDigest != "" {
			digest, _ := protocol.ArgsDigest(call.Args)
			if p.ArgsDigest != digest {
				return s.runError(conversation.ReasonStale, fmt.Sprintf("interrupt %s: args_digest %s is not that of the arguments pending (%s): they changed since it was shown", e.InterruptID, p.ArgsDigest, digest))
			}
		}
	case deferred.KindExternal:
		if !c.Answer {
			return s.runError("forbidden", fmt.Sprintf("interrupt %s is an external call: only an answerer answers it", e.InterruptID))
		}
	default:
		return s.runError("bad_request", fmt.Sprintf("interrupt %s is a background task: it is not answered", e.InterruptID))
	}
	return nil
}

// publish publishes step's decision or answer through the desk.
func (s *stream) publish(c Caller, st resumeStep) error {
	e, call := st.entry, st.call
	if call.Kind == deferred.KindExternal {
		answer, err := answerOf(e, c.Name)
		if err != nil {
			return err
		}
		_, err = s.f.cfg.Desk.AnswerAs(s.ctx, s.conv, call.TaskID, answer, c.Name, protocol.ChannelAGUI) // attributed (SPEC §21)
		return err
	}
	p, _ := decodePayload[approvalPayload](e.Payload) // checked
	d := protocol.Decision{Approved: e.Status == types.ResumeStatusResolved && (p.Approved == nil || *p.Approved),
		Message: p.Message, By: c.Name, ArgsDigest: p.ArgsDigest, Channel: protocol.ChannelAGUI}
	if d.Approved && len(p.OverrideArgs) > 0 && string(p.OverrideArgs) != "null" {
		d.OverrideArgs = p.OverrideArgs
	}
	if e.Status == types.ResumeStatusCancelled && d.Message == "" {
		d.Message = "cancelled"
	}
	_, err := s.f.cfg.Desk.Decide(s.ctx, s.conv, call.TaskID, d)
	return err
}

// answerOf is the answer (SPEC §5.2) of an external call's resume entry:
// its payload when it is an answer object, else the payload as the
// content; a cancelled entry is an error answer.
func answerOf(e types.ResumeEntry, by string) ([]byte, error) {
	if e.Status == types.ResumeStatusCancelled {
		return json.Marshal(protocol.Result{Status: protocol.StatusError, Message: "cancelled by " + by, ErrorType: "cancelled"})
	}
	if m, ok := e.Payload.(map[string]any); ok {
		if _, has := m["content"]; has {
			return json.Marshal(m)
		}
	}
	content, err := json.Marshal(e.Payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]json.RawMessage{"content": content})
}

// decodePayload decodes a resume entry's payload (nil: the zero T).
func decodePayload[T any](payload any) (T, error) {
	var out T
	if payload == nil {
		return out, nil
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(raw, &out)
	return out, err
}

package a2aface

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// Input is the data part of a message to a task waiting for input: the
// decisions of its approvals and the answers of its external calls.
type Input struct {
	Decisions []Decision `json:"decisions,omitempty"`
	Answers   []Answer   `json:"answers,omitempty"`
}

// Decision decides an approval a task waits for.
type Decision struct {
	TaskID   string `json:"task_id"`
	Approved *bool  `json:"approved"`
	Message  string `json:"message,omitempty"`
	// OverrideArgs, with an approval, are the arguments to run the call
	// with instead (checked against the tool's schema).
	OverrideArgs json.RawMessage `json:"override_args,omitempty"`
	// ArgsDigest, if set, is the digest of the arguments decided on (the
	// pending entry's args_digest): a decision for arguments that
	// changed since is refused.
	ArgsDigest string `json:"args_digest,omitempty"`
}

// Answer answers an external call a task waits for: its content (any
// JSON value), as a tool's result (SPEC §5.2).
type Answer struct {
	TaskID  string          `json:"task_id"`
	Content json.RawMessage `json:"content"`
}

func (in Input) empty() bool { return len(in.Decisions) == 0 && len(in.Answers) == 0 }

// inputOf reads the decisions and answers of m's data parts.
func inputOf(m *a2a.Message) (Input, error) {
	var out Input
	for _, p := range m.Parts {
		d, ok := p.Content.(a2a.Data)
		if !ok {
			continue
		}
		raw, err := json.Marshal(d.Value)
		if err != nil {
			return out, fmt.Errorf("%w: a data part: %w", a2a.ErrInvalidParams, err)
		}
		var in Input
		if err := json.Unmarshal(raw, &in); err != nil {
			return out, fmt.Errorf("%w: a data part is not {decisions, answers}: %w", a2a.ErrInvalidParams, err)
		}
		out.Decisions = append(out.Decisions, in.Decisions...)
		out.Answers = append(out.Answers, in.Answers...)
	}
	return out, nil
}

// step is a decision or an answer to publish, with the call it settles.
type step struct {
	call     *pending.Call
	decision *Decision
	answer   *Answer
}

// input checks the decisions and answers in of m, a message to the
// caller's task m.TaskID, every one before any is published: a call
// settled already (decided elsewhere, or the same message again) is
// skipped, one that is not the task's, that the caller's role may not
// settle, whose approval expired or whose arguments changed refuses the
// whole message. Its act publishes them through the desk.
func (h *handler) input(ctx context.Context, m *a2a.Message, in Input) (*operation, error) {
	rec, err := h.load(ctx, m.TaskID)
	if err != nil {
		return nil, err
	}
	if m.ContextID != "" && m.ContextID != rec.ContextID {
		return nil, fmt.Errorf("%w: task %s is of context %s, not %s", a2a.ErrInvalidParams, m.TaskID, rec.ContextID, m.ContextID)
	}
	t, err := h.f.task(ctx, rec)
	if err != nil {
		return nil, err
	}
	if t.Status.State.Terminal() {
		return nil, fmt.Errorf("%w: task %s is %s: send a new message (no taskId) to go on in its context", a2a.ErrInvalidParams, m.TaskID, t.Status.State)
	}
	if in.empty() {
		return nil, fmt.Errorf(`%w: task %s takes input as a data part {"decisions":[…],"answers":[…]} (a new prompt: a message without taskId)`, a2a.ErrInvalidParams, m.TaskID)
	}
	st, err := h.f.cfg.Core.State(ctx, rec.Conversation)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var steps []step
	add := func(task string, s step) error {
		if seen[task] {
			return fmt.Errorf("%w: call %s is settled twice in the message", a2a.ErrInvalidParams, task)
		}
		seen[task] = true
		call, err := h.f.cfg.Desk.Call(ctx, rec.Conversation, task)
		if errors.Is(err, pending.ErrNotPending) {
			by, found := session.DecidedBy(st, task)
			switch {
			case by == protocol.TimeoutDecider:
				return fmt.Errorf("%w: call %s expired: its timeout decided it", a2a.ErrInvalidParams, task)
			case !found:
				return fmt.Errorf("%w: call %s is not a call this task waits for", a2a.ErrInvalidParams, task)
			}
			return nil // settled already: nothing asked again
		}
		if err != nil {
			return err
		}
		s.call = call
		if err := h.check(s); err != nil {
			return err
		}
		steps = append(steps, s)
		return nil
	}
	for i := range in.Decisions {
		if err := add(in.Decisions[i].TaskID, step{decision: &in.Decisions[i]}); err != nil {
			return nil, err
		}
	}
	for i := range in.Answers {
		if err := add(in.Answers[i].TaskID, step{answer: &in.Answers[i]}); err != nil {
			return nil, err
		}
	}
	msg := *m
	msg.ContextID = rec.ContextID
	if _, err := h.f.change(ctx, rec.Owner, rec.ID, func(r *Record) bool {
		if slices.ContainsFunc(r.History, func(x *a2a.Message) bool { return x.ID == m.ID }) {
			return false
		}
		r.History = append(r.History, kept(&msg))
		if len(r.History) > historyMax {
			r.History = r.History[len(r.History)-historyMax:]
		}
		return true
	}); err != nil {
		return nil, err
	}
	op := &operation{id: m.TaskID, rec: rec}
	op.act = func() (bool, error) {
		published := false
		for _, s := range steps {
			err := h.publish(ctx, rec.Conversation, s)
			var re *conversation.RefusedError
			if errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate {
				continue // decided meanwhile, or the same message twice at once
			}
			if err != nil {
				return false, fmt.Errorf("%w: call %s (%s): %w", a2a.ErrInvalidParams, s.call.TaskID, s.call.Tool, err)
			}
			published = true
		}
		if published {
			return true, nil
		}
		// Nothing new: a run still live carries on what was settled.
		cv, err := h.f.cfg.Core.Get(ctx, rec.Conversation)
		return err == nil && cv.Status == conversation.StatusRunning, nil
	}
	return op, nil
}

// check refuses step s: a call the caller's role may not settle, an
// approval expired or answered as an external call, a decision for
// arguments that changed since.
func (h *handler) check(s step) error {
	call := s.call
	switch call.Kind {
	case deferred.KindApproval:
		d := s.decision
		switch {
		case d == nil:
			return fmt.Errorf("%w: call %s is an approval: it takes a decision, not an answer", a2a.ErrInvalidParams, call.TaskID)
		case !h.c.Decide:
			return fmt.Errorf("%w: call %s is an approval: only an approver decides it", a2a.ErrUnauthorized, call.TaskID)
		case d.Approved == nil:
			return fmt.Errorf("%w: the decision of call %s has no approved", a2a.ErrInvalidParams, call.TaskID)
		case !call.Expires.IsZero() && !h.f.cfg.Now().Before(call.Expires):
			return fmt.Errorf("%w: call %s expired at %s: its timeout decides it (%s)", a2a.ErrInvalidParams, call.TaskID,
				call.Expires.UTC().Format(time.RFC3339), call.OnTimeout)
		}
		if d.ArgsDigest != "" {
			digest, _ := protocol.ArgsDigest(call.Args)
			if d.ArgsDigest != digest {
				return fmt.Errorf("%w: call %s: args_digest %s is not that of the arguments pending (%s): they changed since", a2a.ErrInvalidParams,
					call.TaskID, d.ArgsDigest, digest)
			}
		}
	case deferred.KindExternal:
		switch {
		case s.answer == nil:
			return fmt.Errorf("%w: call %s is an external call: it takes an answer, not a decision", a2a.ErrInvalidParams, call.TaskID)
		case !h.c.Answer:
			return fmt.Errorf("%w: call %s is an external call: only an answerer answers it", a2a.ErrUnauthorized, call.TaskID)
		case len(s.answer.Content) == 0:
			return fmt.Errorf("%w: the answer of call %s has no content", a2a.ErrInvalidParams, call.TaskID)
		}
	default:
		return fmt.Errorf("%w: call %s is a background task: it is not settled by a person", a2a.ErrInvalidParams, call.TaskID)
	}
	return nil
}

// publish publishes step s through the desk, by the caller, channel a2a.
func (h *handler) publish(ctx context.Context, conv string, s step) error {
	if s.answer != nil {
		data, err := json.Marshal(map[string]json.RawMessage{"content": s.answer.Content})
		if err != nil {
			return err
		}
		_, err = h.f.cfg.Desk.AnswerAs(ctx, conv, s.call.TaskID, data, h.c.Name, protocol.ChannelA2A)
		return err
	}
	d := s.decision
	dec := protocol.Decision{Approved: *d.Approved, Message: d.Message, By: h.c.Name, ArgsDigest: d.ArgsDigest, Channel: protocol.ChannelA2A}
	if dec.Approved && len(d.OverrideArgs) > 0 && string(d.OverrideArgs) != "null" {
		dec.OverrideArgs = d.OverrideArgs
	}
	_, err := h.f.cfg.Desk.Decide(ctx, conv, s.call.TaskID, dec)
	return err
}

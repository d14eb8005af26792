package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/protocol"
)

// run dispatches task (Nats-Msg-Id as the agent sets it) and waits for its
// first result; a failure outcome when none comes.
func (c *checker) run(ctx context.Context, task protocol.Task) (uint64, resultMsg, *Outcome) {
	seq, err := c.dispatch(ctx, task, protocol.TaskMsgID(task.TaskID, task.Attempt))
	if err != nil {
		o := fail("%v", err)
		return 0, resultMsg{}, &o
	}
	rs := c.awaitResults(ctx, task.ConversationID, 1, c.cfg.Timeout)
	if len(rs) == 0 {
		o := fail("%s", c.noResult(seq, c.cfg.Timeout))
		return seq, resultMsg{}, &o
	}
	return seq, rs[0], nil
}

// settledBy checks that the delivery of seq was settled with one of kinds.
func (c *checker) settledBy(ctx context.Context, seq uint64, kinds ...ackKind) *Outcome {
	a, ok := c.awaitSettled(ctx, seq, settleWait)
	if !ok {
		o := fail("result published, but the delivery was neither acked nor terminated within %s", settleWait)
		return &o
	}
	for _, k := range kinds {
		if a.kind == k {
			return nil
		}
	}
	o := fail("the delivery was settled with %s, want %v", a.kind, kinds)
	return &o
}

func (c *checker) task(ctx context.Context) Outcome {
	task := c.newTask(c.cfg.Args)
	seq, r, o := c.run(ctx, task)
	if o != nil {
		return *o
	}
	c.normal = &normalRun{task: task, res: r}
	if r.err != nil || r.res.Status != protocol.StatusOK {
		return fail("%s, want status ok for --args %s", describe(r), c.cfg.Args)
	}
	if o := c.settledBy(ctx, seq, ackAck); o != nil {
		return *o
	}
	return ok()
}

func (c *checker) resultTaskID(context.Context) Outcome {
	if c.normal == nil {
		return fail("no result to check (see the rule %q)", RuleRun)
	}
	task, r := c.normal.task, c.normal.res
	want := c.subj.Result(task.ConversationID, task.TaskID, task.Tool)
	if r.subject != want {
		return fail("result published on %s, want %s", r.subject, want)
	}
	var body struct {
		TaskID *string `json:"task_id"`
	}
	if err := json.Unmarshal(r.data, &body); err != nil {
		return fail("the result is not a JSON object: %s", r.data)
	}
	if body.TaskID != nil && *body.TaskID != task.TaskID {
		return fail("task_id %q in the result, want %q (or none)", *body.TaskID, task.TaskID)
	}
	return ok()
}

func (c *checker) resultMsgID(context.Context) Outcome {
	if c.normal == nil {
		return fail("no result to check (see the rule %q)", RuleRun)
	}
	task, r := c.normal.task, c.normal.res
	want := protocol.ResultMsgID(task.TaskID, 0)
	switch r.msgID {
	case want:
		return ok()
	case "":
		return fail("no Nats-Msg-Id on the result, want %s: the results stream cannot drop a redelivery's result", want)
	case protocol.ResultMsgID(task.TaskID, 1):
		return fail("Nats-Msg-Id %s, want %s: <attempt> is the task's attempt field, not the delivery count", r.msgID, want)
	}
	return fail("Nats-Msg-Id %s, want %s", r.msgID, want)
}

func (c *checker) attempt(ctx context.Context) Outcome {
	task := c.newTask(c.cfg.Args)
	task.Attempt = 2
	_, r, o := c.run(ctx, task)
	if o != nil {
		return *o
	}
	want := protocol.ResultMsgID(task.TaskID, task.Attempt)
	switch {
	case r.err != nil:
		return fail("%s", describe(r))
	case r.res.Attempt != task.Attempt:
		return fail("attempt %d in the result of a task of attempt %d: the agent refuses it (wrong_attempt)", r.res.Attempt, task.Attempt)
	case r.msgID != want:
		return fail("Nats-Msg-Id %q for a task of attempt %d, want %s", r.msgID, task.Attempt, want)
	}
	return ok()
}

// duplicate delivers one task twice (stored twice, as a redelivery reaches
// a worker) and checks that the results stream holds one result.
func (c *checker) duplicate(ctx context.Context) Outcome {
	task := c.newTask(c.cfg.Args)
	seq1, _, o := c.run(ctx, task)
	if o != nil {
		return *o
	}
	if o := c.settledBy(ctx, seq1, ackAck); o != nil {
		return *o
	}
	seq2, err := c.dispatch(ctx, task, task.TaskID+":conformance-copy")
	if err != nil {
		return fail("%v", err)
	}
	if _, ok := c.awaitSettled(ctx, seq2, c.cfg.Timeout); !ok {
		return fail("the second delivery of the task was neither acked nor terminated within %s", c.cfg.Timeout)
	}
	rs := c.awaitResults(ctx, task.ConversationID, 2, settleWait)
	n, err := c.stored(ctx, task.ConversationID)
	if err != nil {
		return fail("results stream: %v", err)
	}
	if n != 1 {
		ids := make([]string, 0, len(rs))
		for _, r := range rs {
			ids = append(ids, fmt.Sprintf("%q", r.msgID))
		}
		return fail("%d results stored for one task delivered twice (Nats-Msg-Id %v): each delivery's result must carry res:<task>:<attempt>", n, ids)
	}
	return ok()
}

func (c *checker) invalidArgs(ctx context.Context) Outcome {
	if c.entry == nil {
		return fail("no registry entry to read the schema from (see %s)", RuleRegistryEntry)
	}
	args, how, found := invalidArgs(c.entry.Parameters, c.cfg.Args)
	if !found {
		return skip("the tool's schema accepts every object: no arguments can be invalid")
	}
	task := c.newTask(args)
	seq, r, o := c.run(ctx, task)
	if o != nil {
		return *o
	}
	if r.err != nil || r.res.Status != protocol.StatusRetry || r.res.ErrorType != protocol.ErrorInvalidArguments || r.res.Message == "" {
		return fail("%s for arguments %s (%s), want status retry, error_type InvalidArguments and the validation message", describe(r), args, how)
	}
	if o := c.settledBy(ctx, seq, ackAck, ackTerm); o != nil {
		return *o
	}
	return ok()
}

func (c *checker) cancelBefore(ctx context.Context) Outcome {
	task := c.newTask(c.cfg.Args)
	if err := c.cancel(ctx, task); err != nil {
		return fail("%v", err)
	}
	seq, r, o := c.run(ctx, task)
	if o != nil {
		return *o
	}
	if r.err != nil || r.res.Status != protocol.StatusCancelled {
		return fail("%s for a task whose cancel was stored before it: look cancels up before running (direct get of the last message on %s)",
			describe(r), c.subj.Cancel(task.ConversationID, task.TaskID, task.Tool))
	}
	if o := c.settledBy(ctx, seq, ackTerm); o != nil {
		return *o
	}
	return ok()
}

func (c *checker) pastDeadline(ctx context.Context) Outcome {
	task := c.newTask(c.cfg.Args)
	task.Deadline = time.Now().Add(-time.Minute).UTC()
	seq, r, o := c.run(ctx, task)
	if o != nil {
		return *o
	}
	if r.err != nil || r.res.Status != protocol.StatusError || r.res.ErrorType != protocol.ErrorDeadlineExceeded {
		return fail("%s for a task past its deadline, want status error, error_type DeadlineExceeded, without running it", describe(r))
	}
	if o := c.settledBy(ctx, seq, ackAck, ackTerm); o != nil {
		return *o
	}
	return ok()
}

func (c *checker) cancelDuring(ctx context.Context) Outcome {
	task, seq, stop := c.slowDelivered(ctx)
	if stop != nil {
		return *stop
	}
	if rs := resultsOf(func() []resultMsg { items, _ := c.obs.results.snapshot(); return items }(), task.ConversationID); len(rs) > 0 {
		return fail("%s before the cancel: the slow arguments must run longer than the ack wait %s", describe(rs[0]), c.ackWait)
	}
	if err := c.cancel(ctx, task); err != nil {
		return fail("%v", err)
	}
	rs := c.awaitResults(ctx, task.ConversationID, 1, settleWait)
	if len(rs) == 0 {
		return fail("no result within %s of the cancel: a running task's cancel (core subscription to %s) must stop its tool",
			settleWait, c.subj.OfTool(protocol.KindCancel, task.Tool))
	}
	if rs[0].err != nil || rs[0].res.Status != protocol.StatusCancelled {
		return fail("%s after the cancel of the running task, want status cancelled", describe(rs[0]))
	}
	if o := c.settledBy(ctx, seq, ackTerm); o != nil {
		return *o
	}
	return ok()
}

func (c *checker) inProgress(ctx context.Context) Outcome {
	if len(c.cfg.SlowArgs) == 0 {
		return skip("no slow arguments (a call that runs longer than the ack wait %s)", c.ackWait)
	}
	task := c.newTask(c.cfg.SlowArgs)
	start := time.Now()
	seq, r, o := c.run(ctx, task)
	if o != nil {
		return *o
	}
	took := r.at.Sub(start)
	items, _ := c.obs.acks.snapshot()
	acks := acksOf(items, seq)
	var beats []time.Time
	for _, a := range acks {
		if a.delivered > 1 {
			return fail("the task was delivered again (delivery %d) while its first delivery ran: in-progress acks missing or too rare (ack wait %s)", a.delivered, c.ackWait)
		}
		if a.kind == ackInProgress {
			beats = append(beats, a.at)
		}
	}
	if took <= c.ackWait {
		return fail("%s after %s, within the ack wait %s: the slow arguments must run longer", describe(r), took.Round(time.Millisecond), c.ackWait)
	}
	if len(beats) == 0 {
		return fail("no in-progress ack during a run of %s (ack wait %s): send one every ack wait / 3", took.Round(time.Millisecond), c.ackWait)
	}
	prev := start
	for _, b := range append(beats, r.at) {
		if gap := b.Sub(prev); gap > c.ackWait {
			return fail("%s without an in-progress ack (ack wait %s): send one every ack wait / 3", gap.Round(time.Millisecond), c.ackWait)
		}
		prev = b
	}
	if r.err != nil || r.res.Status != protocol.StatusOK {
		return fail("%s, want status ok for the slow arguments %s", describe(r), c.cfg.SlowArgs)
	}
	if o := c.settledBy(ctx, seq, ackAck); o != nil {
		return *o
	}
	return ok()
}

package conformance

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/protocol"
)

// The rules of a task that meet a fault of the task itself: one that does
// not decode, and one whose deadline passes while its tool runs.

// malformedTask dispatches a task whose body does not decode (its args
// are not an object) while its task and conversation IDs can be read: it
// is answered status error, error_type an identifier, on the subject's
// tool, then terminated, never retried (docs/PROTOCOL.md, The task).
func (c *checker) malformedTask(ctx context.Context) Outcome {
	task := c.newTask(c.cfg.Args)
	body, err := json.Marshal(map[string]any{"task_id": task.TaskID, "tool": task.Tool, "args": "not an object",
		"conversation_id": task.ConversationID, "tool_call_id": task.ToolCallID,
		"created_at": task.CreatedAt.Format(time.RFC3339Nano), "deadline": task.Deadline.Format(time.RFC3339Nano)})
	if err != nil {
		return fail("%v", err)
	}
	m := nats.NewMsg(c.subj.Task(task.Tool))
	m.Header.Set(jetstream.MsgIDHeader, task.TaskID)
	m.Data = body
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		return fail("publish the task: %v", err)
	}
	rs := c.awaitResults(ctx, task.ConversationID, 1, c.cfg.Timeout)
	if len(rs) == 0 {
		return fail("%s for a task that does not decode (args not an object, its IDs readable): answer it status error, then terminate it",
			c.noResult(ack.Sequence, c.cfg.Timeout))
	}
	r := rs[0]
	switch {
	case r.err != nil || r.res.Status != protocol.StatusError:
		return fail("%s for a task that does not decode (args not an object), want status error", describe(r))
	case !protocol.ValidErrorType(r.res.ErrorType):
		return fail("error_type %q for a task that does not decode, want an identifier (%s)", r.res.ErrorType, protocol.ErrorTypePattern)
	case r.subject != c.subj.Result(task.ConversationID, task.TaskID, task.Tool):
		return fail("result published on %s, want %s", r.subject, c.subj.Result(task.ConversationID, task.TaskID, task.Tool))
	}
	if o := c.settledBy(ctx, ack.Sequence, ackTerm); o != nil {
		o.Detail += ": a task that does not decode is terminated, never retried"
		return *o
	}
	return ok()
}

// minDeadlineLead is the shortest time the deadline rule gives a task to
// be delivered before its deadline passes.
const minDeadlineLead = 300 * time.Millisecond

// deadlineDuring dispatches the slow arguments with a deadline that passes
// while they run: the tool is stopped and the task answered error
// DeadlineExceeded at the deadline, not when the tool would have
// returned (docs/PROTOCOL.md, Deadlines).
func (c *checker) deadlineDuring(ctx context.Context) Outcome {
	if len(c.cfg.SlowArgs) == 0 {
		return skip("no slow arguments (a call that runs longer than the ack wait %s)", c.ackWait)
	}
	lead := max(c.ackWait/2, minDeadlineLead)
	task := c.newTask(c.cfg.SlowArgs)
	task.Deadline = time.Now().Add(lead).UTC()
	seq, err := c.dispatch(ctx, task, protocol.TaskMsgID(task.TaskID, task.Attempt))
	if err != nil {
		return fail("%v", err)
	}
	if err := c.awaitDelivered(ctx, seq, lead); err != nil {
		return skip("the task was not delivered within %s, before its deadline (%v): the rule needs a worker free to start it at once", lead, err)
	}
	rs := c.awaitResults(ctx, task.ConversationID, 1, lead+settleWait)
	if len(rs) == 0 {
		return fail("%s of a deadline that passed while the tool ran: stop the tool at the deadline and answer DeadlineExceeded",
			c.noResult(seq, lead+settleWait))
	}
	r := rs[0]
	if r.err != nil || r.res.Status != protocol.StatusError || r.res.ErrorType != protocol.ErrorDeadlineExceeded {
		return fail("%s for a task whose deadline passed while it ran (the slow arguments outlast it), want status error, error_type DeadlineExceeded", describe(r))
	}
	if late := r.at.Sub(task.Deadline); late > settleWait {
		return fail("DeadlineExceeded %s after the deadline: stop the tool when the deadline passes", late.Round(time.Millisecond))
	}
	if o := c.settledBy(ctx, seq, ackAck, ackTerm); o != nil {
		return *o
	}
	return ok()
}

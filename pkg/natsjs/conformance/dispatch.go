package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/protocol"
)

// pollEvery is how often the kit reads the task consumer's state where the
// protocol gives no signal (a task delivered, not yet acknowledged).
const pollEvery = 20 * time.Millisecond

// newTask returns an inline task of the tool, in a conversation of its
// own, as the agent makes one.
func (c *checker) newTask(args json.RawMessage) protocol.Task {
	now := time.Now().UTC()
	return protocol.Task{
		TaskID: protocol.NewID(), Tool: c.cfg.Tool, Args: args, ConversationID: protocol.NewID(),
		ToolCallID: "call_" + protocol.NewID(), Deadline: now.Add(10 * time.Minute), CreatedAt: now,
	}
}

// dispatch stores task with the Nats-Msg-Id msgID and returns its stream
// sequence.
func (c *checker) dispatch(ctx context.Context, task protocol.Task, msgID string) (uint64, error) {
	data, err := protocol.EncodeTask(&task)
	if err != nil {
		return 0, err
	}
	m := nats.NewMsg(c.subj.Task(task.Tool))
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	m.Data = data
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("publish the task: %w", err)
	}
	if ack.Duplicate {
		return 0, fmt.Errorf("the task stream took Nats-Msg-Id %s for a duplicate", msgID)
	}
	return ack.Sequence, nil
}

// cancel stores a cancel of task, as the agent does.
func (c *checker) cancel(ctx context.Context, task protocol.Task) error {
	data, err := json.Marshal(protocol.Cancel{TaskID: task.TaskID, Reason: "conformance check"})
	if err != nil {
		return err
	}
	if _, err := c.js.Publish(ctx, c.subj.Cancel(task.ConversationID, task.TaskID, task.Tool), data); err != nil {
		return fmt.Errorf("publish the cancel: %w", err)
	}
	return nil
}

// awaitResults waits up to timeout for n results in conv and returns those
// seen.
func (c *checker) awaitResults(ctx context.Context, conv string, n int, timeout time.Duration) []resultMsg {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	items, _ := c.obs.results.wait(wctx, func(items []resultMsg) bool { return len(resultsOf(items, conv)) >= n })
	return resultsOf(items, conv)
}

// awaitSettled waits up to timeout for the ack or term of the task at seq.
func (c *checker) awaitSettled(ctx context.Context, seq uint64, timeout time.Duration) (ackEvent, bool) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	items, _ := c.obs.acks.wait(wctx, func(items []ackEvent) bool { _, ok := settled(acksOf(items, seq)); return ok })
	return settled(acksOf(items, seq))
}

// awaitDelivered waits up to timeout until the task at seq was delivered
// to a worker: the task consumer's delivered stream sequence reached it.
func (c *checker) awaitDelivered(ctx context.Context, seq uint64, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		info, err := c.cons.Info(wctx)
		if err == nil && info.Delivered.Stream >= seq {
			return nil
		}
		select {
		case <-tick.C:
		case <-wctx.Done():
			if err != nil {
				return err
			}
			return fmt.Errorf("not delivered within %s", timeout)
		}
	}
}

// stored returns how many results the results stream holds in conv.
func (c *checker) stored(ctx context.Context, conv string) (uint64, error) {
	s, err := c.js.Stream(ctx, c.names.Results)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(c.subj.ResultsFor(conv)))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, count := range info.State.Subjects {
		n += count
	}
	return n, nil
}

// noResult describes a task that got no result: what its deliveries saw.
func (c *checker) noResult(seq uint64, waited time.Duration) string {
	items, _ := c.obs.acks.snapshot()
	acks := acksOf(items, seq)
	if len(acks) == 0 {
		return fmt.Sprintf("no result within %s, and no ack of the task's delivery", waited)
	}
	kinds := make([]string, 0, len(acks))
	for _, a := range acks {
		kinds = append(kinds, fmt.Sprintf("%s (delivery %d)", a.kind, a.delivered))
	}
	return fmt.Sprintf("no result within %s; the deliveries saw: %s", waited, strings.Join(kinds, ", "))
}

// describe is a result as a failure names it.
func describe(r resultMsg) string {
	if r.err != nil {
		return fmt.Sprintf("a result that does not decode (%v): %s", r.err, r.data)
	}
	s := "status " + string(r.res.Status)
	if r.res.ErrorType != "" {
		s += " error_type " + r.res.ErrorType
	}
	if r.res.Message != "" {
		s += fmt.Sprintf(" message %q", r.res.Message)
	}
	return s
}

// slowDelivered dispatches a task with the slow arguments and waits until
// a worker has it; the outcome is set (skip without slow arguments, or a
// failure) when it cannot.
func (c *checker) slowDelivered(ctx context.Context) (protocol.Task, uint64, *Outcome) {
	if len(c.cfg.SlowArgs) == 0 {
		o := skip("no slow arguments (a call that runs longer than the ack wait %s)", c.ackWait)
		return protocol.Task{}, 0, &o
	}
	task := c.newTask(c.cfg.SlowArgs)
	seq, err := c.dispatch(ctx, task, task.TaskID)
	if err != nil {
		o := fail("%v", err)
		return task, 0, &o
	}
	if err := c.awaitDelivered(ctx, seq, c.cfg.Timeout); err != nil {
		o := fail("the task: %v", err)
		return task, seq, &o
	}
	return task, seq, nil
}

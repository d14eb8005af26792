package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// DeadLetters returns the dead letters of toolName ("" every tool's), the
// oldest first, at most 1000.
func (c *Control) DeadLetters(ctx context.Context, toolName string) ([]DeadLetter, error) {
	if err := c.ensure(ctx); err != nil {
		return nil, err
	}
	filter := c.subj.Prefix + ".dead.>"
	if toolName != "" {
		filter = c.subj.OfTool(protocol.KindDead, toolName)
	}
	out := []DeadLetter{}
	for seq := uint64(1); len(out) < maxDeadLetters; {
		m, err := direct.Next(ctx, c.cfg.Conn, c.names.Dead, filter, seq)
		if err != nil {
			return nil, fmt.Errorf("toolctl: dead letters: %w", err)
		}
		if m == nil {
			break
		}
		if d, ok := c.letterOf(m); ok {
			out = append(out, d)
		}
		seq = m.Seq + 1
	}
	return out, nil
}

// letterOf reads a stored dead letter; false for what is none.
func (c *Control) letterOf(m *direct.Msg) (DeadLetter, bool) {
	kind, conv, taskID, toolName, err := c.subj.Parse(m.Subject)
	if err != nil || kind != protocol.KindDead {
		return DeadLetter{}, false
	}
	d := DeadLetter{Seq: m.Seq, Tool: toolName, Conversation: conv, Task: taskID, At: m.Stored,
		Reason: m.Header.Get(natsjs.DeadReasonHeader), Worker: m.Header.Get(natsjs.DeadWorkerHeader)}
	d.Deliveries, _ = strconv.Atoi(m.Header.Get(natsjs.DeadDeliveriesHeader))
	if t, err := protocol.DecodeTask(m.Data, nil); err == nil {
		d.Attempt, d.Tenant, d.Agent = t.Attempt, t.Tenant, t.Agent
	}
	return d, true
}

// letter reads the dead letter seq of toolName.
func (c *Control) letter(ctx context.Context, toolName string, seq uint64) (*direct.Msg, DeadLetter, error) {
	if err := c.ensure(ctx); err != nil {
		return nil, DeadLetter{}, err
	}
	m, err := direct.Next(ctx, c.cfg.Conn, c.names.Dead, c.subj.OfTool(protocol.KindDead, toolName), seq)
	if err != nil {
		return nil, DeadLetter{}, fmt.Errorf("toolctl: dead letter %d: %w", seq, err)
	}
	if m == nil || m.Seq != seq {
		return nil, DeadLetter{}, fmt.Errorf("%w: %d of tool %s", ErrNoDeadLetter, seq, toolName)
	}
	d, ok := c.letterOf(m)
	if !ok {
		return nil, DeadLetter{}, fmt.Errorf("%w: %d of tool %s", ErrNoDeadLetter, seq, toolName)
	}
	return m, d, nil
}

// Replay runs the dead letter seq of toolName again, as a new attempt of
// its task (the next attempt number, its own idempotency key), then
// discards the letter; it returns the task published. A replay repeated
// within the tasks stream's duplicate window publishes nothing more.
func (c *Control) Replay(ctx context.Context, toolName string, seq uint64, by string) (protocol.Task, error) {
	m, d, err := c.letter(ctx, toolName, seq)
	if err != nil {
		return protocol.Task{}, err
	}
	task, err := protocol.DecodeTask(m.Data, nil)
	if err != nil {
		return protocol.Task{}, fmt.Errorf("toolctl: dead letter %d holds no task: %w", seq, err)
	}
	signed := m.Header.Get(protocol.TaskMACHeader) != ""
	if signed && c.cfg.TaskKey == nil {
		return protocol.Task{}, ErrNeedsTaskKey
	}
	if err := c.audit(ctx, Record{Action: "replay", Tool: toolName, By: by,
		Detail: fmt.Sprintf("dead letter %d: task %s of conversation %s, attempt %d as %d", seq, d.Task, d.Conversation, task.Attempt, task.Attempt+1)}); err != nil {
		return protocol.Task{}, err
	}
	task.Attempt++
	data, err := protocol.AppendTask(nil, &task)
	if err != nil {
		return protocol.Task{}, fmt.Errorf("toolctl: encode task %s: %w", task.TaskID, err)
	}
	out := nats.NewMsg(c.subj.Task(toolName))
	for _, k := range []string{protocol.TenantHeader, telemetry.TraceparentHeader, telemetry.TracestateHeader} {
		if v := m.Header.Get(k); v != "" {
			out.Header.Set(k, v)
		}
	}
	out.Header.Set(jetstream.MsgIDHeader, protocol.TaskMsgID(task.TaskID, task.Attempt))
	out.Header.Set(protocol.IdempotencyKeyHeader, protocol.IdempotencyKey(task.TaskID, task.Attempt))
	if signed {
		out.Header.Set(protocol.TaskMACHeader, protocol.TaskMAC(c.cfg.TaskKey, data))
	}
	out.Data = data
	pctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	if _, err := c.js.PublishMsg(pctx, out); err != nil {
		return protocol.Task{}, fmt.Errorf("toolctl: publish the replay of task %s: %w", task.TaskID, err)
	}
	if err := c.deleteLetter(pctx, seq); err != nil {
		return task, fmt.Errorf("toolctl: task %s replayed, its dead letter %d not discarded: %w", task.TaskID, seq, err)
	}
	return task, nil
}

// Discard deletes the dead letter seq of toolName: its call is not run.
func (c *Control) Discard(ctx context.Context, toolName string, seq uint64, by string) error {
	_, d, err := c.letter(ctx, toolName, seq)
	if err != nil {
		return err
	}
	if err := c.audit(ctx, Record{Action: "discard", Tool: toolName, By: by,
		Detail: fmt.Sprintf("dead letter %d: task %s of conversation %s, attempt %d", seq, d.Task, d.Conversation, d.Attempt)}); err != nil {
		return err
	}
	return c.deleteLetter(ctx, seq)
}

func (c *Control) deleteLetter(ctx context.Context, seq uint64) error {
	s, err := c.js.Stream(ctx, c.names.Dead)
	if err != nil {
		return fmt.Errorf("toolctl: the dead letters' stream: %w", err)
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("toolctl: delete dead letter %d: %w", seq, err)
	}
	return nil
}

// encodeCancel is the payload of a cancel of task.
func encodeCancel(task, reason string) []byte {
	data, _ := json.Marshal(protocol.Cancel{TaskID: task, Reason: reason})
	return data
}

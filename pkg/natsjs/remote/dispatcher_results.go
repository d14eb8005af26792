package remote

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/internal/taskmem"
	"github.com/offload-dev/offload/pkg/protocol"
)

// rememberLocked records that task of conv, a pending call until now, is
// answered, cancelled or detached.
func (d *Dispatcher) rememberLocked(task, conv string, kind taskmem.Kind) {
	d.mem.Finish(time.Now(), task, conv, kind, true)
}

// onResult routes one stored result to its waiting call, or refuses it.
func (d *Dispatcher) onResult(m jetstream.Msg) { d.route(m.Subject(), m.Data(), source{msg: m}) }

// source is how a routed result reached the dispatcher: delivered by a
// results consumer (msg), or read from the stream at sequence seq (a
// dispatch the server deduplicated, dispatcher_stored.go, or a recovery,
// dispatcher_recover.go).
type source struct {
	msg jetstream.Msg
	seq uint64
	// recovery: read by a recovery's lookup, which answers a call that
	// waits or does nothing; whatever else the stored message is, the
	// consumer delivers it too (or did), and refuses it there.
	recovery bool
}

// sequence returns the result's stream sequence (0 when unknown).
func (s source) sequence() uint64 {
	if s.msg == nil {
		return s.seq
	}
	meta, err := s.msg.Metadata()
	if err != nil {
		return 0
	}
	return meta.Sequence.Stream
}

// route routes the result stored on subject to its waiting call, or
// refuses it.
func (d *Dispatcher) route(subject string, data []byte, src source) {
	kind, conv, task, toolName, err := d.subj.Parse(subject)
	if err != nil || kind != protocol.KindResult {
		d.refuse(metrics.RefuseMalformed, subject, "", fmt.Errorf("invalid result subject: %w", err))
		return
	}
	if src.recovery && !d.waits(task) {
		return // answered meanwhile (the consumer was first)
	}
	if d.cfg.MaxPayload > 0 && len(data) > d.cfg.MaxPayload {
		d.refuse(metrics.RefuseOversize, subject, task, fmt.Errorf("%d bytes", len(data)))
		return
	}
	opts := &protocol.DecodeOpts{MaxSize: d.cfg.MaxPayload}
	if opts.MaxSize == 0 {
		opts.MaxSize = -1 // the server's max payload already bounds it
	}
	res, err := protocol.DecodeResult(data, task, opts)
	if err != nil {
		if !src.recovery {
			d.refuseUndecodable(subject, conv, task, err)
		}
		return
	}

	d.mu.Lock()
	c, inFlight := d.pending[task]
	var reason metrics.RefuseReason
	var note string
	switch {
	case src.recovery && (!inFlight || c.task.ConversationID != conv || c.task.Tool != toolName || res.Attempt != c.task.Attempt):
		// Not this call's answer: the call waits on, and the consumer
		// refuses the message if it is to be refused.
		d.mu.Unlock()
		return
	case inFlight && c.task.ConversationID != conv:
		d.mu.Unlock()
		d.refuse(metrics.RefuseWrongConversation, subject, task, fmt.Errorf("task belongs to conversation %s", c.task.ConversationID))
		return
	case inFlight && c.task.Tool != toolName:
		// Only the workers of a task's tool may publish on its subject
		// (SPEC §9); the call waits on for theirs.
		d.mu.Unlock()
		d.refuse(metrics.RefuseWrongTool, subject, task, fmt.Errorf("task is a call of %s, not %s", c.task.Tool, toolName))
		return
	case inFlight && res.Attempt != c.task.Attempt:
		// A result of another dispatch of the task (an earlier attempt's
		// deferral, redelivered or replayed) is not this dispatch's
		// answer; the call waits on for its own attempt's.
		d.mu.Unlock()
		d.refuse(metrics.RefuseWrongAttempt, subject, task, fmt.Errorf("result of attempt %d, the call waits for attempt %d", res.Attempt, c.task.Attempt))
		return
	case inFlight:
		delete(d.pending, task)
		// The call's own IDs, not the subject's substrings: the memory
		// keeps its conversation as a key (a string key is replaced on
		// every write).
		d.rememberLocked(c.task.TaskID, c.task.ConversationID, taskmem.Answered)
		if src.recovery {
			d.recoveredLocked(c.task.TaskID, src.seq)
		}
	case d.wasRecoveredLocked(task, src):
		reason, note = "", "result already read from the stream by a recovery"
	default:
		if reason, note = d.answerOnlyLocked(task, conv); reason == "" {
			reason, note = d.mem.Classify(time.Now(), task, conv, res.Status == protocol.StatusCancelled)
		}
	}
	d.mu.Unlock()

	switch {
	case inFlight:
		d.setPending(c.task.Mode, -1)
		d.observe(c.task, string(res.Status), c.started)
		c.finish(res, nil)
	case reason != "":
		d.refuse(reason, subject, task, errors.New(note))
	default:
		d.log.Debug(note, slog.String("subject", subject), slog.String("task_id", task), slog.String("worker", res.Worker))
	}
}

// refuseUndecodable refuses a result whose payload does not decode. Only a
// result for a call that waits is malformed (or oversize): one for a task
// no call waits for is refused for that, by the task's class (unknown_task,
// duplicate, late, wrong_conversation), whatever its payload, and one of
// another process's conversation is ignored as any other.
func (d *Dispatcher) refuseUndecodable(subject, conv, task string, err error) {
	d.mu.Lock()
	_, inFlight := d.pending[task]
	var reason metrics.RefuseReason
	var note string
	if !inFlight {
		if reason, note = d.answerOnlyLocked(task, conv); reason == "" {
			reason, note = d.mem.Classify(time.Now(), task, conv, false)
		}
	}
	d.mu.Unlock()
	switch {
	case inFlight && errors.Is(err, protocol.ErrTooLarge):
		d.refuse(metrics.RefuseOversize, subject, task, err)
	case inFlight:
		d.refuse(metrics.RefuseMalformed, subject, task, err)
	case reason != "":
		d.refuse(reason, subject, task, fmt.Errorf("%s (and its payload: %w)", note, err))
	default:
		d.log.Debug(note, slog.String("subject", subject), slog.String("task_id", task), slog.Any("error", err))
	}
}

func (d *Dispatcher) refuse(reason metrics.RefuseReason, subject, task string, err error) {
	// Count first: whoever sees the log line sees the count too.
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.Refused(reason)
	}
	d.log.Warn("result refused", slog.String("reason", string(reason)), slog.String("subject", subject),
		slog.String("task_id", task), slog.Any("error", err))
}

func (d *Dispatcher) setPending(mode protocol.Mode, delta float64) {
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.PendingCalls.WithLabelValues(string(mode)).Add(delta)
	}
}

func (d *Dispatcher) observe(task protocol.Task, outcome string, started time.Time) {
	if d.cfg.Metrics == nil {
		return
	}
	d.cfg.Metrics.ToolCallsTotal.WithLabelValues(task.Tool, string(task.Mode), outcome).Inc()
	d.cfg.Metrics.ToolCallDuration.WithLabelValues(task.Tool, string(task.Mode)).Observe(time.Since(started).Seconds())
}

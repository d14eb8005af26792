package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/lazylog"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// outcome is what a tool returned.
type outcome struct {
	value any
	err   error
}

// handle processes one delivered task: it is kept alive with in-progress
// acks from delivery until it is answered or handed back. slot is the
// worker slot the task holds: when more tasks were waiting in the consumer
// as this one was delivered, it is given back as soon as the tool has
// returned, so that the fetcher pulls the next task while this one's
// result is published (the pull's round trip overlaps the publish's);
// otherwise (an idle pool, where an early pull would only compete with the
// result for the CPU) the runner gives it back when handle returns.
//
// toolLog is the worker's logger with the tool's name.
func (w *Worker) handle(t *tool.Tool, toolLog *slog.Logger, msg jetstream.Msg, slot *heldSlot) {
	log := toolLog
	md, _ := msg.Metadata()
	if md != nil && md.NumDelivered > 1 && w.cfg.Metrics != nil {
		w.cfg.Metrics.RedeliveriesTotal.WithLabelValues(t.Name).Inc()
	}
	task, err := protocol.DecodeTask(msg.Data(), nil)
	if err == nil && task.Tool != t.Name {
		err = fmt.Errorf("natsjs: task for tool %q delivered on the subject of %q", task.Tool, t.Name)
	}
	if err != nil {
		w.malformed(log, t, msg, err)
		return
	}
	if md != nil && md.NumDelivered > 1 {
		log = lazylog.With(toolLog, slog.String("task_id", task.TaskID), slog.String("conversation_id", task.ConversationID),
			slog.Uint64("delivery", md.NumDelivered))
	} else {
		log = lazylog.With(toolLog, slog.String("task_id", task.TaskID), slog.String("conversation_id", task.ConversationID))
	}

	// Register before looking for an earlier cancel: a cancel stored after
	// the look-up reaches the registered task through the subscription.
	spanCtx, span := w.startTaskSpan(msg, task)
	defer span.End()
	if span.IsRecording() {
		sc := span.SpanContext()
		log = lazylog.With(log, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	taskCtx, cancel := context.WithCancelCause(spanCtx)
	defer cancel(nil)
	fl := &inflight{task: task, msg: msg, cancel: cancel, span: span}
	w.cancels.add(fl)
	defer w.cancels.remove(fl)
	stopHB := w.heartbeat(msg, log)
	defer stopHB()

	if limit, over := w.overLimit(t.Name, md); over {
		w.answerExhausted(log, fl, limit)
		return
	}
	var seq uint64
	if md != nil {
		seq = md.Sequence.Stream
	}
	cancelled, err := w.cancelled(context.Background(), task, seq)
	if err != nil {
		// Not run blind: another delivery looks again, later each time, so
		// that an outage of the cancel stream burns few deliveries.
		delay := handBackDelay(md)
		log.Warn("cancel look-up failed; task handed back", slog.Duration("delay", delay), slog.Any("error", err))
		fl.settle(func() error { return msg.NakWithDelay(delay) }, log, "nak")
		return
	}
	if cancelled || errors.Is(context.Cause(taskCtx), tool.ErrCancelled) {
		log.Info("task cancelled before it started")
		w.count(t.Name, protocol.StatusCancelled)
		w.respond(log, fl, protocol.ResultFromOutcome(nil, tool.ErrCancelled), time.Time{}, true)
		return
	}
	if !task.Deadline.IsZero() {
		if !time.Now().Before(task.Deadline) {
			log.Info("task deadline passed before it started")
			res := protocol.ResultFromOutcome(nil, context.DeadlineExceeded)
			w.count(t.Name, res.Status)
			w.respond(log, fl, res, time.Time{}, false)
			return
		}
		var cancelDeadline context.CancelFunc
		taskCtx, cancelDeadline = context.WithDeadlineCause(taskCtx, task.Deadline, errDeadline)
		defer cancelDeadline()
	}
	if task.Approved && w.cfg.TaskKey != nil && !protocol.ValidTaskMAC(w.cfg.TaskKey, msg.Data(), msg.Headers().Get(protocol.TaskMACHeader)) {
		log.Warn("approved task without a valid MAC refused: no agent of this store dispatched it")
		res := protocol.Result{Status: protocol.StatusError, ErrorType: protocol.ErrorUnauthenticatedTask,
			Message: "refused: this approved task was not dispatched by an agent of this store (no valid " + protocol.TaskMACHeader + "); the tool did not run"}
		w.count(t.Name, res.Status)
		w.respond(log, fl, res, time.Time{}, false)
		return
	}
	if t.RequiresApproval && !task.Approved {
		// Fail closed: a tool that requires approval runs only for a task
		// that says it was approved (the agent sets it after a decision).
		log.Warn("task for a tool that requires approval arrived unapproved")
		res := protocol.ResultFromOutcome(nil, &tool.ApprovalRequired{})
		w.count(t.Name, res.Status)
		w.respond(log, fl, res, time.Time{}, true)
		return
	}
	args, err := checkArgs(t, task.Args)
	if err != nil {
		log.Info("invalid arguments", slog.Any("error", err))
		res := protocol.ResultFromOutcome(nil, err)
		w.count(t.Name, res.Status)
		w.respond(log, fl, res, time.Time{}, false)
		return
	}

	v, effect, err := w.beginEffect(t, fl, md)
	if err != nil {
		delay := handBackDelay(md)
		log.Warn("effect ledger unavailable; task handed back", slog.Duration("delay", delay), slog.Any("error", err))
		fl.settle(func() error { return msg.NakWithDelay(delay) }, log, "nak")
		return
	}
	switch v {
	case verdictAnswered:
		log.Info("attempt answered before: acknowledged without running")
		fl.settle(msg.Ack, log, "ack")
		return
	case verdictBusy:
		delay := handBackDelay(md)
		log.Info("attempt running here on another delivery; handed back", slog.Duration("delay", delay))
		fl.settle(func() error { return msg.NakWithDelay(delay) }, log, "nak")
		return
	case verdictUnknown:
		log.Warn("attempt started by a worker that stopped, no result stored: not run again, a person decides",
			slog.String("started_by", effect.Started.Worker), slog.Time("started_at", effect.Started.At))
		res := unknownEffect(effect)
		w.count(t.Name, res.Status)
		w.respond(log, fl, res, time.Time{}, false)
		return
	case verdictRun:
		if effect.Started.Worker != w.cfg.ID {
			log.Warn("idempotent tool run again: its worker stopped while running it",
				slog.String("started_by", effect.Started.Worker), slog.Time("started_at", effect.Started.At))
		}
	}

	rc := &tool.RunContext{
		RunID:            task.RunID,
		ConversationID:   task.ConversationID,
		ToolCallID:       task.ToolCallID,
		ToolName:         t.Name,
		ToolCallApproved: task.Approved,
		ToolCallMetadata: task.ToolCallMetadata,
		Retry:            task.Retry,
		MaxRetries:       t.Retries,
		TaskID:           task.TaskID,
		Attempt:          task.Attempt,
		IdempotencyKey:   protocol.IdempotencyKey(task.TaskID, task.Attempt),
	}
	runCtx := progress.WithReporter(taskCtx, w.reporter(task.ConversationID, task.TaskID, t.Name))
	started := time.Now()
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.Inflight.WithLabelValues(t.Name).Inc()
		defer w.cfg.Metrics.Inflight.WithLabelValues(t.Name).Dec()
	}
	log.Debug("task started")
	// The tool runs on this goroutine: a cancel reaches it through its
	// context at once; its cancelled result goes out when it returns.
	toolCtx, toolSpan := w.startToolSpan(runCtx, task)
	o := runTool(toolCtx, t, rc, args, log)
	endToolSpan(toolSpan, o.err)
	if md != nil && md.NumPending > 0 {
		// Tasks were waiting when this one was delivered: pull the next
		// while this result is published.
		slot.release()
	}
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.TaskDuration.WithLabelValues(t.Name).Observe(time.Since(started).Seconds())
	}

	cause := context.Cause(taskCtx)
	switch {
	case taskCtx.Err() != nil && errors.Is(cause, tool.ErrCancelled):
		log.Info("task cancelled while running")
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.CancellationsTotal.WithLabelValues(t.Name).Inc()
		}
		w.count(t.Name, protocol.StatusCancelled)
		w.respond(log, fl, protocol.ResultFromOutcome(nil, cause), started, true)
	case taskCtx.Err() != nil && errors.Is(cause, errShutdown) && o.err != nil:
		log.Info("task handed back on shutdown")
		w.withdrawEffect(log, fl)
		fl.settle(msg.Nak, log, "nak")
	case taskCtx.Err() != nil && errors.Is(cause, errDeadline) && o.err != nil:
		log.Info("task deadline exceeded")
		res := protocol.ResultFromOutcome(nil, context.DeadlineExceeded)
		w.count(t.Name, res.Status)
		w.respond(log, fl, res, started, false)
	default:
		if o.err != nil {
			log.Info("tool returned an error", slog.String("error_type", tool.ErrorType(o.err)), slog.Any("error", o.err))
		}
		res := protocol.ResultFromOutcome(o.value, o.err)
		w.count(t.Name, res.Status)
		w.respond(log, fl, res, started, false)
	}
}

// checkArgs validates a task's arguments against the tool's schema, as
// [tool.Tool.ParseArgs] does, and returns them. DecodeTask has already
// checked that they are one JSON object and compacted them, so they are
// used as they are.
func checkArgs(t *tool.Tool, args json.RawMessage) (json.RawMessage, error) {
	if t.ArgsCertainlyValid(args) {
		return args, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, &tool.ValidationError{Tool: t.Name, Message: "invalid JSON: " + err.Error()}
	}
	obj, ok := v.(map[string]any)
	if !ok || dec.InputOffset() != int64(len(args)) {
		return nil, &tool.ValidationError{Tool: t.Name, Message: "arguments must be a JSON object"}
	}
	if err := t.CheckArgs(obj); err != nil {
		return nil, err
	}
	return args, nil
}

// runTool runs the tool's validator and handler, turning a panic into a
// Panic error.
func runTool(ctx context.Context, t *tool.Tool, rc *tool.RunContext, args json.RawMessage, log *slog.Logger) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("tool panicked", slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			o = outcome{err: &protocol.RemoteError{Type: protocol.ErrorPanic, Message: fmt.Sprint(r)}}
		}
	}()
	if t.Validator != nil {
		if err := t.Validator(ctx, rc, args); err != nil {
			return outcome{err: err}
		}
	}
	v, err := t.Run(ctx, rc, args)
	return outcome{value: v, err: err}
}

// heartbeat keeps msg's delivery alive with in-progress acks until the
// returned function is called; that function waits for an in-progress ack
// being sent. It uses a timer rather than a goroutine: most tasks finish
// before the first beat.
func (w *Worker) heartbeat(msg jetstream.Msg, log *slog.Logger) func() {
	var mu sync.Mutex
	stopped := false
	var timer *time.Timer
	beat := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err := msg.InProgress(); err != nil {
			log.Warn("in-progress ack failed", slog.Any("error", err))
		}
		timer.Reset(w.heartbeatEvery)
	}
	mu.Lock()
	timer = time.AfterFunc(w.heartbeatEvery, beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}

// reporter publishes a task's progress on core NATS. It holds only the
// IDs and the tool's name (most tools report nothing).
func (w *Worker) reporter(conv, taskID, toolName string) progress.Reporter {
	return progress.ReporterFunc(func(message string, fraction *float64) {
		data, err := json.Marshal(protocol.Progress{TaskID: taskID, Message: message, Fraction: fraction, At: time.Now().UTC()})
		if err == nil {
			err = w.cfg.Conn.Publish(w.subj.Progress(conv, taskID, toolName), data)
		}
		if err != nil {
			w.log.Debug("progress not published", slog.String("task_id", taskID), slog.Any("error", err))
		}
	})
}

// handBackDelay is the redelivery delay of a task handed back because
// something it needs failed (a cancel look-up, a result publish): longer
// with every delivery, so that an outage burns few deliveries.
func handBackDelay(md *jetstream.MsgMetadata) time.Duration {
	if md == nil {
		return lookupNakDelay
	}
	return min(time.Duration(md.NumDelivered)*lookupNakDelay, maxLookupNakDelay) //nolint:gosec // G115: a count of deliveries, far below what would overflow
}

// malformed terminates a task that does not decode; when its task and
// conversation IDs can be read, the caller gets an error result first (of
// the task's attempt, when that can be read too): a task whose error
// result cannot be published is handed back to try again.
func (w *Worker) malformed(log *slog.Logger, t *tool.Tool, msg jetstream.Msg, err error) {
	var ids struct {
		TaskID         string          `json:"task_id"`
		ConversationID string          `json:"conversation_id"`
		ToolCallID     string          `json:"tool_call_id"`
		Attempt        json.RawMessage `json:"attempt"`
	}
	if json.Unmarshal(msg.Data(), &ids) == nil {
		_, e1 := protocol.ParseID(ids.TaskID)
		_, e2 := protocol.ParseID(ids.ConversationID)
		if e1 == nil && e2 == nil {
			ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
			res := protocol.ResultFromOutcome(nil, &protocol.RemoteError{Type: tool.ErrorType(err), Message: err.Error()})
			res.TaskID, res.ToolCallID, res.Worker, res.FinishedAt = ids.TaskID, ids.ToolCallID, w.cfg.ID, time.Now().UTC()
			if a, aerr := strconv.Atoi(string(ids.Attempt)); aerr == nil && a > 0 {
				res.Attempt = a
			}
			_, perr := w.publishResult(ctx, ids.ConversationID, t.Name, res)
			cancel()
			if perr != nil {
				md, _ := msg.Metadata()
				delay := handBackDelay(md)
				log.Warn("error result of a malformed task not published", slog.Duration("delay", delay),
					slog.Any("decode_error", err), slog.Any("error", perr))
				if err := msg.NakWithDelay(delay); err != nil {
					log.Warn("nak failed", slog.Any("error", err))
				}
				return
			}
		}
	}
	log.Error("malformed task terminated", slog.Any("error", err))
	w.count(t.Name, protocol.StatusError)
	if err := msg.TermWithReason("malformed task"); err != nil {
		log.Warn("term failed", slog.Any("error", err))
	}
}

func (w *Worker) count(toolName string, status protocol.Status) {
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.TasksTotal.WithLabelValues(toolName, string(status)).Inc()
	}
}

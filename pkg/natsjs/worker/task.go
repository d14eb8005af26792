package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// outcome is what a tool returned.
type outcome struct {
	value any
	err   error
}

// checkArgs validates a task's arguments against the tool's schema, as
// [tool.Tool.ParseArgs] does. DecodeTask has already checked that they are
// one JSON object and compacted them, so valid ones are used as they are.
func checkArgs(t *tool.Tool, args json.RawMessage) error {
	if t.ArgsCertainlyValid(args) {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return &tool.ValidationError{Tool: t.Name, Message: "invalid JSON: " + err.Error()}
	}
	obj, ok := v.(map[string]any)
	if !ok || dec.InputOffset() != int64(len(args)) {
		return &tool.ValidationError{Tool: t.Name, Message: "arguments must be a JSON object"}
	}
	return t.CheckArgs(obj)
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
			perr := w.publishResult(ctx, ids.ConversationID, t.Name, res)
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

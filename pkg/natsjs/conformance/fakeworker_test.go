package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// faults are the rules a fake worker breaks; the zero value follows them
// all.
type faults struct {
	noMsgID          bool // results carry no Nats-Msg-Id
	deliveryCountID  bool // the result's Nats-Msg-Id ends with the delivery count
	dropAttempt      bool // results carry no attempt
	ignoreCancels    bool // no cancel subscription, no look-up
	wrongTaskID      bool // the result names another task
	ignoreDeadline   bool // runs tasks past their deadline
	noInProgress     bool // never sends in-progress acks
	noValidation     bool // runs invalid arguments
	noRegistryUpdate bool // writes its entry once
	ackCancelled     bool // acks a cancelled task instead of terminating it
	notIdempotent    bool // advertises the tool not idempotent, yet keeps no effect ledger
	silentMalformed  bool // terminates a task that does not decode without a result
	deadlineAtStart  bool // checks the deadline before running only, not while the tool runs
}

// fakeTool is the tool the fake worker serves: {"seconds": number
// (required)}, it sleeps that long and answers {"slept": seconds}.
const fakeTool = "job"

const fakeSchema = `{"type":"object","properties":{"seconds":{"type":"number"}},"required":["seconds"]}`

// fakeAckWait is the fake worker's task consumer's ack wait.
const fakeAckWait = time.Second

// fakeWorker is a worker written from docs/PROTOCOL.md alone, with raw
// nats.go, as a worker in another language would be; faults make it break
// rules on purpose.
type fakeWorker struct {
	f    faults
	nc   *nats.Conn
	js   jetstream.JetStream
	subj protocol.Subjects

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // by "<conv>.<task>"

	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

var errCancelled = errors.New("cancelled")

// startFake provisions the streams, creates the tool's consumer with a
// 1 s ack wait and serves until the test ends.
func startFake(t *testing.T, nc *nats.Conn, f faults) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	cons, err := natsjs.EnsureTaskConsumer(ctx, js, fakeTool, natsjs.ProvisionOptions{AckWait: fakeAckWait})
	if err != nil {
		t.Fatal(err)
	}
	w := &fakeWorker{f: f, nc: nc, js: js, running: map[string]context.CancelCauseFunc{}}
	w.ctx, w.stop = context.WithCancel(ctx)
	if !f.ignoreCancels {
		sub, err := nc.Subscribe(w.subj.OfTool(protocol.KindCancel, fakeTool), w.onCancel)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	kv, err := js.KeyValue(ctx, natsjs.NamesFor("").RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	w.register(kv)
	cc, err := cons.Consume(w.onTask, jetstream.PullMaxMessages(4))
	if err != nil {
		t.Fatal(err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if !f.noRegistryUpdate {
					w.register(kv)
				}
			case <-w.ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cc.Stop()
		<-cc.Closed()
		w.stop()
		w.wg.Wait()
	})
}

func (w *fakeWorker) register(kv jetstream.KeyValue) {
	// Sleeping has no side effect: the tool is idempotent, and so keeps
	// no effect ledger (PROTOCOL.md, effects).
	entry := map[string]any{"name": fakeTool, "description": "Sleeps.", "parameters": json.RawMessage(fakeSchema),
		"worker": "fake-1", "expires_at": time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano), "idempotent": !w.f.notIdempotent}
	data, _ := json.Marshal(entry)
	_, _ = kv.Put(w.ctx, fakeTool+".fake-1", data)
}

func (w *fakeWorker) onCancel(m *nats.Msg) {
	_, conv, task, _, err := w.subj.Parse(m.Subject)
	if err != nil {
		return
	}
	w.mu.Lock()
	cancel := w.running[conv+"."+task]
	w.mu.Unlock()
	if cancel != nil {
		cancel(errCancelled)
	}
}

func (w *fakeWorker) onTask(msg jetstream.Msg) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.handle(msg)
	}()
}

func (w *fakeWorker) handle(msg jetstream.Msg) {
	task, err := protocol.DecodeTask(msg.Data(), nil)
	if err != nil {
		w.malformed(msg)
		return
	}
	md, _ := msg.Metadata()
	ctx, cancel := context.WithCancelCause(w.ctx)
	defer cancel(nil)
	key := task.ConversationID + "." + task.TaskID
	w.mu.Lock()
	w.running[key] = cancel
	w.mu.Unlock()
	defer func() { w.mu.Lock(); delete(w.running, key); w.mu.Unlock() }()
	if !w.f.noInProgress {
		beat := time.NewTicker(fakeAckWait / 3)
		defer beat.Stop()
		done := make(chan struct{})
		defer close(done)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case <-beat.C:
					_ = msg.InProgress()
				case <-done:
					return
				}
			}
		}()
	}

	res, term := w.outcome(ctx, task)
	w.publish(task, md, res)
	if term && !w.f.ackCancelled {
		_ = msg.Term()
	} else {
		_ = msg.Ack()
	}
}

// outcome runs the task (or does not) and says whether its delivery is
// terminated.
func (w *fakeWorker) outcome(ctx context.Context, task protocol.Task) (protocol.Result, bool) {
	cancelled := protocol.Result{Status: protocol.StatusCancelled}
	if !w.f.ignoreCancels {
		cs, err := w.js.Stream(ctx, natsjs.NamesFor("").Cancel)
		if err == nil {
			_, err = cs.GetLastMsgForSubject(ctx, w.subj.Cancel(task.ConversationID, task.TaskID, task.Tool))
		}
		if err == nil {
			return cancelled, true
		}
	}
	if !w.f.ignoreDeadline && !task.Deadline.IsZero() && !time.Now().Before(task.Deadline) {
		return protocol.Result{Status: protocol.StatusError, ErrorType: protocol.ErrorDeadlineExceeded}, false
	}
	var args struct {
		Seconds *float64 `json:"seconds"`
	}
	if err := json.Unmarshal(task.Args, &args); (err != nil || args.Seconds == nil) && !w.f.noValidation {
		return protocol.Result{Status: protocol.StatusRetry, ErrorType: protocol.ErrorInvalidArguments, Message: "seconds: a number is required"}, false
	}
	seconds := 0.0
	if args.Seconds != nil {
		seconds = *args.Seconds
	}
	timer := time.NewTimer(time.Duration(seconds * float64(time.Second)))
	defer timer.Stop()
	var deadline <-chan time.Time // nil: none, or not watched while running
	if !task.Deadline.IsZero() && !w.f.deadlineAtStart {
		dt := time.NewTimer(time.Until(task.Deadline))
		defer dt.Stop()
		deadline = dt.C
	}
	select {
	case <-timer.C:
		return protocol.Result{Status: protocol.StatusOK, Content: json.RawMessage(`{"slept":true}`)}, false
	case <-deadline:
		return protocol.Result{Status: protocol.StatusError, ErrorType: protocol.ErrorDeadlineExceeded}, false
	case <-ctx.Done():
		return cancelled, true
	}
}

// malformed answers a task that does not decode with an error result when
// its IDs can be read, then terminates it.
func (w *fakeWorker) malformed(msg jetstream.Msg) {
	var ids struct {
		TaskID         string `json:"task_id"`
		ConversationID string `json:"conversation_id"`
	}
	if !w.f.silentMalformed && json.Unmarshal(msg.Data(), &ids) == nil {
		_, e1 := protocol.ParseID(ids.TaskID)
		_, e2 := protocol.ParseID(ids.ConversationID)
		if e1 == nil && e2 == nil {
			w.publish(protocol.Task{TaskID: ids.TaskID, ConversationID: ids.ConversationID, Tool: fakeTool}, nil,
				protocol.Result{Status: protocol.StatusError, ErrorType: "DecodeError", Message: "the task does not decode"})
		}
	}
	_ = msg.Term()
}

func (w *fakeWorker) publish(task protocol.Task, md *jetstream.MsgMetadata, res protocol.Result) {
	res.TaskID, res.ToolCallID, res.Attempt, res.Worker = task.TaskID, task.ToolCallID, task.Attempt, "fake-1"
	if w.f.wrongTaskID {
		res.TaskID = protocol.NewID()
	}
	if w.f.dropAttempt {
		res.Attempt = 0
	}
	data, _ := json.Marshal(res)
	m := nats.NewMsg(w.subj.Result(task.ConversationID, res.TaskID, task.Tool))
	switch {
	case w.f.noMsgID:
	case w.f.deliveryCountID && md != nil:
		m.Header.Set(jetstream.MsgIDHeader, protocol.ResultMsgID(res.TaskID, int(md.NumDelivered))) //nolint:gosec // G115: a test's delivery count
	default:
		m.Header.Set(jetstream.MsgIDHeader, protocol.ResultMsgID(res.TaskID, task.Attempt))
	}
	m.Data = data
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = w.js.PublishMsg(ctx, m)
}

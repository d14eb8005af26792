package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/bufpool"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/startstop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/taskmem"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultDedupWindow is how long a [Dispatcher] remembers a finished or
// cancelled task, to refuse its duplicate and late results.
//
// The memory is bounded by count as well (about 2 MiB): past the last
// 65 536 tasks, a task made within the window is still refused, as a
// duplicate, by the time in its ULID, but a late result or one in the
// wrong conversation is then no longer told apart from a duplicate.
const DefaultDedupWindow = 10 * time.Minute

// DispatcherConfig configures a [Dispatcher].
type DispatcherConfig struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Prefix is the subject prefix. Defaults to [protocol.DefaultPrefix].
	Prefix string
	// Logger receives the dispatcher's logs, among them every refused
	// result. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics, if set, records offload_tool_calls_total,
	// offload_tool_call_duration_seconds, offload_pending_calls and
	// offload_refused_messages_total.
	Metrics *metrics.Agent
	// MaxPayload is the largest result accepted, in bytes; larger ones are
	// refused as oversize. Zero leaves the bound to the server's max_payload.
	MaxPayload int
	// DedupWindow is how long finished and cancelled tasks are remembered to
	// refuse their duplicate and late results, and how long a
	// conversation is known after its last call (results of unknown
	// conversations are another process's). Defaults to
	// [DefaultDedupWindow], which tells how the memory is bounded.
	DedupWindow time.Duration
	// InlineDeadline is the deadline of an inline task dispatched without
	// one (`agent --call-timeout`). Defaults to [DefaultInlineDeadline].
	InlineDeadline time.Duration
	// BackgroundDeadline is the deadline of a background task dispatched,
	// or attached, without one (its tool's registry entry states no
	// timeout): no background wait is unbounded (SPEC §20). Defaults to
	// InlineDeadline.
	BackgroundDeadline time.Duration
	// DeadlineGrace is how long past a task's deadline the dispatcher
	// waits for the worker's own DeadlineExceeded answer. Then no wait is
	// left unbounded: the call fails with a DeadlineExceeded result, the
	// task is cancelled over the wire and a late result is refused.
	// Defaults to [DefaultDeadlineGrace].
	DeadlineGrace time.Duration
	// ServerLostAfter is how long the connection may stay away from the
	// server before every waiting call fails with [natsjs.ErrServerLost] (the
	// server may not come back: an embedded server whose process exited).
	// A closed connection fails them at once. Defaults to
	// [DefaultServerLostAfter].
	ServerLostAfter time.Duration
	// Replicas, when positive, is the replication factor of the streams
	// the dispatcher creates, and is compared with existing ones (see
	// [natsjs.ProvisionOptions.Replicas]).
	Replicas int
	// MemoryStorage creates missing streams in memory (tests).
	MemoryStorage bool
	// TaskKey, when set, authenticates every task dispatched: it carries
	// protocol.TaskMACHeader, which a worker with the same key
	// (worker.Config.TaskKey) requires of an approved task.
	TaskKey []byte
	// TracerProvider, if set, records a producer span for every dispatch
	// (send <subject>, messaging.system=nats) whose W3C trace context the
	// task carries in its traceparent and tracestate headers, so that the
	// worker's task span is its child (SPEC §14). Nil records none.
	TracerProvider trace.TracerProvider
	// PerConversation reads each conversation's results with an ordered
	// consumer of its own, filtered to <prefix>.result.<conv>.>, made by
	// the conversation's first dispatch or attach and stopped by
	// [Dispatcher.Unfollow]: a process running many conversations (agent
	// serve) receives the results of those it runs, not every
	// conversation's. Unset, one ordered consumer per process reads every
	// result subject (agent run: one conversation per process).
	PerConversation bool
}

// DefaultInlineDeadline is the deadline of an inline task dispatched
// without one (SPEC §5.2).
const DefaultInlineDeadline = 10 * time.Minute

// DefaultDeadlineGrace is how long a [Dispatcher] waits past a task's
// deadline for its result before failing the call (SPEC §6.1).
const DefaultDeadlineGrace = 5 * time.Second

// DefaultServerLostAfter is how long a [Dispatcher] waits for a lost
// server to come back before failing the calls that wait.
const DefaultServerLostAfter = 10 * time.Second

// Dispatcher is the agent side of remote tool calls: [Dispatcher.Call]
// publishes a task and waits for its result; [Dispatcher.Cancel] cancels a
// task over the wire. Every incoming result is checked and refused (logged
// and counted by reason) when it is malformed, oversize, for an unknown
// task, for another conversation, a duplicate or late.
//
// Results are read with one ordered consumer per process over every result
// subject of the prefix (or one per conversation with
// DispatcherConfig.PerConversation), delivering only results stored after
// [Dispatcher.Start]. Ordered consumers are ephemeral, flow-controlled,
// need no acks and are recreated by the client from the last sequence seen
// after a failure, so no result is lost while the process lives; one
// consumer per process (rather than per conversation or per call) costs no
// JetStream API round trip per call and no consumer churn. The calls a
// process waits for were all published after it started, so DeliverNew is
// enough; results that must survive a restart of the agent are the job of
// the durable conversation store (SPEC §5.5), which replays from its own
// checkpoint. Results for conversations this dispatcher never dispatched to
// belong to other agent processes and are ignored, not refused.
type Dispatcher struct {
	cfg    DispatcherConfig
	log    *slog.Logger
	tracer trace.Tracer
	subj   protocol.Subjects
	js     jetstream.JetStream

	mu      sync.Mutex
	life    startstop.Base // changed under mu
	pending map[string]*Handle
	mem     *taskmem.Memory   // tasks no call waits for, conversations' activity
	answers map[string]string // external calls waiting for an answer: conversation by task (dispatcher_answers.go)
	lost    error             // set while the server is considered lost
	url     string            // the server's URL, for errors
	cc      jetstream.ConsumeContext
	readers map[string]*convReader // by conversation (PerConversation; dispatcher_follow.go)
	started bool                   // Start succeeded
	status  chan nats.Status
	watched chan struct{} // closed when the connection watcher has stopped
	bufs    bufpool.Pool  // task encoding buffers
	names   nameCache     // the tools' task subjects and span names
	// expiring counts the deadline expiries under way (dispatcher_expire.go),
	// which Stop waits for.
	expiring sync.WaitGroup
	// readingAgain counts the reads of the results stored for tasks
	// dispatched again (dispatcher_again.go), which Stop waits for.
	readingAgain sync.WaitGroup
	// The recoveries (dispatcher_recover.go): requested on recoverReq,
	// run by the recoverer until ctx is cancelled (Stop), which then
	// closes recovered; the results they answered calls with, by task.
	ctx        context.Context
	cancel     context.CancelFunc
	recoverReq chan struct{}
	recovering chan struct{}
	recovered  map[string]recoveredAt
}

// NewDispatcher checks cfg and returns a dispatcher ready to
// [Dispatcher.Start].
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: dispatcher: no Conn", natsjs.ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if err := protocol.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: dispatcher: %w", natsjs.ErrInvalidConfig, err)
	}
	if cfg.DedupWindow <= 0 {
		cfg.DedupWindow = DefaultDedupWindow
	}
	if cfg.InlineDeadline <= 0 {
		cfg.InlineDeadline = DefaultInlineDeadline
	}
	if cfg.ServerLostAfter <= 0 {
		cfg.ServerLostAfter = DefaultServerLostAfter
	}
	if cfg.BackgroundDeadline <= 0 {
		cfg.BackgroundDeadline = cfg.InlineDeadline
	}
	if cfg.DeadlineGrace <= 0 {
		cfg.DeadlineGrace = DefaultDeadlineGrace
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("natsjs: dispatcher: %w", err)
	}
	return &Dispatcher{
		cfg:     cfg,
		log:     log,
		tracer:  telemetry.Tracer(cfg.TracerProvider),
		subj:    protocol.Subjects{Prefix: cfg.Prefix},
		js:      js,
		pending: make(map[string]*Handle),
		answers: make(map[string]string),
		readers: make(map[string]*convReader),
		bufs:    bufpool.New(),
		mem:     taskmem.New(cfg.DedupWindow, taskmem.DefaultLimit),

		recoverReq: make(chan struct{}, 1),
		recovered:  make(map[string]recoveredAt),
	}, nil
}

// Start provisions the streams and starts reading results. Results stored
// before Start are not seen. It does not block: the dispatcher runs
// until [Dispatcher.Stop]; ctx bounds the start-up only. A dispatcher
// starts once: on error it is stopped, nothing of it running.
func (d *Dispatcher) Start(ctx context.Context) (err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.life.StartInit() != nil {
		return natsjs.ErrStarted
	}
	defer func() {
		if err != nil {
			d.life.StartFailed()
		}
	}()
	if err := natsjs.Provision(ctx, d.js, natsjs.ProvisionOptions{Prefix: d.cfg.Prefix, Replicas: d.cfg.Replicas, MemoryStorage: d.cfg.MemoryStorage}); err != nil {
		return fmt.Errorf("natsjs: dispatcher: %w", jsop.Nested(err))
	}
	if !d.cfg.PerConversation {
		names := natsjs.NamesFor(d.cfg.Prefix)
		start, err := d.startSeq(ctx)
		if err != nil {
			return err
		}
		cons, err := d.js.OrderedConsumer(ctx, names.Results, resultsConsumer(d.subj.All(protocol.KindResult), start))
		if err != nil {
			return fmt.Errorf("natsjs: dispatcher: results consumer: %w", natsjs.Explain(ctx, d.js, "$JS.API.CONSUMER.CREATE."+names.Results, err))
		}
		cc, err := cons.Consume(d.onResult, d.consumeError(""))
		if err != nil {
			return fmt.Errorf("natsjs: dispatcher: consume results: %w", err)
		}
		d.cc = cc
	}
	d.started = true
	d.url = d.cfg.Conn.ConnectedUrlRedacted()
	d.status = d.cfg.Conn.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	d.watched = make(chan struct{})
	go d.watchConn(d.status, d.watched)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.recovering = make(chan struct{})
	go d.recoverer(d.ctx, d.recovering)
	return nil
}

// Stop stops reading results; calls and handles still waiting return
// [natsjs.ErrStopped]. The tasks themselves are not cancelled. ctx bounds
// the wait for the results consumer to close. Stopping twice is harmless:
// every caller waits for the one stop.
func (d *Dispatcher) Stop(ctx context.Context) error {
	return d.life.Stop(func() error { return d.shutdown(ctx) })
}

// Stopped is closed once the dispatcher has stopped.
func (d *Dispatcher) Stopped() <-chan struct{} { return d.life.Done() }

func (d *Dispatcher) shutdown(ctx context.Context) error {
	d.mu.Lock()
	if !d.started { // the start failed
		d.mu.Unlock()
		return nil
	}
	cc := d.cc
	waiting := d.pending
	d.pending = make(map[string]*Handle)
	d.mu.Unlock()

	d.cancel()
	d.cfg.Conn.RemoveStatusListener(d.status)
	<-d.watched
	<-d.recovering
	if cc != nil {
		cc.Stop()
	}
	d.stopReaders()
	d.expiring.Wait()
	d.readingAgain.Wait()
	for _, h := range waiting {
		h.finish(protocol.Result{}, natsjs.ErrStopped)
		d.setPending(h.task.Mode, -1)
	}
	if cc == nil {
		return nil
	}
	select {
	case <-cc.Closed():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Call dispatches task (see [Dispatcher.Dispatch]) and waits for its
// result. When ctx ends first, the task is cancelled over the wire (see
// [Dispatcher.Cancel]) and ctx's error is returned. A task cancelled with
// [Dispatcher.Cancel] while Call waits returns a cancelled result.
func (d *Dispatcher) Call(ctx context.Context, task protocol.Task) (protocol.Result, error) {
	h, err := d.Dispatch(ctx, task)
	if err != nil {
		return protocol.Result{}, err
	}
	return h.Wait(ctx)
}

// Dispatch publishes task on <prefix>.task.<tool> and returns once the
// server has stored it, without waiting for the result: the returned
// [Handle] reports it. The header Nats-Msg-Id is the task ID, or
// "<task ID>:<attempt>" for a later attempt, so that the server drops
// duplicates of one dispatch but not a dispatch again. An empty mode is
// inline. Every task carries a deadline, so that the work of a dead agent
// expires and no wait is unbounded: its own (a background call's is its
// tool's timeout, SPEC §20), else ctx's, else DispatcherConfig.InlineDeadline
// (inline) or BackgroundDeadline (background) from now. A task is waited
// for until the deadline and
// DispatcherConfig.DeadlineGrace have passed; then the handle reports a
// DeadlineExceeded error result and the task is cancelled over the wire.
// The publish is not cut short when ctx ends (a task whose publish was
// abandoned may still be stored and run, and only a handle can cancel it).
func (d *Dispatcher) Dispatch(ctx context.Context, task protocol.Task) (*Handle, error) {
	return d.dispatch(ctx, task, false)
}

// DispatchAgain is [Dispatcher.Dispatch] for a task whose attempt may have
// been dispatched before, by a process that stopped before it stored the
// call's outcome (tool.RunContext.Again: a continuation's call, SPEC §20):
// once the task is published, the result stored for that attempt, if one
// is, answers the call at once. Its worker, finding the attempt answered in
// its effect ledger, acknowledges the task without running it or
// publishing anything (SPEC §13), and the server drops the publish as a
// duplicate only within its duplicate window and while it keeps the
// task's ID (a workqueue stream's acknowledged task is forgotten when the
// server restarts): without the read, such a call would wait for its
// deadline.
func (d *Dispatcher) DispatchAgain(ctx context.Context, task protocol.Task) (*Handle, error) {
	return d.dispatch(ctx, task, true)
}

func (d *Dispatcher) dispatch(ctx context.Context, task protocol.Task, again bool) (*Handle, error) {
	if err := checkTask(&task); err != nil {
		return nil, err
	}
	now := time.Now()
	if task.Deadline.IsZero() {
		if dl, ok := ctx.Deadline(); ok {
			task.Deadline = dl.UTC()
		} else if task.Mode == protocol.ModeInline {
			task.Deadline = now.Add(d.cfg.InlineDeadline).UTC()
		} else {
			task.Deadline = d.backgroundDeadline(now)
		}
	}
	if task.CreatedAt.IsZero() {
		task.CreatedAt = now.UTC()
	}
	names := d.taskNames(task.Tool)
	ctx, span := d.startDispatchSpan(ctx, names, task)
	defer span.End()
	if task.Traceparent == "" && span.IsRecording() {
		// SPEC §5.2's field too, for a worker that reads the payload only.
		task.Traceparent = telemetry.Traceparent(span.SpanContext())
	}
	buf := d.bufs.Get()
	data, err := protocol.AppendTask(*buf, &task)
	defer d.bufs.Put(buf, data) // published (copied) or failed by then
	if err != nil {
		return nil, fmt.Errorf("natsjs: marshal task: %w", err)
	}
	if max := d.cfg.Conn.MaxPayload(); max > 0 && int64(len(data)) > max {
		return nil, fmt.Errorf("natsjs: task %s is %d bytes, more than the server's max payload %d: %w",
			task.TaskID, len(data), max, protocol.ErrTooLarge)
	}

	// Register before publishing: a fast result must find its handle.
	if err := d.follow(ctx, task.ConversationID); err != nil {
		return nil, err
	}
	h, err := d.register(task, false, span.SpanContext())
	if err != nil {
		return nil, err
	}

	m := nats.NewMsg(names.subject)
	m.Header.Set(jetstream.MsgIDHeader, protocol.TaskMsgID(task.TaskID, task.Attempt))
	m.Header.Set(protocol.IdempotencyKeyHeader, protocol.IdempotencyKey(task.TaskID, task.Attempt))
	if task.Tenant != "" {
		m.Header.Set(protocol.TenantHeader, task.Tenant)
	}
	if d.cfg.TaskKey != nil {
		m.Header.Set(protocol.TaskMACHeader, protocol.TaskMAC(d.cfg.TaskKey, data))
	}
	m.Data = data
	telemetry.Inject(ctx, m.Header)
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), jsop.Timeout)
	ack, err := d.js.PublishMsg(pctx, m)
	pcancel()
	spanError(span, err)
	if err != nil {
		if d.forget(task.TaskID) {
			d.setPending(task.Mode, -1)
			d.observe(task, "dispatch_error", h.started)
		}
		err = fmt.Errorf("natsjs: publish task %s: %w", task.TaskID, natsjs.CountRefusal(d.cfg.Metrics, natsjs.NamesFor(d.cfg.Prefix).Tasks, err))
		h.finish(protocol.Result{}, err)
		return nil, err
	}
	switch {
	case ack != nil && ack.Duplicate:
		d.storedResult(ctx, h, task)
	case again:
		d.lookUpAgain(h) // after the publish, beside the wait (dispatcher_again.go)
	}
	if d.log.Enabled(ctx, slog.LevelDebug) { // checked first: no attribute is built on the hot path otherwise
		d.log.DebugContext(h.logCtx(), "task dispatched", slog.String("task_id", task.TaskID), slog.String("tool", task.Tool),
			slog.String("conversation_id", task.ConversationID), slog.Int("attempt", task.Attempt))
	}
	return h, nil
}

// Attach returns a handle for a task an earlier process dispatched (and
// detached), without publishing it again: a result stored from now on
// reaches the handle. A result stored before is not seen here; a resume
// reads those from the stream (see [Inbox]) and then drops the handle. A
// task without a deadline gets DispatcherConfig.BackgroundDeadline from
// now.
func (d *Dispatcher) Attach(task protocol.Task) (*Handle, error) {
	if err := checkTask(&task); err != nil {
		return nil, err
	}
	if task.Deadline.IsZero() {
		task.Deadline = d.backgroundDeadline(time.Now()) // left by a process before deadlines
	}
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if err := d.follow(ctx, task.ConversationID); err != nil {
		return nil, err
	}
	return d.register(task, true, trace.SpanContext{})
}

// backgroundDeadline is the deadline of a background task that has none
// from its tool's timeout: DispatcherConfig.BackgroundDeadline from now.
// Past it and the grace, the task is ended like an inline one (expire).
func (d *Dispatcher) backgroundDeadline(now time.Time) time.Time {
	return now.Add(d.cfg.BackgroundDeadline).UTC()
}

// register makes a handle for task pending, unless the dispatcher is
// stopped, the server lost, or the task already in flight. A task attached
// again leaves the detached tasks it was remembered among.
func (d *Dispatcher) register(task protocol.Task, attach bool, sc trace.SpanContext) (*Handle, error) {
	h := newHandle(d, task, sc)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !d.life.Running():
		return nil, natsjs.ErrStopped
	case d.lost != nil:
		return nil, d.lost
	}
	if _, dup := d.pending[task.TaskID]; dup {
		return nil, fmt.Errorf("%w: task %s is already in flight", natsjs.ErrInvalidTask, task.TaskID)
	}
	if attach {
		d.mem.Reattach(task.TaskID)
	}
	d.mem.Hold(task.ConversationID)
	d.pending[task.TaskID] = h
	d.setPending(task.Mode, 1)
	if !task.Deadline.IsZero() {
		// Set under d.mu: whoever finishes h took it from d.pending after.
		h.timer = time.AfterFunc(time.Until(task.Deadline)+d.cfg.DeadlineGrace, func() { d.expire(h) })
	}
	return h, nil
}

func checkTask(t *protocol.Task) error {
	if _, err := protocol.ParseID(t.TaskID); err != nil {
		return fmt.Errorf("%w: task_id: %w", natsjs.ErrInvalidTask, err)
	}
	if _, err := protocol.ParseID(t.ConversationID); err != nil {
		return fmt.Errorf("%w: conversation_id: %w", natsjs.ErrInvalidTask, err)
	}
	if t.Tool == "" {
		return fmt.Errorf("%w: no tool", natsjs.ErrInvalidTask)
	}
	if len(t.Args) == 0 {
		t.Args = json.RawMessage("{}")
	}
	// A JSON object: valid JSON whose first byte (after spaces) opens one.
	if a := bytes.TrimLeft(t.Args, " \t\r\n"); len(a) == 0 || a[0] != '{' || !json.Valid(t.Args) {
		return fmt.Errorf("%w: args must be a JSON object", natsjs.ErrInvalidTask)
	}
	if t.Mode == "" {
		t.Mode = protocol.ModeInline
	}
	if !t.Mode.Valid() {
		return fmt.Errorf("%w: mode %q", natsjs.ErrInvalidTask, t.Mode)
	}
	return nil
}

// Cancel publishes a Cancel for task, a call of toolName, on
// <prefix>.cancel.<conv>.<task>.<tool> (JetStream, so that a worker that
// has not picked the task up yet finds it) and marks the task cancelled: a
// call waiting for it returns a cancelled result and later results are
// refused as late.
func (d *Dispatcher) Cancel(ctx context.Context, conv, task, toolName, reason string) error {
	if _, err := protocol.ParseID(conv); err != nil {
		return fmt.Errorf("%w: conversation: %w", natsjs.ErrInvalidTask, err)
	}
	if _, err := protocol.ParseID(task); err != nil {
		return fmt.Errorf("%w: task: %w", natsjs.ErrInvalidTask, err)
	}
	if err := tool.ValidateName(toolName); err != nil {
		return fmt.Errorf("%w: %w", natsjs.ErrInvalidTask, err)
	}
	d.mu.Lock()
	c := d.pending[task]
	if c != nil {
		delete(d.pending, task)
		d.mem.Finish(time.Now(), task, c.task.ConversationID, taskmem.Cancelled, true)
	} else {
		d.mem.Finish(time.Now(), task, conv, taskmem.Cancelled, false)
	}
	d.mu.Unlock()
	if c != nil {
		d.setPending(c.task.Mode, -1)
		d.observe(c.task, string(protocol.StatusCancelled), c.started)
		c.finish(protocol.Result{TaskID: task, ToolCallID: c.task.ToolCallID, Status: protocol.StatusCancelled, Message: reason}, nil)
	}
	return d.publishCancel(ctx, conv, task, toolName, reason)
}

// publishCancel publishes a Cancel for task, a call of toolName
// (JetStream: a worker that has not picked the task up yet finds it).
func (d *Dispatcher) publishCancel(ctx context.Context, conv, task, toolName, reason string) error {
	data, err := json.Marshal(protocol.Cancel{TaskID: task, Reason: reason})
	if err != nil {
		return fmt.Errorf("natsjs: marshal cancel: %w", err)
	}
	if _, err := d.js.Publish(ctx, d.subj.Cancel(conv, task, toolName), data); err != nil {
		return fmt.Errorf("natsjs: publish cancel of %s: %w", task, natsjs.CountRefusal(d.cfg.Metrics, natsjs.NamesFor(d.cfg.Prefix).Cancel, err))
	}
	return nil
}

// conn returns the dispatcher's connection: what relays a task's progress
// subscribes on it, so that the subscription exists before the task (the
// server handles a connection's messages in order).
func (d *Dispatcher) conn() *nats.Conn { return d.cfg.Conn }

// Pending returns how many calls wait for their result.
func (d *Dispatcher) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

// forget removes a pending call; it reports whether it was pending.
func (d *Dispatcher) forget(task string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.pending[task]
	if !ok {
		return false
	}
	delete(d.pending, task)
	d.mem.Release(c.task.ConversationID)
	return true
}

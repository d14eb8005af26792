package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
)

// DefaultRemember is how long a [Dispatcher] remembers a finished or
// cancelled task, to refuse its duplicate and late results.
const DefaultRemember = 10 * time.Minute

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
	// Remember is how long finished and cancelled tasks are remembered to
	// refuse their duplicate and late results. Defaults to [DefaultRemember].
	Remember time.Duration
	// MemoryStorage creates missing streams in memory (tests).
	MemoryStorage bool
}

// Dispatcher is the agent side of remote tool calls: [Dispatcher.Call]
// publishes a task and waits for its result; [Dispatcher.Cancel] cancels a
// task over the wire. Every incoming result is checked and refused (logged
// and counted by reason) when it is malformed, oversize, for an unknown
// task, for another conversation, a duplicate or late.
//
// Results are read with one ordered consumer per process over every result
// subject of the prefix, delivering only results stored after
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
	cfg  DispatcherConfig
	log  *slog.Logger
	subj protocol.Subjects
	js   jetstream.JetStream

	mu      sync.Mutex
	state   int // 0 new, 1 started, 2 stopped
	pending map[string]*call
	done    map[string]doneTask
	doneQ   []doneRef
	convs   map[string]int // conversation → pending + remembered tasks
	cc      jetstream.ConsumeContext
}

type call struct {
	task    protocol.Task
	ch      chan protocol.Result // buffered 1
	started time.Time
}

type doneKind int

const (
	doneAnswered doneKind = iota
	doneCancelled
)

type doneTask struct {
	conv string
	kind doneKind
}

type doneRef struct {
	task string
	at   time.Time
}

// Dispatcher states.
const (
	stateNew = iota
	stateStarted
	stateStopped
)

// NewDispatcher checks cfg and returns a dispatcher ready to
// [Dispatcher.Start].
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: dispatcher: no Conn", ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if err := protocol.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: dispatcher: %w", ErrInvalidConfig, err)
	}
	if cfg.Remember <= 0 {
		cfg.Remember = DefaultRemember
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
		subj:    protocol.Subjects{Prefix: cfg.Prefix},
		js:      js,
		pending: make(map[string]*call),
		done:    make(map[string]doneTask),
		convs:   make(map[string]int),
	}, nil
}

// Start provisions the streams and starts reading results. Results stored
// before Start returns are not seen.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != stateNew {
		return ErrStarted
	}
	if err := Provision(ctx, d.js, ProvisionOptions{Prefix: d.cfg.Prefix, MemoryStorage: d.cfg.MemoryStorage}); err != nil {
		return fmt.Errorf("natsjs: dispatcher: %w", err)
	}
	names := NamesFor(d.cfg.Prefix)
	cons, err := d.js.OrderedConsumer(ctx, names.Results, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{d.subj.All(protocol.KindResult)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("natsjs: dispatcher: results consumer: %w", err)
	}
	cc, err := cons.Consume(d.onResult, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		d.log.Warn("results consumer", slog.Any("error", err))
	}))
	if err != nil {
		return fmt.Errorf("natsjs: dispatcher: consume results: %w", err)
	}
	d.cc = cc
	d.state = stateStarted
	return nil
}

// Stop stops reading results; calls still waiting return [ErrStopped].
// Stopping twice is harmless.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if d.state != stateStarted {
		d.state = stateStopped
		d.mu.Unlock()
		return nil
	}
	d.state = stateStopped
	cc := d.cc
	waiting := d.pending
	d.pending = make(map[string]*call)
	d.mu.Unlock()

	cc.Stop()
	for _, c := range waiting {
		close(c.ch)
		d.setPending(c.task.Mode, -1)
	}
	select {
	case <-cc.Closed():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Call publishes task on <prefix>.task.<tool> (header Nats-Msg-Id = the task
// ID, waiting for the server's acknowledgement) and waits for its result.
// An empty mode is inline. When ctx has a deadline and the task none, the
// deadline travels with the task. When ctx ends first, the task is cancelled
// over the wire (see [Dispatcher.Cancel]) and ctx's error is returned.
// A task cancelled with [Dispatcher.Cancel] while Call waits returns a
// cancelled result.
func (d *Dispatcher) Call(ctx context.Context, task protocol.Task) (protocol.Result, error) {
	if err := checkTask(&task); err != nil {
		return protocol.Result{}, err
	}
	if dl, ok := ctx.Deadline(); ok && task.Deadline.IsZero() {
		task.Deadline = dl.UTC()
	}
	if task.CreatedAt.IsZero() {
		task.CreatedAt = time.Now().UTC()
	}
	data, err := json.Marshal(task)
	if err != nil {
		return protocol.Result{}, fmt.Errorf("natsjs: marshal task: %w", err)
	}
	if max := d.cfg.Conn.MaxPayload(); max > 0 && int64(len(data)) > max {
		return protocol.Result{}, fmt.Errorf("natsjs: task %s is %d bytes, more than the server's max payload %d: %w",
			task.TaskID, len(data), max, protocol.ErrTooLarge)
	}

	// Register before publishing: a fast result must find its call.
	c := &call{task: task, ch: make(chan protocol.Result, 1), started: time.Now()}
	d.mu.Lock()
	if d.state != stateStarted {
		d.mu.Unlock()
		return protocol.Result{}, ErrStopped
	}
	if _, dup := d.pending[task.TaskID]; dup {
		d.mu.Unlock()
		return protocol.Result{}, fmt.Errorf("%w: task %s is already in flight", ErrInvalidTask, task.TaskID)
	}
	d.pending[task.TaskID] = c
	d.convs[task.ConversationID]++
	d.mu.Unlock()
	d.setPending(task.Mode, 1)

	m := nats.NewMsg(d.subj.Task(task.Tool))
	m.Header.Set(jetstream.MsgIDHeader, task.TaskID)
	m.Data = data
	// The publish is not cut short by the caller: a task whose publish was
	// abandoned may still be stored and run, and only a published task gets
	// cancelled over the wire below when ctx ends.
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	_, err = d.js.PublishMsg(pctx, m)
	pcancel()
	if err != nil {
		if d.forget(task.TaskID) {
			d.setPending(task.Mode, -1)
			d.observe(task, "dispatch_error", c.started)
		}
		return protocol.Result{}, fmt.Errorf("natsjs: publish task %s: %w", task.TaskID, err)
	}

	select {
	case res, ok := <-c.ch:
		if !ok {
			return protocol.Result{}, ErrStopped
		}
		return res, nil
	case <-ctx.Done():
		// A result may have won the race.
		select {
		case res, ok := <-c.ch:
			if !ok {
				return protocol.Result{}, ErrStopped
			}
			return res, nil
		default:
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		defer cancel()
		if err := d.Cancel(cctx, task.ConversationID, task.TaskID, "the caller gave up: "+ctx.Err().Error()); err != nil {
			d.log.Warn("cancel not published", slog.String("task_id", task.TaskID), slog.Any("error", err))
		}
		return protocol.Result{}, ctx.Err()
	}
}

// ErrInvalidTask is wrapped by errors about a task that cannot be
// dispatched.
var ErrInvalidTask = errors.New("natsjs: invalid task")

func checkTask(t *protocol.Task) error {
	if _, err := protocol.ParseID(t.TaskID); err != nil {
		return fmt.Errorf("%w: task_id: %w", ErrInvalidTask, err)
	}
	if _, err := protocol.ParseID(t.ConversationID); err != nil {
		return fmt.Errorf("%w: conversation_id: %w", ErrInvalidTask, err)
	}
	if t.Tool == "" {
		return fmt.Errorf("%w: no tool", ErrInvalidTask)
	}
	if len(t.Args) == 0 {
		t.Args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(t.Args, &obj); err != nil || obj == nil {
		return fmt.Errorf("%w: args must be a JSON object", ErrInvalidTask)
	}
	if t.Mode == "" {
		t.Mode = protocol.ModeInline
	}
	if !t.Mode.Valid() {
		return fmt.Errorf("%w: mode %q", ErrInvalidTask, t.Mode)
	}
	return nil
}

// Cancel publishes a Cancel for task on <prefix>.cancel.<conv>.<task>
// (JetStream, so that a worker that has not picked the task up yet finds it)
// and marks the task cancelled: a call waiting for it returns a cancelled
// result and later results are refused as late.
func (d *Dispatcher) Cancel(ctx context.Context, conv, task, reason string) error {
	if _, err := protocol.ParseID(conv); err != nil {
		return fmt.Errorf("%w: conversation: %w", ErrInvalidTask, err)
	}
	if _, err := protocol.ParseID(task); err != nil {
		return fmt.Errorf("%w: task: %w", ErrInvalidTask, err)
	}
	d.mu.Lock()
	c := d.pending[task]
	if c != nil {
		delete(d.pending, task)
	} else {
		d.convs[conv]++
	}
	d.rememberLocked(task, conv, doneCancelled)
	d.mu.Unlock()
	if c != nil {
		d.setPending(c.task.Mode, -1)
		d.observe(c.task, string(protocol.StatusCancelled), c.started)
		c.ch <- protocol.Result{TaskID: task, ToolCallID: c.task.ToolCallID, Status: protocol.StatusCancelled, Message: reason}
	}
	data, err := json.Marshal(protocol.Cancel{TaskID: task, Reason: reason})
	if err != nil {
		return fmt.Errorf("natsjs: marshal cancel: %w", err)
	}
	if _, err := d.js.Publish(ctx, d.subj.Cancel(conv, task), data); err != nil {
		return fmt.Errorf("natsjs: publish cancel of %s: %w", task, err)
	}
	return nil
}

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
	d.releaseConvLocked(c.task.ConversationID)
	return true
}

func (d *Dispatcher) releaseConvLocked(conv string) {
	if d.convs[conv]--; d.convs[conv] <= 0 {
		delete(d.convs, conv)
	}
}

// rememberLocked records a finished or cancelled task (whose conversation
// count the caller already holds) and forgets tasks older than Remember.
func (d *Dispatcher) rememberLocked(task, conv string, kind doneKind) {
	now := time.Now()
	if old, ok := d.done[task]; ok {
		d.releaseConvLocked(old.conv) // replaced below; keep one count
	}
	d.done[task] = doneTask{conv: conv, kind: kind}
	d.doneQ = append(d.doneQ, doneRef{task: task, at: now})
	n := 0
	for n < len(d.doneQ) && now.Sub(d.doneQ[n].at) > d.cfg.Remember {
		ref := d.doneQ[n]
		if dt, ok := d.done[ref.task]; ok {
			delete(d.done, ref.task)
			d.releaseConvLocked(dt.conv)
		}
		n++
	}
	if n > 0 {
		d.doneQ = append(d.doneQ[:0:0], d.doneQ[n:]...)
	}
}

// onResult routes one stored result to its waiting call, or refuses it.
func (d *Dispatcher) onResult(m jetstream.Msg) {
	subject := m.Subject()
	kind, conv, task, _, err := d.subj.Parse(subject)
	if err != nil || kind != protocol.KindResult {
		d.refuse(metrics.RefuseMalformed, subject, "", fmt.Errorf("invalid result subject: %w", err))
		return
	}
	data := m.Data()
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
		reason := metrics.RefuseMalformed
		if errors.Is(err, protocol.ErrTooLarge) {
			reason = metrics.RefuseOversize
		}
		d.refuse(reason, subject, task, err)
		return
	}

	d.mu.Lock()
	c, inFlight := d.pending[task]
	var prev doneTask
	var known, convKnown bool
	switch {
	case inFlight && c.task.ConversationID != conv:
		d.mu.Unlock()
		d.refuse(metrics.RefuseWrongConversation, subject, task, fmt.Errorf("task belongs to conversation %s", c.task.ConversationID))
		return
	case inFlight:
		delete(d.pending, task)
		d.rememberLocked(task, conv, doneAnswered)
	default:
		prev, known = d.done[task]
		_, convKnown = d.convs[conv]
	}
	d.mu.Unlock()

	if inFlight {
		d.setPending(c.task.Mode, -1)
		d.observe(c.task, string(res.Status), c.started)
		c.ch <- res
		return
	}
	switch {
	case known && prev.conv != conv:
		d.refuse(metrics.RefuseWrongConversation, subject, task, fmt.Errorf("task belongs to conversation %s", prev.conv))
	case known && prev.kind == doneAnswered:
		d.refuse(metrics.RefuseDuplicate, subject, task, errors.New("the task already has its result"))
	case known && res.Status == protocol.StatusCancelled:
		d.log.Debug("cancellation confirmed", slog.String("task_id", task), slog.String("worker", res.Worker))
	case known:
		d.refuse(metrics.RefuseLate, subject, task, errors.New("the task was cancelled"))
	case convKnown:
		d.refuse(metrics.RefuseUnknownTask, subject, task, errors.New("no call waits for this task"))
	default:
		d.log.Debug("result of another process ignored", slog.String("subject", subject))
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

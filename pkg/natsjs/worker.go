package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// Errors of the worker and the dispatcher.
var (
	// ErrInvalidConfig is wrapped by errors about an unusable
	// [WorkerConfig], [DispatcherConfig] or [RemoteConfig].
	ErrInvalidConfig = errors.New("natsjs: invalid config")
	// ErrStarted is returned by Start when called twice.
	ErrStarted = errors.New("natsjs: already started")
	// ErrStopped is returned by calls on a stopped (or never started)
	// worker, dispatcher or toolset.
	ErrStopped = errors.New("natsjs: stopped")
)

// Defaults of [WorkerConfig].
const (
	DefaultConcurrency     = 4
	DefaultGracePeriod     = 30 * time.Second
	DefaultRegistryRefresh = 10 * time.Second
	// definitionAckWait is the ack wait of consumers/task.json (the first
	// backoff step), used to derive the heartbeat when AckWait is not set.
	definitionAckWait = 30 * time.Second
)

// Internal timings.
const (
	pullWait       = 5 * time.Second        // a pull request waits at most this long
	shortPull      = 250 * time.Millisecond // … or this long while others wait for a slot
	fetchRetryWait = time.Second            // pause after a failed pull
	publishTimeout = 10 * time.Second       // bound on one result publish / API call
)

// WorkerConfig configures a [Worker].
type WorkerConfig struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Prefix is the subject prefix. Defaults to [protocol.DefaultPrefix].
	Prefix string
	// ID names the worker in results, the registry and logs. Defaults to
	// <hostname>-<pid>.
	ID string
	// Tools are the tools served. Required; names must be unique and no tool
	// may be external.
	Tools []*tool.Tool
	// Concurrency is how many tasks the worker runs at once, across all its
	// tools. Defaults to [DefaultConcurrency].
	Concurrency int
	// AckWait, when positive, replaces the task consumers' ack wait and
	// backoff (see [ProvisionOptions.AckWait]); every replica of a tool must
	// use the same value. Zero keeps the definition's (30 s plus backoff).
	AckWait time.Duration
	// HeartbeatInterval is how often a running task's delivery is kept
	// alive with an in-progress ack. Defaults to a third of the ack wait.
	HeartbeatInterval time.Duration
	// MaxDeliver, when positive, replaces the task consumers' max deliveries
	// (every replica of a tool must use the same value).
	MaxDeliver int
	// GracePeriod bounds how long [Worker.Stop] lets in-flight tasks finish
	// before it cancels them and hands them back. Defaults to
	// [DefaultGracePeriod].
	GracePeriod time.Duration
	// Logger receives the worker's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics, if set, records the worker metrics of SPEC §7.
	Metrics *metrics.Worker
	// RegistryRefresh is how often the registry entries are rewritten.
	// Defaults to [DefaultRegistryRefresh].
	RegistryRefresh time.Duration
	// MemoryStorage creates missing streams and consumers in memory (tests).
	MemoryStorage bool
}

// Worker serves tools to agents over JetStream (SPEC §5.3): it pulls tasks
// from one durable consumer per tool, shared by every replica, runs them
// with bounded concurrency (never prefetching a task it has no slot for),
// keeps them alive with in-progress acks, honours cancellations and
// deadlines, and publishes their results. It advertises its tools in the
// registry (SPEC §5.4).
//
// A Worker is started once with [Worker.Start] and stopped with
// [Worker.Stop] or [Worker.StopAndCancel].
type Worker struct {
	cfg     WorkerConfig
	log     *slog.Logger
	subj    protocol.Subjects
	names   Names
	tools   map[string]*tool.Tool
	hbEvery time.Duration
	slots   *slotPool

	js        jetstream.JetStream
	tasksStrm jetstream.Stream
	cancStrm  jetstream.Stream
	kv        jetstream.KeyValue

	ready   atomic.Bool
	stopped chan struct{}

	mu      sync.Mutex
	started bool
	closing bool                   // no new callbacks may start
	running map[*inflight]struct{} // tasks whose tool may be running
	subs    []*nats.Subscription   // cancellations
	advSubs []*nats.Subscription   // max-deliveries advisories

	// Cancels seen by the subscription, so that a task stored after the
	// subscription was live is checked in memory instead of with a
	// JetStream look-up (a cancel is always stored after its task).
	cancelSeen   map[string]struct{} // "<conv>.<task>"
	cancelOrder  []string
	trustFromSeq uint64 // tasks with a higher stream sequence need no look-up
	stopOnce     sync.Once
	stopErr      error

	fetchCtx    context.Context
	fetchCancel context.CancelFunc
	runCtx      context.Context
	runCancel   context.CancelCauseFunc
	regStop     chan struct{}

	fetchers  sync.WaitGroup // Concurrency per tool
	handlers  sync.WaitGroup // one per received task (and its tool goroutine)
	callbacks sync.WaitGroup // advisory callbacks in progress
	bg        sync.WaitGroup // registry refresher
}

// inflight is a task this worker holds.
type inflight struct {
	task   protocol.Task
	cancel context.CancelCauseFunc
}

// errShutdown is the cause of a task context cancelled by the worker's own
// shutdown: the task is handed back, never answered.
var errShutdown = errors.New("natsjs: worker shutting down")

// errDeadline is the cause of a task context whose deadline passed.
var errDeadline = errors.New("natsjs: task deadline exceeded")

// NewWorker checks cfg and returns a worker ready to [Worker.Start].
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: worker: no Conn", ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if err := protocol.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: worker: %w", ErrInvalidConfig, err)
	}
	if cfg.ID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		cfg.ID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if len(cfg.Tools) == 0 {
		return nil, fmt.Errorf("%w: worker: no tools", ErrInvalidConfig)
	}
	tools := make(map[string]*tool.Tool, len(cfg.Tools))
	for _, t := range cfg.Tools {
		if t == nil {
			return nil, fmt.Errorf("%w: worker: nil tool", ErrInvalidConfig)
		}
		if err := tool.ValidateName(t.Name); err != nil {
			return nil, fmt.Errorf("%w: worker: %w", ErrInvalidConfig, err)
		}
		if t.Kind == tool.KindExternal || t.Handler == nil {
			return nil, fmt.Errorf("%w: worker: tool %s is external", ErrInvalidConfig, t.Name)
		}
		if _, dup := tools[t.Name]; dup {
			return nil, fmt.Errorf("%w: worker: tool %s given twice", ErrInvalidConfig, t.Name)
		}
		tools[t.Name] = t
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	if cfg.RegistryRefresh <= 0 {
		cfg.RegistryRefresh = DefaultRegistryRefresh
	}
	hb := cfg.HeartbeatInterval
	if hb <= 0 {
		wait := cfg.AckWait
		if wait <= 0 {
			wait = definitionAckWait
		}
		hb = wait / 3
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Worker{
		cfg:     cfg,
		log:     log.With(slog.String("worker", cfg.ID)),
		subj:    protocol.Subjects{Prefix: cfg.Prefix},
		names:   NamesFor(cfg.Prefix),
		tools:   tools,
		hbEvery: hb,
		slots:   newSlotPool(cfg.Concurrency),
		stopped: make(chan struct{}),
		running: make(map[*inflight]struct{}),
		regStop: make(chan struct{}),
	}, nil
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Ready reports whether the worker serves: the streams exist, every tool's
// consumer is bound and its registry entry written, and it is not stopping.
func (w *Worker) Ready() bool { return w.ready.Load() }

// Stopped is closed once the worker has stopped.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

func (w *Worker) provisionOptions() ProvisionOptions {
	return ProvisionOptions{
		Prefix:        w.cfg.Prefix,
		AckWait:       w.cfg.AckWait,
		MaxDeliver:    w.cfg.MaxDeliver,
		MemoryStorage: w.cfg.MemoryStorage,
	}
}

// Start provisions the streams, binds each tool's durable consumer,
// subscribes to cancellations and max-deliveries advisories, writes the
// registry entries and starts serving. It does not block: the worker runs
// until [Worker.Stop]. ctx bounds the start-up only. On error nothing keeps
// running.
func (w *Worker) Start(ctx context.Context) (err error) {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrStarted
	}
	w.started = true
	w.mu.Unlock()
	defer func() {
		if err != nil {
			w.unsubscribe()
			w.stopOnce.Do(func() { close(w.stopped) })
		}
	}()

	js, err := jetstream.New(w.cfg.Conn)
	if err != nil {
		return fmt.Errorf("natsjs: worker: %w", err)
	}
	w.js = js
	popts := w.provisionOptions()
	if err := Provision(ctx, js, popts); err != nil {
		return fmt.Errorf("natsjs: worker: %w", err)
	}
	if w.tasksStrm, err = js.Stream(ctx, w.names.Tasks); err != nil {
		return fmt.Errorf("natsjs: worker: bind stream %s: %w", w.names.Tasks, err)
	}
	if w.cancStrm, err = js.Stream(ctx, w.names.Cancel); err != nil {
		return fmt.Errorf("natsjs: worker: bind stream %s: %w", w.names.Cancel, err)
	}
	consumers := make(map[string]jetstream.Consumer, len(w.tools))
	for name := range w.tools {
		c, err := EnsureTaskConsumer(ctx, js, name, popts)
		if err != nil {
			return fmt.Errorf("natsjs: worker: %w", err)
		}
		consumers[name] = c
	}
	if w.kv, err = Registry(ctx, js, popts); err != nil {
		return fmt.Errorf("natsjs: worker: %w", err)
	}

	// Cancellations: a core subscription sees every cancel as it is stored.
	sub, err := w.cfg.Conn.Subscribe(w.subj.All(protocol.KindCancel), w.onCancel)
	if err != nil {
		return fmt.Errorf("natsjs: worker: subscribe to cancellations: %w", err)
	}
	w.mu.Lock()
	w.subs = append(w.subs, sub)
	w.mu.Unlock()
	// Exhausted deliveries: one queue group per tool, shared by the
	// replicas serving it, so that each advisory is handled once.
	for name := range w.tools {
		subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + w.names.Tasks + "." + TaskConsumerName(name)
		sub, err := w.cfg.Conn.QueueSubscribe(subject, "offload_dlq_"+w.cfg.Prefix+"_"+name, w.onMaxDeliveries)
		if err != nil {
			return fmt.Errorf("natsjs: worker: subscribe to %s: %w", subject, err)
		}
		w.mu.Lock()
		w.advSubs = append(w.advSubs, sub)
		w.mu.Unlock()
	}
	fctx, cancel := context.WithTimeout(ctx, publishTimeout) // Flush needs a deadline
	defer cancel()
	if err := w.cfg.Conn.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("natsjs: worker: flush subscriptions: %w", err)
	}
	// Every cancel stored from now on reaches the subscription; tasks stored
	// from now on can only be cancelled from now on.
	info, err := w.tasksStrm.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsjs: worker: stream info %s: %w", w.names.Tasks, err)
	}
	w.mu.Lock()
	w.trustFromSeq = info.State.LastSeq
	w.mu.Unlock()
	if err := w.writeRegistry(ctx); err != nil {
		return err
	}

	w.fetchCtx, w.fetchCancel = context.WithCancel(context.Background())
	w.runCtx, w.runCancel = context.WithCancelCause(context.Background())
	// Each tool gets as many fetchers as the worker has slots, so that a
	// busy tool keeps every free slot pulling; a fetcher pulls only while it
	// holds a slot (no prefetching).
	for name, c := range consumers {
		for range w.cfg.Concurrency {
			w.fetchers.Add(1)
			go w.fetch(w.tools[name], c)
		}
	}
	w.bg.Add(1)
	go w.refreshRegistry()
	w.ready.Store(true)
	w.log.Info("worker started", slog.Int("tools", len(w.tools)), slog.Int("concurrency", w.cfg.Concurrency))
	return nil
}

// unsubscribeAdvisories leaves the advisory queue groups, so that the
// advisories of the tasks this worker hands back reach the other replicas,
// and waits for the callbacks in progress.
func (w *Worker) unsubscribeAdvisories() {
	w.mu.Lock()
	w.closing = true
	subs := w.advSubs
	w.advSubs = nil
	w.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	w.callbacks.Wait()
}

// unsubscribe drops every subscription and waits for callbacks in progress.
func (w *Worker) unsubscribe() {
	w.unsubscribeAdvisories()
	w.mu.Lock()
	subs := w.subs
	w.subs = nil
	w.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
}

// Stop stops the worker gracefully: it removes its registry entries, stops
// fetching, lets in-flight tasks finish until ctx ends or the grace period
// passes, then cancels the rest and hands them back (nak) for another
// replica, without publishing a result for them. It returns once every
// goroutine of the worker has ended, or ctx's error if ctx ends first while
// a tool ignores its cancellation. Stopping twice is harmless.
func (w *Worker) Stop(ctx context.Context) error { return w.stop(ctx, w.cfg.GracePeriod) }

// StopAndCancel is [Worker.Stop] without a grace period: in-flight tasks are
// cancelled and handed back at once.
func (w *Worker) StopAndCancel(ctx context.Context) error { return w.stop(ctx, 0) }

func (w *Worker) stop(ctx context.Context, grace time.Duration) error {
	w.mu.Lock()
	started := w.started
	w.started = true // a stopped worker cannot be started
	w.mu.Unlock()
	if !started {
		w.stopOnce.Do(func() { close(w.stopped) })
		return nil
	}
	w.stopOnce.Do(func() {
		w.stopErr = w.shutdown(ctx, grace)
		close(w.stopped)
	})
	select {
	case <-w.stopped:
		return w.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Worker) shutdown(ctx context.Context, grace time.Duration) error {
	if w.fetchCancel == nil { // Start failed
		return nil
	}
	w.ready.Store(false)
	w.log.Info("worker stopping", slog.Duration("grace", grace))
	close(w.regStop)
	w.bg.Wait()
	w.deleteRegistry(ctx)
	w.fetchCancel()
	w.fetchers.Wait()
	w.unsubscribeAdvisories()

	// Let in-flight tasks finish within the grace period.
	handlersDone := make(chan struct{})
	go func() { w.handlers.Wait(); close(handlersDone) }()
	if grace > 0 {
		timer := time.NewTimer(grace)
		select {
		case <-handlersDone:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	w.runCancel(errShutdown)
	var err error
	select {
	case <-handlersDone:
	case <-ctx.Done():
		err = fmt.Errorf("natsjs: worker stop: tools still running: %w", ctx.Err())
	}
	w.unsubscribe()
	w.log.Info("worker stopped")
	return err
}

// fetch pulls the tasks of one tool, one per free slot: a pull request is
// issued only once a slot is held, so no task waits in this process while
// another replica could run it (see [slotPool] for how slots rotate among
// the tools).
func (w *Worker) fetch(t *tool.Tool, c jetstream.Consumer) {
	defer w.fetchers.Done()
	for {
		if err := w.slots.acquire(w.fetchCtx, t.Name); err != nil {
			return
		}
		pctx, cancel := context.WithCancel(w.fetchCtx)
		pl := w.slots.startPull(cancel, t.Name)
		expires := shortPull
		if pl.long {
			expires = pullWait
		}
		pctx, cancelTimeout := context.WithTimeout(pctx, expires)
		msg, err := c.Next(jetstream.FetchContext(pctx))
		w.slots.endPull(pl)
		cancelTimeout()
		cancel()
		if err != nil {
			w.slots.release()
			if w.fetchCtx.Err() != nil {
				return
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout) {
				continue
			}
			w.log.Warn("pull failed", slog.String("tool", t.Name), slog.Any("error", err))
			select {
			case <-time.After(fetchRetryWait):
			case <-w.fetchCtx.Done():
				return
			}
			continue
		}
		if w.fetchCtx.Err() != nil {
			// Stopping: hand the task back at once.
			_ = msg.Nak()
			w.slots.release()
			return
		}
		w.handlers.Add(1)
		go func() {
			defer w.handlers.Done()
			defer w.slots.release()
			w.handle(t, msg)
		}()
	}
}

// outcome is what a tool returned.
type outcome struct {
	value any
	err   error
}

// handle processes one delivered task.
func (w *Worker) handle(t *tool.Tool, msg jetstream.Msg) {
	log := w.log.With(slog.String("tool", t.Name))
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
	log = log.With(slog.String("task_id", task.TaskID), slog.String("conversation_id", task.ConversationID))

	// Register before looking for an earlier cancel: a cancel stored after
	// the look-up reaches the registered task through the subscription.
	taskCtx, cancel := context.WithCancelCause(w.runCtx)
	defer cancel(nil)
	fl := &inflight{task: task, cancel: cancel}
	w.mu.Lock()
	w.running[fl] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.running, fl)
		w.mu.Unlock()
	}()

	if w.cancelledBefore(task, md) || errors.Is(context.Cause(taskCtx), protocol.ErrCancelled) {
		log.Info("task cancelled before it started")
		w.count(t.Name, protocol.StatusCancelled)
		w.respond(log, msg, task, protocol.ResultFromOutcome(nil, protocol.ErrCancelled), time.Time{}, true)
		return
	}
	if !task.Deadline.IsZero() {
		if !time.Now().Before(task.Deadline) {
			log.Info("task deadline passed before it started")
			res := protocol.ResultFromOutcome(nil, context.DeadlineExceeded)
			w.count(t.Name, res.Status)
			w.respond(log, msg, task, res, time.Time{}, false)
			return
		}
		var cancelDeadline context.CancelFunc
		taskCtx, cancelDeadline = context.WithDeadlineCause(taskCtx, task.Deadline, errDeadline)
		defer cancelDeadline()
	}
	if t.RequiresApproval && !task.Approved {
		// Fail closed: a tool that requires approval runs only for a task
		// that says it was approved (the agent sets it after a decision).
		log.Warn("task for a tool that requires approval arrived unapproved")
		res := protocol.ResultFromOutcome(nil, &tool.ApprovalRequired{})
		w.count(t.Name, res.Status)
		w.respond(log, msg, task, res, time.Time{}, true)
		return
	}
	args, err := t.ParseArgs(string(task.Args))
	if err != nil {
		log.Info("invalid arguments", slog.Any("error", err))
		res := protocol.ResultFromOutcome(nil, err)
		w.count(t.Name, res.Status)
		w.respond(log, msg, task, res, time.Time{}, false)
		return
	}

	rc := &tool.RunContext{
		RunID:            task.RunID,
		ConversationID:   task.ConversationID,
		ToolCallID:       task.ToolCallID,
		ToolName:         t.Name,
		TaskID:           task.TaskID,
		Attempt:          task.Attempt,
		ToolCallApproved: task.Approved,
		ToolCallMetadata: task.ToolCallMetadata,
		Retry:            task.Retry,
		MaxRetries:       t.Retries,
	}
	runCtx := progress.WithReporter(taskCtx, w.reporter(task))
	started := time.Now()
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.Inflight.WithLabelValues(t.Name).Inc()
		defer w.cfg.Metrics.Inflight.WithLabelValues(t.Name).Dec()
	}
	// The tool runs on this goroutine: a cancel reaches it through its
	// context at once; its cancelled result goes out when it returns.
	stopHB := w.heartbeat(msg, log)
	ran := runTool(runCtx, t, rc, args, log)
	o := &ran
	stopHB()
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.TaskDuration.WithLabelValues(t.Name).Observe(time.Since(started).Seconds())
	}

	cause := context.Cause(taskCtx)
	switch {
	case taskCtx.Err() != nil && errors.Is(cause, protocol.ErrCancelled):
		log.Info("task cancelled while running")
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.CancellationsTotal.WithLabelValues(t.Name).Inc()
		}
		w.count(t.Name, protocol.StatusCancelled)
		w.respond(log, msg, task, protocol.ResultFromOutcome(nil, protocol.ErrCancelled), started, true)
	case taskCtx.Err() != nil && errors.Is(cause, errShutdown) && o.err != nil:
		log.Info("task handed back on shutdown")
		if err := msg.Nak(); err != nil {
			log.Warn("nak failed", slog.Any("error", err))
		}
	case taskCtx.Err() != nil && errors.Is(cause, errDeadline) && o.err != nil:
		log.Info("task deadline exceeded")
		res := protocol.ResultFromOutcome(nil, context.DeadlineExceeded)
		w.count(t.Name, res.Status)
		w.respond(log, msg, task, res, started, false)
	default:
		if o.err != nil {
			log.Info("tool returned an error", slog.String("error_type", tool.ErrorType(o.err)), slog.Any("error", o.err))
		}
		res := protocol.ResultFromOutcome(o.value, o.err)
		w.count(t.Name, res.Status)
		w.respond(log, msg, task, res, started, false)
	}
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
		timer.Reset(w.hbEvery)
	}
	mu.Lock()
	timer = time.AfterFunc(w.hbEvery, beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}

// reporter publishes a task's progress on core NATS.
func (w *Worker) reporter(task protocol.Task) progress.Reporter {
	subject := w.subj.Progress(task.ConversationID, task.TaskID)
	return progress.ReporterFunc(func(message string, fraction *float64) {
		data, err := json.Marshal(protocol.Progress{TaskID: task.TaskID, Message: message, Fraction: fraction, At: time.Now().UTC()})
		if err == nil {
			err = w.cfg.Conn.Publish(subject, data)
		}
		if err != nil {
			w.log.Debug("progress not published", slog.String("task_id", task.TaskID), slog.Any("error", err))
		}
	})
}

// maxCancelSeen bounds the cancels remembered in memory.
const maxCancelSeen = 100_000

// cancelledBefore reports whether a cancel for task is stored. A task
// stored after the cancel subscription was live is answered from memory
// (its cancel, stored after it, went through the subscription); an older
// one, or any once memory overflowed, with a look-up in the cancel stream.
func (w *Worker) cancelledBefore(task protocol.Task, md *jetstream.MsgMetadata) bool {
	key := task.ConversationID + "." + task.TaskID
	w.mu.Lock()
	_, seen := w.cancelSeen[key]
	trust := w.trustFromSeq
	w.mu.Unlock()
	if seen {
		return true
	}
	if md != nil && md.Sequence.Stream > trust {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	_, err := w.cancStrm.GetLastMsgForSubject(ctx, w.subj.Cancel(task.ConversationID, task.TaskID))
	switch {
	case err == nil:
		return true
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false
	default:
		// The live subscription still catches cancels from now on.
		w.log.Warn("cancel look-up failed", slog.String("task_id", task.TaskID), slog.Any("error", err))
		return false
	}
}

// onCancel cancels the running task named by a cancel message.
func (w *Worker) onCancel(m *nats.Msg) {
	kind, conv, taskID, _, err := w.subj.Parse(m.Subject)
	if err != nil || kind != protocol.KindCancel {
		w.log.Debug("ignored cancel on an invalid subject", slog.String("subject", m.Subject))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelSeen == nil {
		w.cancelSeen = map[string]struct{}{}
	}
	key := conv + "." + taskID
	if _, ok := w.cancelSeen[key]; !ok {
		w.cancelSeen[key] = struct{}{}
		w.cancelOrder = append(w.cancelOrder, key)
		if len(w.cancelOrder) > maxCancelSeen {
			// Forget the oldest half; from now on tasks are looked up.
			for _, k := range w.cancelOrder[:maxCancelSeen/2] {
				delete(w.cancelSeen, k)
			}
			w.cancelOrder = slices.Clone(w.cancelOrder[maxCancelSeen/2:])
			w.trustFromSeq = math.MaxUint64
		}
	}
	for fl := range w.running {
		if fl.task.TaskID == taskID && fl.task.ConversationID == conv {
			w.log.Info("cancel received", slog.String("task_id", taskID))
			fl.cancel(protocol.ErrCancelled)
		}
	}
}

// respond publishes res as task's result and acknowledges msg (with Term for
// a cancelled task, which is never retried). A result that cannot be
// published leaves the task to be redelivered.
func (w *Worker) respond(log *slog.Logger, msg jetstream.Msg, task protocol.Task, res protocol.Result, started time.Time, term bool) {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	res.TaskID = task.TaskID
	res.ToolCallID = task.ToolCallID
	res.Worker = w.cfg.ID
	if !started.IsZero() {
		res.StartedAt = started.UTC()
	}
	res.FinishedAt = time.Now().UTC()
	if err := w.publishResult(ctx, task.ConversationID, res); err != nil {
		log.Error("result not published; the task will be redelivered", slog.Any("error", err))
		if err := msg.Nak(); err != nil {
			log.Warn("nak failed", slog.Any("error", err))
		}
		return
	}
	var err error
	if term {
		err = msg.Term()
	} else {
		err = msg.Ack()
	}
	if err != nil {
		log.Warn("ack failed", slog.Any("error", err))
	}
}

// publishResult publishes res on <prefix>.result.<conv>.<task> with
// Nats-Msg-Id res:<task>, so that results of redeliveries are dropped by the
// server within the dedup window. A result too large for a message is
// replaced by a ResultTooLarge error.
func (w *Worker) publishResult(ctx context.Context, conv string, res protocol.Result) error {
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("marshal result: %w", err)
	}
	if max := w.cfg.Conn.MaxPayload(); max > 0 && int64(len(data)) > max-1024 {
		small := protocol.ResultFromOutcome(nil, &protocol.RemoteError{Type: protocol.ErrorResultTooLarge})
		small.TaskID, small.ToolCallID, small.Worker = res.TaskID, res.ToolCallID, res.Worker
		small.StartedAt, small.FinishedAt = res.StartedAt, res.FinishedAt
		if data, err = json.Marshal(small); err != nil {
			return fmt.Errorf("marshal result: %w", err)
		}
	}
	m := nats.NewMsg(w.subj.Result(conv, res.TaskID))
	m.Header.Set(jetstream.MsgIDHeader, "res:"+res.TaskID)
	m.Data = data
	if _, err := w.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish result: %w", err)
	}
	return nil
}

func (w *Worker) count(toolName string, status protocol.Status) {
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.TasksTotal.WithLabelValues(toolName, string(status)).Inc()
	}
}

// malformed terminates a task that does not decode; when its task and
// conversation IDs can be read, the caller gets an error result.
func (w *Worker) malformed(log *slog.Logger, t *tool.Tool, msg jetstream.Msg, err error) {
	log.Error("malformed task terminated", slog.Any("error", err))
	var ids struct {
		TaskID         string `json:"task_id"`
		ConversationID string `json:"conversation_id"`
		ToolCallID     string `json:"tool_call_id"`
	}
	if json.Unmarshal(msg.Data(), &ids) == nil {
		_, e1 := protocol.ParseID(ids.TaskID)
		_, e2 := protocol.ParseID(ids.ConversationID)
		if e1 == nil && e2 == nil {
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			res := protocol.ResultFromOutcome(nil, &protocol.RemoteError{Type: tool.ErrorType(err), Message: err.Error()})
			res.TaskID, res.ToolCallID, res.Worker, res.FinishedAt = ids.TaskID, ids.ToolCallID, w.cfg.ID, time.Now().UTC()
			if perr := w.publishResult(ctx, ids.ConversationID, res); perr != nil {
				log.Warn("error result of a malformed task not published", slog.Any("error", perr))
			}
			cancel()
		}
	}
	w.count(t.Name, protocol.StatusError)
	if err := msg.TermWithReason("malformed task"); err != nil {
		log.Warn("term failed", slog.Any("error", err))
	}
}

// maxDeliverAdvisory is the part of io.nats.jetstream.advisory.v1.max_deliver
// the worker reads.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// onMaxDeliveries turns a task that exhausted its deliveries into a
// DeliveriesExhausted error result and removes it from the work queue
// (where the server keeps it otherwise).
func (w *Worker) onMaxDeliveries(m *nats.Msg) {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return
	}
	w.callbacks.Add(1)
	w.mu.Unlock()
	defer w.callbacks.Done()

	var adv maxDeliverAdvisory
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		w.log.Warn("unreadable max-deliveries advisory", slog.String("subject", m.Subject))
		return
	}
	log := w.log.With(slog.Uint64("stream_seq", adv.StreamSeq), slog.String("consumer", adv.Consumer))
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	raw, err := w.tasksStrm.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return // handled already
	}
	if err != nil {
		log.Error("task of a max-deliveries advisory not loaded", slog.Any("error", err))
		return
	}
	task, err := protocol.DecodeTask(raw.Data, nil)
	if err != nil {
		log.Error("task of a max-deliveries advisory does not decode", slog.Any("error", err))
	} else {
		log = log.With(slog.String("task_id", task.TaskID), slog.String("tool", task.Tool))
		log.Warn("task exhausted its deliveries", slog.Uint64("deliveries", adv.Deliveries))
		res := protocol.ResultFromOutcome(nil, &protocol.RemoteError{
			Type:    protocol.ErrorDeliveriesExhausted,
			Message: fmt.Sprintf("delivered %d times without a result", adv.Deliveries),
		})
		res.TaskID, res.ToolCallID, res.Worker, res.FinishedAt = task.TaskID, task.ToolCallID, w.cfg.ID, time.Now().UTC()
		if err := w.publishResult(ctx, task.ConversationID, res); err != nil {
			log.Error("DeliveriesExhausted result not published", slog.Any("error", err))
			return // keep the task for an operator
		}
		w.count(task.Tool, protocol.StatusError)
	}
	if err := w.tasksStrm.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Warn("exhausted task not deleted", slog.Any("error", err))
	}
}

// writeRegistry writes (or refreshes) the registry entry of every tool.
func (w *Worker) writeRegistry(ctx context.Context) error {
	expires := time.Now().Add(RegistryTTL)
	names := make([]string, 0, len(w.tools))
	for name := range w.tools {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		data, err := json.Marshal(entryFor(w.tools[name], w.cfg.ID, expires))
		if err != nil {
			return fmt.Errorf("natsjs: worker: registry entry of %s: %w", name, err)
		}
		if _, err := w.kv.Put(ctx, RegistryKey(name, w.cfg.ID), data); err != nil {
			return fmt.Errorf("natsjs: worker: write registry entry of %s: %w", name, err)
		}
	}
	return nil
}

func (w *Worker) refreshRegistry() {
	defer w.bg.Done()
	tick := time.NewTicker(w.cfg.RegistryRefresh)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			if err := w.writeRegistry(ctx); err != nil {
				w.log.Warn("registry refresh failed", slog.Any("error", err))
			}
			cancel()
		case <-w.regStop:
			return
		}
	}
}

// deleteRegistry removes the worker's registry entries.
func (w *Worker) deleteRegistry(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	for name := range w.tools {
		if err := w.kv.Delete(ctx, RegistryKey(name, w.cfg.ID)); err != nil {
			w.log.Warn("registry entry not deleted", slog.String("tool", name), slog.Any("error", err))
		}
	}
}

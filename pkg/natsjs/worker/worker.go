package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/bufpool"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/startstop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/toolstate"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// Defaults of [Config].
const (
	DefaultConcurrency     = 4
	DefaultGracePeriod     = 30 * time.Second
	DefaultRegistryRefresh = 10 * time.Second
)

// Internal timings.
const (
	pullWait          = 5 * time.Second        // a pull request waits at most this long
	shortPull         = 250 * time.Millisecond // … or this long while others wait for a slot
	fetchRetryWait    = time.Second            // pause after a failed pull
	lookupNakDelay    = time.Second            // redelivery delay of a task whose cancel look-up failed, per delivery so far
	maxLookupNakDelay = 10 * time.Second       // … at most
)

// Config configures a [Worker].
type Config struct {
	// Conn is the NATS connection. Required. The worker listens to its
	// status changes (to catch up with cancels after a reconnect) but
	// leaves its handlers alone.
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
	// backoff (see [natsjs.ProvisionOptions.AckWait]); every replica of a tool must
	// use the same value. Zero or less keeps the definition's (10 s plus
	// backoff).
	AckWait time.Duration
	// HeartbeatInterval is how often a running task's delivery is kept
	// alive with an in-progress ack. Defaults to a third of the consumers'
	// ack wait.
	HeartbeatInterval time.Duration
	// MaxDeliver, when positive, replaces the task consumers' delivery
	// limit (the metadata's natsjs.MaxDeliverKey; every replica of a tool
	// must use the same value).
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
	// Replicas, when positive, is the replication factor of the streams
	// the worker creates, and is compared with existing ones (see
	// [natsjs.ProvisionOptions.Replicas]).
	Replicas int
	// MemoryStorage creates missing streams and consumers in memory (tests).
	MemoryStorage bool
	// TaskKey, when set, is the key of the only agents whose approved
	// tasks the worker runs: an approved task (`"approved":true`) without a
	// valid protocol.TaskMACHeader is answered with an error result of
	// type protocol.ErrorUnauthenticatedTask and not run. The embedded
	// default's in-process worker sets it to its store's key, so that a
	// task it did not get from an agent of its store (a server that is not
	// the store's relaying someone else's) cannot run an approval-gated
	// tool as its user.
	TaskKey []byte
	// TracerProvider, if set, records a consumer span for every task
	// (process <subject>), the child of the dispatch whose W3C trace
	// context the task carries in its headers, and a span of the tool
	// (execute_tool NAME) within it; the task's result carries the task
	// span's trace context (SPEC §14). Nil records none.
	TracerProvider trace.TracerProvider
	// NoEffectLedger runs the tools without the effect ledger (SPEC §13):
	// no entry is written or read, so a task whose worker died while its
	// tool ran is run again on its next delivery, also for a tool not
	// declared idempotent, and so is a task whose result was stored (the
	// second result dropped as a duplicate): the at-least-once execution
	// of SPEC §5.3 alone. It exists to measure what the ledger costs
	// (make bench).
	NoEffectLedger bool
	// NoLimits runs the tools without fleet control (SPEC §19): no
	// limit is applied (neither the tools' nor those tasks carry), no call
	// waits in a queue, a tool's retry_after is answered as its error. It
	// exists to measure what the limits cost an unlimited tool (make
	// bench).
	NoLimits bool
	// SlotLease is how long a slot of a tool's limits, or the claim of a
	// call run from its queue, lasts unless renewed (every third of it
	// while the call runs): how soon the slots of a worker killed while
	// holding them are free again. Defaults to [DefaultSlotLease].
	SlotLease time.Duration
}

// Worker serves tools to agents over JetStream (SPEC §5.3): it pulls tasks
// from one durable consumer per tool, shared by every replica, runs them
// with bounded concurrency (never prefetching a task it has no slot for),
// keeps them alive with in-progress acks, honours cancellations (also those
// published while it was disconnected) and deadlines, publishes their
// results (retrying, never re-running a finished tool), and turns tasks
// that exhausted their deliveries into DeliveriesExhausted results. It
// advertises its tools in the registry (SPEC §5.4).
//
// A Worker is started once with [Worker.Start] and stopped with
// [Worker.Stop] or [Worker.StopAndCancel].
type Worker struct {
	cfg            Config
	log            *slog.Logger
	tracer         trace.Tracer
	subj           protocol.Subjects
	names          natsjs.Names
	heartbeatEvery time.Duration // set by Start from the consumers' ack wait
	slots          *slotPool
	cancels        *cancelIndex

	// Fleet control (limits.go, queue.go): the tools' shared states (nil
	// with NoLimits), the slots and claims held, each tool's pump.
	state *toolstate.Store
	lease time.Duration
	held  held
	// pumpLook, when set (tests), replaces pumpActive and pumpIdle: the
	// longest a pump waits before looking at its queue again unwoken.
	pumpLook atomic.Int64

	// The tools served (parts.go): read without a lock, replaced (copy on
	// write) under setMu by Start, Serve and Retire; regMu orders the
	// registry's writes and deletes.
	parts atomic.Pointer[map[string]*toolPart]
	setMu sync.Mutex
	regMu sync.Mutex

	js            jetstream.JetStream
	tasksStream   jetstream.Stream
	registry      direct.Keys // its tools' entries
	effects       direct.Keys // the effect ledger (SPEC §13)
	startedPrefix []byte      // the start of this worker's started entries (startedEntry)

	life  startstop.Base
	ready atomic.Bool

	mu           sync.Mutex
	subs         []*nats.Subscription // cancellations
	status       chan nats.Status     // the connection's status changes
	statusCancel context.CancelFunc   // ends the watcher's catch-ups

	fetchCtx    context.Context
	fetchCancel context.CancelFunc
	runCtx      context.Context // cancelled with errShutdown after the grace period
	runCancel   context.CancelCauseFunc
	hardCtx     context.Context // cancelled when Stop gives up: result publishes stop retrying
	hardCancel  context.CancelFunc
	bgStop      chan struct{}
	reconn      atomic.Pointer[chan struct{}] // closed (and replaced) at each reconnect

	fetchers sync.WaitGroup // per tool, a fetcher and 2 × Concurrency runners
	periodic sync.WaitGroup // registry refresher
	watcher  sync.WaitGroup // connection watcher
	bufs     bufpool.Pool   // result encoding buffers

	afterResultStored atomic.Pointer[func()] // tests: called between a result stored and its delivery acknowledged
}

// errShutdown is the cause of a task context cancelled by the worker's own
// shutdown: the task is handed back, never answered.
var errShutdown = errors.New("natsjs: worker shutting down")

// errDeadline is the cause of a task context whose deadline passed.
var errDeadline = errors.New("natsjs: task deadline exceeded")

// New checks cfg and returns a worker ready to [Worker.Start].
func New(cfg Config) (*Worker, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: worker: no Conn", natsjs.ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if err := protocol.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: worker: %w", natsjs.ErrInvalidConfig, err)
	}
	if cfg.ID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		cfg.ID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if len(cfg.Tools) == 0 {
		return nil, fmt.Errorf("%w: worker: no tools", natsjs.ErrInvalidConfig)
	}
	tools := make(map[string]*tool.Tool, len(cfg.Tools))
	for _, t := range cfg.Tools {
		if err := checkTool(t); err != nil {
			return nil, err
		}
		if _, dup := tools[t.Name]; dup {
			return nil, fmt.Errorf("%w: worker: tool %s given twice", natsjs.ErrInvalidConfig, t.Name)
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
	if cfg.SlotLease <= 0 {
		cfg.SlotLease = DefaultSlotLease
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{
		tracer:  telemetry.Tracer(cfg.TracerProvider),
		cfg:     cfg,
		log:     log.With(slog.String("worker", cfg.ID)),
		subj:    protocol.Subjects{Prefix: cfg.Prefix},
		names:   natsjs.NamesFor(cfg.Prefix),
		slots:   newSlotPool(cfg.Concurrency),
		bufs:    bufpool.New(),
		cancels: newCancelIndex(),
		bgStop:  make(chan struct{}),
		lease:   cfg.SlotLease,
	}
	parts := make(map[string]*toolPart, len(tools))
	for name, t := range tools {
		parts[name] = w.newPart(t)
	}
	w.parts.Store(&parts)
	reconn := make(chan struct{})
	w.reconn.Store(&reconn)
	return w, nil
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// checkTool checks a tool to serve.
func checkTool(t *tool.Tool) error {
	if t == nil {
		return fmt.Errorf("%w: worker: nil tool", natsjs.ErrInvalidConfig)
	}
	if err := tool.ValidateName(t.Name); err != nil {
		return fmt.Errorf("%w: worker: %w", natsjs.ErrInvalidConfig, err)
	}
	if t.Kind == tool.KindExternal || t.Handler == nil {
		return fmt.Errorf("%w: worker: tool %s is external", natsjs.ErrInvalidConfig, t.Name)
	}
	return nil
}

// Ready reports whether the worker serves: the streams exist, every tool's
// consumer is bound and its registry entry written, and it is not stopping.
func (w *Worker) Ready() bool { return w.ready.Load() }

// Stopped is closed once the worker has stopped.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Done() }

func (w *Worker) provisionOptions() natsjs.ProvisionOptions {
	return natsjs.ProvisionOptions{
		Prefix:        w.cfg.Prefix,
		AckWait:       w.cfg.AckWait,
		MaxDeliver:    w.cfg.MaxDeliver,
		Replicas:      w.cfg.Replicas,
		MemoryStorage: w.cfg.MemoryStorage,
	}
}

// Start provisions the streams, binds each tool's durable task consumer
// (updating the fields JetStream can update in place) and reads its
// delivery limit, subscribes to cancellations, writes the registry entries and starts serving. It does not block: the worker runs until [Worker.Stop].
// ctx bounds the start-up only. On error nothing keeps running.
func (w *Worker) Start(ctx context.Context) (err error) {
	if w.life.StartInit() != nil {
		return natsjs.ErrStarted
	}
	defer func() {
		if err != nil {
			w.unwatchConn()
			w.unsubscribe()
			w.life.StartFailed()
		}
	}()

	js, err := jetstream.New(w.cfg.Conn)
	if err != nil {
		return fmt.Errorf("natsjs: worker: %w", err)
	}
	w.js = js
	popts := w.provisionOptions()
	// The streams a worker uses, and no other. Only the info of the tasks
	// stream and of the registry's is read (their subjects name tools and
	// workers alone); the others are found by direct gets of the worker's
	// own subjects and keys (streams.go): their info lists their
	// subjects, and so the conversations and tasks of every tool.
	if err := natsjs.EnsureStreams(ctx, js, popts, w.names.Tasks, w.names.RegistryStream); err != nil {
		return fmt.Errorf("natsjs: worker: %w", jsop.Nested(err))
	}
	if w.tasksStream, err = js.Stream(ctx, w.names.Tasks); err != nil {
		return fmt.Errorf("natsjs: worker: bind stream %s: %w", w.names.Tasks, err)
	}
	var ackWait time.Duration
	parts := *w.parts.Load()
	for _, name := range w.toolNames() {
		aw, err := w.bindPart(ctx, parts[name])
		if err != nil {
			return err
		}
		if aw > 0 && (ackWait == 0 || aw < ackWait) {
			ackWait = aw
		}
	}
	if err := w.findStreams(ctx, js, popts); err != nil {
		return err
	}
	w.registry = direct.Keys{JS: js, NC: w.cfg.Conn, Stream: w.names.RegistryStream, Bucket: w.names.RegistryBucket}
	if !w.cfg.NoLimits {
		w.state = toolstate.New(js, w.cfg.Conn, w.names)
	}
	w.heartbeatEvery = w.cfg.HeartbeatInterval
	if w.heartbeatEvery <= 0 {
		w.heartbeatEvery = ackWait / 3
	}
	if !w.cfg.NoEffectLedger {
		w.effects = direct.Keys{JS: js, NC: w.cfg.Conn, Stream: w.names.EffectsStream, Bucket: w.names.EffectsBucket}
		if w.startedPrefix, err = startedPrefix(w.cfg.ID); err != nil {
			return err
		}
	}

	// Cancellations: a core subscription sees every cancel as it is
	// stored, while the connection is up; the connection watcher catches
	// up after a reconnect.
	w.watchConn()
	for _, name := range w.toolNames() {
		if err := w.subscribePart(parts[name]); err != nil {
			return err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, jsop.Timeout) // Flush needs a deadline
	defer cancel()
	if err := w.cfg.Conn.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("natsjs: worker: flush subscriptions: %w", err)
	}
	// Every cancel stored from now on reaches the subscription; tasks stored
	// from now on can only be cancelled from now on.
	// Should this fail, every task is looked up until the connection
	// watcher has caught up.
	if err := w.catchUp(ctx, w.cancels.epoch()); err != nil {
		w.log.Warn("cancel index not caught up at start; looking every task up", slog.Any("error", err))
	}
	for _, name := range w.toolNames() { // subscribed and flushed: every later write reaches the gate
		if err := w.loadGate(ctx, parts[name]); err != nil {
			return err
		}
	}
	if err := w.writeRegistry(ctx); err != nil {
		w.deleteRegistry(ctx) // the entries written before the failure
		return err
	}

	w.fetchCtx, w.fetchCancel = context.WithCancel(context.Background())
	w.runCtx, w.runCancel = context.WithCancelCause(context.Background())
	w.hardCtx, w.hardCancel = context.WithCancel(context.Background())
	// Each tool gets one fetcher, which pulls only while it holds slots
	// and one task per slot held (no prefetching), and its runners
	// (runPart).
	for _, name := range w.toolNames() {
		w.runPart(parts[name])
	}
	w.periodic.Add(1)
	go w.refreshRegistry() //nolint:gosec // G118: owned by the worker, stopped by Stop (bgStop, periodic), not by Start's ctx
	if w.state != nil {
		w.periodic.Add(1)
		go w.renewLeases()
	}
	w.ready.Store(true)
	w.log.Info("worker started", slog.Int("tools", len(parts)), slog.Int("concurrency", w.cfg.Concurrency),
		slog.Duration("ack_wait", ackWait), slog.Duration("heartbeat", w.heartbeatEvery))
	return nil
}

// unsubscribe drops every subscription: the worker's and its tools'.
func (w *Worker) unsubscribe() {
	w.mu.Lock()
	subs := w.subs
	w.subs = nil
	w.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	for _, p := range *w.parts.Load() {
		unsubscribePart(p)
	}
}

// Stop stops the worker gracefully: it stops fetching, removes its registry
// entries, lets in-flight tasks finish until the grace period passes, then
// cancels the rest and hands them back (nak) for another replica, without
// publishing a result for them, and flushes the connection so that the
// hand-backs reach the server before the caller closes it. ctx bounds the
// whole stop beyond the grace period (a tool that ignores its cancellation,
// a result publish that keeps failing): when it ends, the tasks still held
// are handed back and Stop returns ctx's error. Give it more time than the
// grace period. Stopping twice is harmless.
func (w *Worker) Stop(ctx context.Context) error { return w.stop(ctx, w.cfg.GracePeriod) }

// StopAndCancel is [Worker.Stop] without a grace period: in-flight tasks are
// cancelled and handed back at once.
func (w *Worker) StopAndCancel(ctx context.Context) error { return w.stop(ctx, 0) }

func (w *Worker) stop(ctx context.Context, grace time.Duration) error {
	return w.life.Stop(func() error { return w.shutdown(ctx, grace) })
}

func (w *Worker) shutdown(ctx context.Context, grace time.Duration) error {
	if w.fetchCancel == nil { // Start failed
		return nil
	}
	w.ready.Store(false)
	// No part starts or retires from now on (Serve and Retire find the
	// worker not running once they hold setMu).
	w.setMu.Lock()
	w.setMu.Unlock() //nolint:staticcheck // SA2001: a barrier, nothing to guard
	w.log.Info("worker stopping", slog.Duration("grace", grace))
	// Stop pulling first: a task pulled from now on is handed back; a
	// runner running a task returns once the task is settled.
	w.fetchCancel()
	close(w.bgStop)
	w.periodic.Wait()
	w.deleteRegistry(ctx)

	// Let in-flight tasks finish within the grace period.
	handlersDone := make(chan struct{})
	go func() { w.fetchers.Wait(); close(handlersDone) }()
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
		// Tools that ignore their cancellation, or results that cannot be
		// published: hand their tasks back now, before the connection
		// closes; their handlers end when their tools return.
		n := w.cancels.handBackAll()
		w.hardCancel()
		err = fmt.Errorf("natsjs: worker stop: %d tasks still held: %w", n, ctx.Err())
	}
	w.hardCancel()
	// The hand-backs (naks) and acks must reach the server before the
	// caller closes the connection.
	if !w.cfg.Conn.IsConnected() {
		// No server to flush to (it is gone): the tasks come back after
		// their ack wait.
		w.log.Warn("stopping without a server: held tasks are redelivered after their ack wait")
	} else if ferr := w.cfg.Conn.FlushTimeout(jsop.Timeout); ferr != nil {
		w.log.Warn("flush on stop failed", slog.Any("error", ferr))
	}
	w.unwatchConn()
	w.unsubscribe()
	w.log.Info("worker stopped")
	return err
}

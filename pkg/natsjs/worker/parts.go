package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/tool"
)

// toolPart is one served tool and what the worker runs for it: its task
// consumer, its fetcher, runners and pump, its cancel and gate
// subscriptions. The parts of the tools given to [New] start with the
// worker; [Worker.Serve] starts one while the worker runs, [Worker.Retire]
// stops one. Every goroutine of a part is counted in the part's wg and in
// the worker's fetchers, so that the worker's stop waits for it too.
type toolPart struct {
	name  string
	tool  atomic.Pointer[tool.Tool] // replaced by Serve of a changed tool
	spans spanNames

	// Set before the part is published, read-only after.
	consumer jetstream.Consumer
	limit    int    // the consumer's delivery limit (natsjs.MaxDeliverKey), 0: none
	gate     *gate  // nil with NoLimits
	pump     *pump  // nil with NoLimits
	floor    uint64 // tasks stored at or below this sequence are looked up for a cancel (a part started late)
	subs     []*nats.Subscription

	ctx    context.Context // its fetching; ended when retired or when the worker stops fetching
	cancel context.CancelFunc
	wg     sync.WaitGroup // its fetcher, runners and pump
}

// newPart returns the part of t, not started.
func (w *Worker) newPart(t *tool.Tool) *toolPart {
	subject := w.subj.Task(t.Name)
	p := &toolPart{name: t.Name, spans: spanNames{subject: subject, process: "process " + subject, execute: spanExecute(t.Name)}}
	p.tool.Store(t)
	return p
}

// partOf returns the part serving toolName now, nil for none.
func (w *Worker) partOf(toolName string) *toolPart {
	return (*w.parts.Load())[toolName]
}

// toolNames returns the names of the tools served, sorted.
func (w *Worker) toolNames() []string {
	return slices.Sorted(maps.Keys(*w.parts.Load()))
}

// publishParts replaces the parts served; w.setMu held.
func (w *Worker) publishParts(edit func(map[string]*toolPart)) {
	next := maps.Clone(*w.parts.Load())
	edit(next)
	w.parts.Store(&next)
}

// bindPart binds p's task consumer and reads its delivery limit; it
// returns the consumer's ack wait.
func (w *Worker) bindPart(ctx context.Context, p *toolPart) (time.Duration, error) {
	c, err := natsjs.EnsureTaskConsumer(ctx, w.js, p.name, w.provisionOptions())
	if err != nil {
		return 0, fmt.Errorf("natsjs: worker: %w", jsop.Nested(err))
	}
	p.consumer = c
	if limit, ok := natsjs.DeliveryLimit(c.CachedInfo().Config); ok {
		p.limit = limit
	} else {
		w.log.Warn("task consumer has no delivery limit in its metadata; the server's max_deliver governs",
			slog.String("tool", p.name), slog.String("key", natsjs.MaxDeliverKey))
	}
	return c.CachedInfo().Config.AckWait, nil
}

// subscribePart subscribes to p's cancels and, with limits, to its state
// (its gate), adding the subscriptions to p.subs.
func (w *Worker) subscribePart(p *toolPart) error {
	sub, err := w.subscribeCancels(p.name)
	if sub != nil {
		p.subs = append(p.subs, sub)
	}
	if err != nil {
		return err
	}
	if w.state != nil {
		p.gate = &gate{}
		sub, err := w.watchGate(p.name, p.gate)
		if err != nil {
			return err
		}
		p.subs = append(p.subs, sub)
	}
	return nil
}

// loadGate reads p's state once into its gate (after its subscription:
// every later write reaches the gate).
func (w *Worker) loadGate(ctx context.Context, p *toolPart) error {
	if p.gate == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	st, _, err := w.state.Load(sctx, p.name)
	if err != nil {
		return fmt.Errorf("natsjs: worker: %w", err)
	}
	p.gate.set(st)
	return nil
}

// unsubscribePart drops p's subscriptions.
func unsubscribePart(p *toolPart) {
	for _, s := range p.subs {
		_ = s.Unsubscribe()
	}
}

// runPart starts p's goroutines: one fetcher and twice as many runners as
// the worker has slots, so that a runner is free for every slot, also for
// the slots of tasks whose results are being published, and (with limits)
// the pump of its queue, which shares its runners.
func (w *Worker) runPart(p *toolPart) {
	p.ctx, p.cancel = context.WithCancel(w.fetchCtx)
	rs := newRunnerPool(2 * w.cfg.Concurrency)
	goPart := func(f func()) {
		w.fetchers.Add(1)
		p.wg.Add(1)
		go func() {
			defer w.fetchers.Done()
			defer p.wg.Done()
			f()
		}()
	}
	for range rs.n {
		goPart(func() { w.run(p, rs) })
	}
	if w.state != nil {
		p.pump = &pump{w: w, part: p, rs: rs, kick: make(chan struct{}, 1)}
		goPart(p.pump.run)
	}
	goPart(func() { w.fetch(p, rs) })
}

// ErrNotRunning is returned by [Worker.Serve] and [Worker.Retire] on a
// worker not started, or stopping.
var ErrNotRunning = fmt.Errorf("%w: worker not running", natsjs.ErrInvalidConfig)

// Serve serves t while the worker runs (an MCP server's tool listed after
// the worker started, SPEC §16): its task consumer bound, its cancels and
// state subscribed, its registry entry written, its fetcher, runners and
// pump started. A tool the worker serves already is replaced by t: the
// calls that start from now on run t (its schema, timeout, limits…), those
// running finish as they started, and its registry entry is rewritten. t
// is checked as [New] checks its tools. ctx bounds the start of the part;
// on error nothing of it runs.
func (w *Worker) Serve(ctx context.Context, t *tool.Tool) error {
	if err := checkTool(t); err != nil {
		return err
	}
	w.setMu.Lock()
	defer w.setMu.Unlock()
	if !w.life.Running() || w.fetchCtx == nil {
		return ErrNotRunning
	}
	if p := w.partOf(t.Name); p != nil {
		w.regMu.Lock()
		p.tool.Store(t)
		err := w.writeEntry(ctx, t, time.Now().Add(natsjs.RegistryTTL))
		w.regMu.Unlock()
		if err != nil {
			return err
		}
		w.log.Info("tool changed", slog.String("tool", t.Name))
		return nil
	}
	p := w.newPart(t)
	if _, err := w.bindPart(ctx, p); err != nil {
		return err
	}
	if err := w.subscribePart(p); err != nil {
		unsubscribePart(p)
		return err
	}
	// The cancels of its tasks stored before its subscription are looked
	// up: the index saw none of them.
	fctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	if err := w.cfg.Conn.FlushWithContext(fctx); err != nil {
		unsubscribePart(p)
		return fmt.Errorf("natsjs: worker: flush subscriptions: %w", err)
	}
	info, err := w.tasksStream.Info(fctx)
	if err != nil {
		unsubscribePart(p)
		return fmt.Errorf("natsjs: worker: stream info %s: %w", w.names.Tasks, err)
	}
	p.floor = info.State.LastSeq
	if err := w.loadGate(ctx, p); err != nil {
		unsubscribePart(p)
		return err
	}
	w.regMu.Lock()
	w.publishParts(func(m map[string]*toolPart) { m[p.name] = p })
	err = w.writeEntry(ctx, t, time.Now().Add(natsjs.RegistryTTL))
	w.regMu.Unlock()
	if err != nil {
		w.publishParts(func(m map[string]*toolPart) { delete(m, p.name) })
		w.deleteEntry(ctx, p.name)
		unsubscribePart(p)
		return err
	}
	w.runPart(p)
	w.log.Info("tool added", slog.String("tool", t.Name))
	return nil
}

// Retire stops serving the tool named (an MCP server's tool no longer
// listed, SPEC §16): its registry entry is deleted, so that agents stop
// calling it; its fetcher stops pulling (the tasks it pulled and had not
// started are handed back, to another replica that serves it or to this
// worker should it serve the tool again); the calls of it running finish
// and publish their results, with their cancels still heard, after which
// its runners and subscriptions end. Retire does not wait for them. Its
// tasks not pulled stay in the stream (bounded by their deadlines), and
// its queued calls in its queue. A tool not served is no error.
func (w *Worker) Retire(ctx context.Context, name string) error {
	w.setMu.Lock()
	defer w.setMu.Unlock()
	if !w.life.Running() || w.fetchCtx == nil {
		return ErrNotRunning
	}
	p := w.partOf(name)
	if p == nil {
		return nil
	}
	w.regMu.Lock()
	w.publishParts(func(m map[string]*toolPart) { delete(m, name) })
	w.deleteEntry(ctx, name)
	w.regMu.Unlock()
	p.cancel()
	w.fetchers.Add(1)
	go func() { // owned by the worker: its stop waits for fetchers
		defer w.fetchers.Done()
		p.wg.Wait()
		unsubscribePart(p)
		w.log.Info("tool retired", slog.String("tool", name))
	}()
	return nil
}

// writeEntry writes t's registry entry.
func (w *Worker) writeEntry(ctx context.Context, t *tool.Tool, expires time.Time) error {
	data, err := json.Marshal(natsjs.NewRegistryEntry(t, w.cfg.ID, expires))
	if err != nil {
		return fmt.Errorf("natsjs: worker: registry entry of %s: %w", t.Name, err)
	}
	if _, err := w.registry.Put(ctx, natsjs.RegistryKey(t.Name, w.cfg.ID), data); err != nil {
		return fmt.Errorf("natsjs: worker: write registry entry of %s: %w", t.Name, err)
	}
	return nil
}

// deleteEntry deletes the registry entry of the tool named.
func (w *Worker) deleteEntry(ctx context.Context, name string) {
	if !w.cfg.Conn.IsConnected() {
		return // the entry expires with its TTL
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jsop.Timeout)
	defer cancel()
	if _, err := w.registry.Delete(ctx, natsjs.RegistryKey(name, w.cfg.ID), 0); err != nil {
		w.log.Warn("registry entry not deleted", slog.String("tool", name), slog.Any("error", err))
	}
}

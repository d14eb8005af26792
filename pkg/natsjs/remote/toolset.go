package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/startstop"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// ToolsetConfig configures a [Toolset].
type ToolsetConfig struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Prefix is the subject prefix. Defaults to [protocol.DefaultPrefix].
	Prefix string
	// Dispatcher runs the calls. Required, and started before the tools are
	// called.
	Dispatcher *Dispatcher
	// Filter, when not nil, restricts the toolset to these tool names.
	Filter []string
	// Policies are the agent's own policies for tools, by name, which no
	// registry entry overrides (SPEC §5.4): an entry's approval is only
	// ever added to the policy's, a pinned description and schema are what
	// the model is offered and what arguments are validated against, and
	// no entry of a name the policy declares external is offered. An entry
	// that departs from its tool's policy is a clash (toolset_clashes.go).
	Policies map[string]tool.Policy
	// Metrics, if set, counts the clashes
	// (offload_registry_clashes_total).
	Metrics *metrics.Agent
	// Logger receives the toolset's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Replicas, when positive, is the replication factor of the registry's
	// stream when missing, and is compared with an existing one (see
	// [natsjs.ProvisionOptions.Replicas]).
	Replicas int
	// MemoryStorage creates the registry's stream in memory when missing
	// (tests).
	MemoryStorage bool
}

// Toolset is the [tool.Toolset] of the tools workers advertise in the
// registry (SPEC §5.4). It watches the registry, so tools appear and
// disappear as workers come and go. An entry it cannot offer (malformed,
// without expires_at or past it, with an unusable definition) is skipped:
// logged once per revision with its key and reason, and listed by
// [Toolset.Skipped]. The registry advertises, it does not decide: an entry
// is held to the agent's policy for its tool (ToolsetConfig.Policies), and
// one that departs from it is a clash, reported and listed by
// [Toolset.Clashes]. When several workers advertise a tool, the definition
// of the one with the smallest registry key among those without a clash
// is used (then among the others). Calling one of its tools publishes a
// task through the [Dispatcher] and waits for the result.
type Toolset struct {
	cfg    ToolsetConfig
	log    *slog.Logger
	js     jetstream.JetStream
	kv     jetstream.KeyValue // set by Start
	filter map[string]bool
	life   startstop.Base

	mu      sync.Mutex
	entries map[string]natsjs.RegistryEntry // by registry key
	revs    map[string]uint64               // the revision of each entry
	skipped map[string]SkippedEntry         // by registry key (toolset_skipped.go)
	clashes map[string]clash                // by registry key (toolset_clashes.go)
	built   map[string]builtTool            // by tool name
	changed chan struct{}                   // closed at the next change

	// tools is the last answer of Tools, valid until toolsUntil (the
	// first expiry among its entries) or the next registry update.
	tools      []*tool.Tool
	toolsUntil time.Time

	cancel context.CancelFunc // ends the watch (set by Start)
	done   chan struct{}      // closed when the watch has ended
}

type builtTool struct {
	sig string
	t   *tool.Tool
}

var _ tool.Toolset = (*Toolset)(nil)

// Time a broken registry watch waits before watching again.
const rewatchWait = time.Second

// NewToolset checks cfg and returns a toolset ready to [Toolset.Start]:
// until then it offers no tool.
func NewToolset(cfg ToolsetConfig) (*Toolset, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: remote toolset: no Conn", natsjs.ErrInvalidConfig)
	}
	if cfg.Dispatcher == nil {
		return nil, fmt.Errorf("%w: remote toolset: no Dispatcher", natsjs.ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("natsjs: remote toolset: %w", err)
	}
	r := &Toolset{
		cfg:     cfg,
		log:     log,
		js:      js,
		entries: make(map[string]natsjs.RegistryEntry),
		revs:    make(map[string]uint64),
		skipped: make(map[string]SkippedEntry),
		clashes: make(map[string]clash),
		built:   make(map[string]builtTool),
		changed: make(chan struct{}),
	}
	if cfg.Filter != nil {
		r.filter = make(map[string]bool, len(cfg.Filter))
		for _, n := range cfg.Filter {
			r.filter[n] = true
		}
	}
	return r, nil
}

// Start binds the registry bucket (creating its stream when missing),
// reads its current entries and keeps watching it until [Toolset.Stop].
// It does not block beyond the first read; ctx bounds the start-up only. A
// toolset starts once: on error it is stopped, nothing of it running.
func (r *Toolset) Start(ctx context.Context) (err error) {
	if r.life.StartInit() != nil {
		return natsjs.ErrStarted
	}
	defer func() {
		if err != nil {
			r.life.StartFailed()
		}
	}()
	kv, err := natsjs.EnsureRegistry(ctx, r.js, natsjs.ProvisionOptions{Prefix: r.cfg.Prefix, Replicas: r.cfg.Replicas, MemoryStorage: r.cfg.MemoryStorage})
	if err != nil {
		return fmt.Errorf("natsjs: remote toolset: %w", jsop.Nested(err))
	}
	r.kv = kv
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("natsjs: remote toolset: watch registry: %w", err)
	}
	// Read the current entries before returning.
	var last uint64
	for initial := true; initial; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				cancel()
				return fmt.Errorf("natsjs: remote toolset: registry watch closed")
			}
			if e == nil {
				initial = false
				break
			}
			last = e.Revision()
			r.apply(e)
		case <-ctx.Done():
			_ = w.Stop()
			cancel()
			return fmt.Errorf("natsjs: remote toolset: read the registry: %w", natsjs.Explain(ctx, r.js, "$JS.API.CONSUMER.CREATE."+natsjs.NamesFor(r.cfg.Prefix).RegistryStream, ctx.Err()))
		}
	}
	r.cancel, r.done = cancel, make(chan struct{})
	go r.watch(wctx, w, last)
	return nil
}

// Stop stops watching the registry; ctx bounds the wait for the watch to
// end. The tools already returned keep working as long as the dispatcher
// runs, and Tools answers from what was last read. Stopping twice is
// harmless: every caller waits for the one stop.
func (r *Toolset) Stop(ctx context.Context) error {
	return r.life.Stop(func() error {
		if r.cancel == nil { // the start failed
			return nil
		}
		r.cancel()
		select {
		case <-r.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// Stopped is closed once the toolset has stopped.
func (r *Toolset) Stopped() <-chan struct{} { return r.life.Done() }

// watch applies registry updates until ctx ends, watching again from the
// last revision seen when the watch breaks (e.g. after a reconnect).
func (r *Toolset) watch(ctx context.Context, w jetstream.KeyWatcher, last uint64) {
	defer close(r.done)
	for {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			last = e.Revision()
			r.apply(e)
		}
		_ = w.Stop()
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("registry watch broke; watching again", slog.Uint64("revision", last))
		for {
			select {
			case <-time.After(rewatchWait):
			case <-ctx.Done():
				return
			}
			var err error
			if w, err = r.kv.WatchAll(ctx, jetstream.ResumeFromRevision(last+1)); err == nil {
				break
			}
			r.log.Warn("registry watch failed", slog.Any("error", err))
		}
	}
}

// apply records one registry update: an entry that cannot be offered is
// skipped, with its reason.
func (r *Toolset) apply(e jetstream.KeyValueEntry) {
	key := e.Key()
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.entries, key)
	delete(r.revs, key)
	delete(r.skipped, key)
	delete(r.clashes, key)
	if e.Operation() == jetstream.KeyValuePut {
		entry, err := natsjs.ParseRegistryEntry(key, e.Value())
		now := time.Now()
		switch {
		case err != nil:
			r.skipLocked(key, e.Revision(), strings.TrimPrefix(err.Error(), "natsjs: "))
		case entry.ExpiresAt.IsZero():
			r.skipLocked(key, e.Revision(), "no expires_at: an entry must say until when it is valid")
		case !entry.ExpiresAt.After(now):
			r.skipLocked(key, e.Revision(), fmt.Sprintf("expires_at %s was already past when read (%s ago): its worker stopped refreshing it, or the worker's clock is behind",
				entry.ExpiresAt.UTC().Format(time.RFC3339), now.Sub(entry.ExpiresAt).Round(time.Second)))
		default:
			// An entry departing from the agent's policy is reported; one
			// of a name the agent declares external is not offered.
			if withheld := r.clashLocked(key, e.Revision(), entry); !withheld {
				r.entries[key] = entry
				r.revs[key] = e.Revision()
			}
		}
	}
	r.tools = nil
	close(r.changed)
	r.changed = make(chan struct{})
}

// Changed returns a channel closed at the next registry update seen.
func (r *Toolset) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Tools implements [tool.Toolset]: the tools advertised now by at least one
// worker (and allowed by the filter), sorted by name.
func (r *Toolset) Tools(context.Context) ([]*tool.Tool, error) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools != nil && now.Before(r.toolsUntil) {
		return slices.Clone(r.tools), nil
	}
	r.expireLocked(now)
	var out []*tool.Tool
	var until time.Time
	for built := false; !built; {
		chosen := make(map[string]string) // name → key
		for key, e := range r.entries {
			if r.filter != nil && !r.filter[e.Name] {
				continue
			}
			if k, ok := chosen[e.Name]; !ok || r.preferLocked(key, k) {
				chosen[e.Name] = key
			}
		}
		out, until, built = make([]*tool.Tool, 0, len(chosen)), time.Time{}, true
		for _, key := range chosen {
			e := r.entries[key]
			if until.IsZero() || e.ExpiresAt.Before(until) {
				until = e.ExpiresAt
			}
			t, err := r.buildLocked(e)
			if err != nil {
				// Skipped until its next revision: choose again, so that
				// another worker's entry of the tool may serve.
				r.skipLocked(key, r.revs[key], "unusable definition: "+err.Error())
				delete(r.entries, key)
				delete(r.revs, key)
				built = false
				break
			}
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *tool.Tool) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(out) > 0 {
		// Until an entry expires or the registry changes, the answer stays
		// the same: it is kept rather than built again at every step.
		r.tools, r.toolsUntil = out, until
		return slices.Clone(out), nil
	}
	return out, nil
}

// buildLocked returns the tool of an entry, held to the agent's policy for
// it, reusing the one built for the same definition.
func (r *Toolset) buildLocked(e natsjs.RegistryEntry) (*tool.Tool, error) {
	def := e.Def()
	if p, ok := r.cfg.Policies[def.Name]; ok {
		def = p.Hold(def)
	}
	sigBytes, err := json.Marshal(struct {
		Def     tool.Def
		Retries *int
		Timeout time.Duration
	}{def, e.Retries, e.TimeoutDuration()})
	if err != nil {
		return nil, err
	}
	sig := string(sigBytes)
	if b, ok := r.built[def.Name]; ok && b.sig == sig {
		return b.t, nil
	}
	var opts []tool.Option
	if e.Retries != nil && *e.Retries >= 0 {
		opts = append(opts, tool.Retries(*e.Retries))
	}
	opts = append(opts, tool.Timeout(e.TimeoutDuration())) // bounds its background calls (executor.go)
	t, err := tool.New(def, r.handler(def.Name), opts...)
	if err != nil {
		return nil, err
	}
	t.Dispatched = true
	r.built[def.Name] = builtTool{sig: sig, t: t}
	return t, nil
}

// handler dispatches a call of the named tool and turns its result into
// the tool's outcome. A call that runs after a deferral keeps the task ID
// it was deferred under (RunContext.TaskID) and takes its attempt.
func (r *Toolset) handler(name string) tool.HandlerFunc {
	return func(ctx context.Context, rc *tool.RunContext, args json.RawMessage) (any, error) {
		task := callTask(rc, name, args, protocol.ModeInline)
		task.TaskID, task.Attempt = rc.TaskID, rc.Attempt
		task.Limits = r.cfg.Policies[name].Limits // the agent's own, beside the worker's (SPEC §19)
		if task.TaskID == "" {
			task.TaskID = protocol.NewID()
		}
		stop := r.relayProgress(ctx, task.ConversationID, task.TaskID, task.Tool)
		dispatch := r.cfg.Dispatcher.Dispatch
		if rc.Again {
			dispatch = r.cfg.Dispatcher.DispatchAgain // its result may be stored already
		}
		h, err := dispatch(ctx, task)
		if err != nil {
			stop()
			return nil, fatalUnlessCancelled(ctx, err)
		}
		select {
		case <-h.Done():
		case <-agent.Suspending(ctx):
			// The run is suspending (SIGTERM): the task runs on on its
			// worker and becomes a background task of the run, whose
			// outcome the conversation's next run delivers.
			unrelayWhenDone(ctx, h, stop)
			return nil, &agent.Handoff{Task: &remoteTask{h: h, log: r.log}, TaskID: task.TaskID, Attempt: task.Attempt,
				Deadline: h.Task().Deadline, StartedAt: h.started}
		case <-ctx.Done():
		}
		defer stop()
		res, err := h.Wait(ctx)
		if err != nil {
			return nil, fatalUnlessCancelled(ctx, err)
		}
		v, err := res.Outcome()
		// A worker's deferral keeps the task's ID: once resolved, the call
		// is dispatched again as its next attempt (SPEC §5.2).
		var ar *tool.ApprovalRequired
		var cd *tool.CallDeferred
		switch {
		case errors.As(err, &ar):
			ar.TaskID = task.TaskID
		case errors.As(err, &cd):
			cd.TaskID = task.TaskID
		}
		return v, err
	}
}

// serves reports whether a worker advertises the named tool now.
func (r *Toolset) serves(name string) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.filter != nil && !r.filter[name] {
		return false
	}
	for _, e := range r.entries {
		if e.Name == name && e.ExpiresAt.After(now) {
			return true
		}
	}
	return false
}

package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/startstop"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// Agent is an agent a Service runs conversations with.
type Agent struct {
	// Name is the agent's name (agentspec.Spec.Name): what a conversation
	// records and what [Service.Start] is given.
	Name string
	// Digest identifies the spec the agent was built from.
	Digest string
	// Description says what the agent does, to the protocol faces (an
	// A2A agent card): the first line of its spec's instructions.
	Description string
	// Agent runs the conversations. Its approvals must be left to pause
	// (no handler deciding them within the run).
	Agent *agent.Agent
	// Approval, if set, is the expiry of the approvals of every tool of
	// Agent whose metadata sets none ("approval"; SPEC §12).
	Approval *session.ApprovalPolicy
	// Tools, if set, are the tools Agent offers: the web inbox checks
	// arguments edited before an approval against their schemas (SPEC
	// §12); without it, it refuses edited arguments.
	Tools tool.Toolset
	// NonBlocking makes every approval and external call of its runs
	// non-blocking (spec approve: background, SPEC §12); without it, those
	// of tools whose metadata says deferred: background are.
	NonBlocking bool
	// Tenant, if set, is the tenant (SPEC §19) of the conversations of
	// Agent started without one (the spec's tenant, or agent serve
	// --tenant): a caller's own ([service.WithTenant]) wins.
	Tenant string
}

// Config configures a [Service].
type Config struct {
	// JetStream reaches the streams. Required.
	JetStream jetstream.JetStream
	// Watches, if set, reaches the events stream for the faces' event
	// watches ([Service.Watch]), on a connection of their own (agentproc:
	// the faces'), so that a slow consumer among them cannot cut the
	// connection of the runs (their results, leases and saves). Defaults
	// to JetStream.
	Watches jetstream.JetStream
	// Provision are the options the wake consumers are ensured with (its
	// Prefix the subjects' prefix).
	Provision natsjs.ProvisionOptions
	// Store keeps the conversations. Required.
	Store Store
	// Inbox reads what arrived for them. Required.
	Inbox Inbox
	// Session is the rest of the configuration of every session the
	// service opens (Announcer, Canceller, Attacher, Answers, MaxPayload,
	// Connected, TracerProvider, Approvals: as agentproc builds it for
	// every agent process). Its Store and Inbox are the service's; its
	// Holder, Logger, Quorum and Expiry are set by the service.
	Session session.Config
	// Agents are the agents this replica serves; at least one, names
	// unique.
	Agents []Agent
	// Holder names this replica in the leases. Defaults to "agent serve".
	Holder string
	// Logger receives the service's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Lifecycle, if set, receives one line, at Info (a failure at
	// Warn), per conversation started, paused, woken, finished and failed
	// on this replica (SPEC §21): what an operator follows at agent serve's
	// default verbosity, without its debug logs. Defaults to Logger.
	Lifecycle *slog.Logger
	// RetryDelay is how long a wake message waits before it is delivered
	// again while another process holds its conversation. Defaults to 1 s.
	RetryDelay time.Duration
	// MissingDelay is how long a wake message waits before it is
	// delivered again when this replica lacks the conversation's agent.
	// Defaults to 10 s.
	MissingDelay time.Duration
	// Concurrency bounds the wakes handled at once (each loads a
	// conversation, claims it and reads what arrived for it); further wake
	// messages wait on the server. Defaults to 16.
	Concurrency int
	// SuspendTimeout bounds how long [Service.Stop] waits for live runs to
	// suspend before it cancels them. Defaults to 20 s.
	SuspendTimeout time.Duration
	// OnContinue, if set, is called when a wake has claimed a conversation
	// and its continuation starts (tests and benchmarks count them).
	OnContinue func(conv string)
	// Metrics, if set, observes the wakes (offload_wake_seconds).
	Metrics *metrics.Serve
	// Expirer, if set, schedules the timeout decision of each announced
	// approval whose tool or agent has a session.ApprovalPolicy (SPEC §12;
	// convstore.Announcer.Expire).
	Expirer session.Expirer
	// Records, if set, are the people's pending records (each approval
	// with the timeout its policy set): with Expirer unset (a server that
	// cannot schedule messages, SPEC §12) the replicas write the
	// approvals' timeouts themselves from them, and a call expires only
	// while a replica runs (timers); with Expirer set, the replicas
	// schedule again the timeouts of the calls whose schedules a roll-up
	// of the expiries stream wiped (guard).
	Records *convstore.Pending
	// TimerInterval is how often the timers sweep Records. Defaults to
	// 1 s.
	TimerInterval time.Duration
	// SweepInterval is how often, jittered by up to half of it either
	// way, the replica continues the conversations whose status says
	// running while no process holds their lease (a replica was killed
	// mid-run; lapsed.go). Defaults to 5 s.
	SweepInterval time.Duration
	// IndexRepairInterval is how often, jittered, the replica repairs the
	// index of pending calls when its Store can (indexrepair.go). Defaults
	// to 10 min.
	IndexRepairInterval time.Duration
	// Unfollow, if set, is called with a conversation's ID when its run on
	// this replica has ended, its state saved: the wiring stops reading
	// the conversation's results there (remote.Client.Unfollow, with
	// remote.ClientConfig.PerConversation), so that a replica receives
	// the results of the conversations it runs, not of every one.
	Unfollow func(conv string)
	// OnFinal, if set, is told how each run of this replica ended, once
	// its state is saved and its lease released (notifications, tests,
	// benchmarks).
	OnFinal func(service.Final)
}

// Service runs and wakes conversations: the core of `agent serve`
// ([service.Core]). [Service.Start] starts it, [Service.Stop] stops it.
type Service struct {
	cfg     Config
	log     *slog.Logger
	agents  map[string]Agent
	records *pending.Desk // over Config.Records; nil without

	ctx     context.Context // the runs' context, cancelled by Stop
	cancel  context.CancelFunc
	suspend chan struct{} // closed by Stop: live runs suspend
	wakes   chan struct{} // a slot per wake handled at once

	life    startstop.Base
	mu      sync.Mutex
	consume []jetstream.ConsumeContext
	cons    []jetstream.Consumer // the wake consumers consumed
	unwatch func()               // stops reading the cancel markers and the status index
	running runningSet           // the conversations whose status says running
	runs    map[string]*liveRun  // live, by conversation
	missing map[string]string
	wg      sync.WaitGroup // wakes and runs
	feeds   feeds          // the conversations' events, read once for their watchers
}

var _ service.Core = (*Service)(nil)

// New returns a Service over cfg; [Service.Start] starts it.
func New(cfg Config) (*Service, error) {
	if cfg.JetStream == nil || cfg.Store == nil || cfg.Inbox == nil {
		return nil, fmt.Errorf("%w: serve: JetStream, Store and Inbox are required", natsjs.ErrInvalidConfig)
	}
	if len(cfg.Agents) == 0 {
		return nil, fmt.Errorf("%w: serve: no agent", natsjs.ErrInvalidConfig)
	}
	agents := map[string]Agent{}
	for _, a := range cfg.Agents {
		if a.Name == "" || a.Agent == nil {
			return nil, fmt.Errorf("%w: serve: an agent needs a name and an agent", natsjs.ErrInvalidConfig)
		}
		if _, dup := agents[a.Name]; dup {
			return nil, fmt.Errorf("%w: serve: agent %s given twice", natsjs.ErrInvalidConfig, a.Name)
		}
		agents[a.Name] = a
	}
	if cfg.Watches == nil {
		cfg.Watches = cfg.JetStream
	}
	if cfg.Holder == "" {
		cfg.Holder = "agent serve"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Lifecycle == nil {
		cfg.Lifecycle = cfg.Logger
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = time.Second
	}
	if cfg.MissingDelay <= 0 {
		cfg.MissingDelay = 10 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.SuspendTimeout <= 0 {
		cfg.SuspendTimeout = 20 * time.Second
	}
	if cfg.TimerInterval <= 0 {
		cfg.TimerInterval = time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 5 * time.Second
	}
	if cfg.IndexRepairInterval <= 0 {
		cfg.IndexRepairInterval = 10 * time.Minute
	}
	cfg.Session.Store, cfg.Session.Inbox = cfg.Store, cfg.Inbox
	cfg.Session.Holder, cfg.Session.Logger = cfg.Holder, cfg.Logger
	batches := direct.NewBatches(cfg.JetStream.Conn())
	s := &Service{cfg: cfg, log: cfg.Logger, agents: agents, suspend: make(chan struct{}),
		wakes: make(chan struct{}, cfg.Concurrency), runs: map[string]*liveRun{}, missing: map[string]string{},
		running: runningSet{ids: map[string]uint64{}}, feeds: feeds{m: map[string]*feed{}, batch: batches.Next, since: batches.Since}}
	if cfg.Records != nil {
		d, err := pending.New(pending.Config{Records: cfg.Records, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		s.records = d
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Start ensures the wake consumers and starts consuming them: from then on
// every conversation with something arrived for it is woken, those whose
// messages were stored while no replica ran included. It also starts
// reading the cancel markers and the status index (the runs whose holder
// died), and, with Config.Records, the approval timers (without
// Config.Expirer) or the guard of the scheduled timeouts (with it). A
// Service starts once.
func (s *Service) Start(ctx context.Context) error {
	if err := s.life.StartInit(); err != nil {
		return natsjs.ErrStarted
	}
	if err := s.start(ctx); err != nil {
		s.cancel()
		s.life.StartFailed()
		return err
	}
	return nil
}

func (s *Service) start(ctx context.Context) error {
	cons, err := natsjs.EnsureWakeConsumers(ctx, s.cfg.JetStream, s.cfg.Provision)
	if err != nil {
		return err
	}
	// The watches live as long as the service, not as Start's ctx.
	unwatchC, err := s.watchCancels(s.ctx)
	if err != nil {
		return err
	}
	unwatchR, err := s.cfg.Store.WatchStatuses(s.ctx, s.running.update)
	if err != nil {
		unwatchC()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unwatch = func() { unwatchC(); unwatchR() }
	for _, c := range cons {
		cc, err := c.Consume(s.onWake, jetstream.PullMaxMessages(2*s.cfg.Concurrency))
		if err != nil {
			for _, cc := range s.consume {
				cc.Stop()
			}
			s.consume = nil
			s.unwatch()
			s.unwatch = nil
			return fmt.Errorf("serve: consume the wake messages: %w", err)
		}
		s.consume = append(s.consume, cc)
	}
	s.cons = cons
	switch {
	case s.records != nil && s.cfg.Expirer == nil:
		s.wg.Add(1)
		go s.timersLoop()
	case s.records != nil:
		stop, err := s.guardSchedules(s.ctx)
		if err != nil {
			s.unwatch()
			return err
		}
		prev := s.unwatch
		s.unwatch = func() { prev(); stop() }
	}
	s.wg.Add(1)
	go s.lapsedLoop()
	if r, ok := s.cfg.Store.(indexRepairer); ok {
		s.wg.Add(1)
		go s.indexRepairLoop(r)
	}
	return nil
}

// Stop stops waking conversations, asks the live runs to suspend at
// their next safe point (their state saved, their leases released, so
// that another replica continues them), waits for them up to
// Config.SuspendTimeout or ctx's end, then cancels what is left; then it
// ends the event watches it serves (service.ErrClosed: their clients
// resume on another replica). It is idempotent; every caller waits for
// the stop and gets its error.
func (s *Service) Stop(ctx context.Context) error {
	return s.life.Stop(func() error { return s.stop(ctx) })
}

// Stopped is closed once the service has stopped.
func (s *Service) Stopped() <-chan struct{} { return s.life.Done() }

func (s *Service) stop(ctx context.Context) error {
	s.mu.Lock()
	consume := s.consume
	s.consume = nil
	live := len(s.runs)
	s.mu.Unlock()
	for _, cc := range consume {
		cc.Stop()
	}
	for _, cc := range consume {
		<-cc.Closed()
	}
	close(s.suspend)
	s.log.Info("closing: live runs asked to suspend", slog.Int("runs", live))
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	timer := time.NewTimer(s.cfg.SuspendTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-done:
	case <-timer.C:
		err = errors.New("serve: live runs did not suspend in time: cancelled")
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.cancel()
	<-done
	s.closeFeeds()
	s.mu.Lock()
	unwatch := s.unwatch
	s.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	return err
}

// CheckReady returns nil when the service consumes its wake messages and
// every wake consumer exists on the server (its info answered): one
// deleted, or a server that does not answer, is an error naming it.
func (s *Service) CheckReady(ctx context.Context) error {
	s.mu.Lock()
	ready, cons := s.life.Running() && len(s.consume) > 0, s.cons
	s.mu.Unlock()
	if !ready {
		return errors.New("serve: the wake consumers are not consumed")
	}
	for _, c := range cons {
		if _, err := c.Info(ctx); err != nil {
			info := c.CachedInfo()
			return fmt.Errorf("serve: wake consumer %s of stream %s: %w", info.Name, info.Stream, err)
		}
	}
	return nil
}

// Agent returns the agent of that name this replica serves.
func (s *Service) Agent(name string) (Agent, bool) {
	a, ok := s.agents[name]
	return a, ok
}

// enter registers a goroutine of the service (a wake or a run); false
// unless the service runs (once Stop has begun).
func (s *Service) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.life.Running() {
		return false
	}
	s.wg.Add(1)
	return true
}

// sessionConfig is the configuration of the sessions of the agent named
// agentName (its approvals' quorum); for wakes and continuations (!wait)
// a claim does not wait for another holder.
func (s *Service) sessionConfig(wait bool, agentName string) session.Config {
	sc := s.cfg.Session
	sc.Quorum = func(ctx context.Context, toolName string) int { return s.quorum(ctx, agentName, toolName) }
	sc.Expiry = func(ctx context.Context, toolName string) *session.ApprovalPolicy {
		return s.policy(ctx, agentName, toolName)
	}
	if sc.Announcer != nil && s.cfg.Expirer != nil {
		sc.Announcer = session.ExpiringAnnouncer{Announcer: sc.Announcer, Expirer: s.cfg.Expirer, Policy: s.livePolicy}
	}
	if !wait {
		sc.Store = quickClaim{Store: s.cfg.Store}
	}
	return sc
}

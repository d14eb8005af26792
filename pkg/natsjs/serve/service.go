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
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
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
}

// Config configures a [Service].
type Config struct {
	// JetStream reaches the streams. Required.
	JetStream jetstream.JetStream
	// Provision are the options the wake consumers are ensured with (its
	// Prefix the subjects' prefix).
	Provision natsjs.ProvisionOptions
	// Session is the configuration of every session the service opens
	// (Store required; Inbox, Announcer, Canceller, Attacher, Answers as
	// `agent resume` has them). Its Holder is replaced by Holder.
	Session session.Config
	// Agents are the agents this replica serves; at least one, names
	// unique.
	Agents []Agent
	// Holder names this replica in the leases. Defaults to "agent serve".
	Holder string
	// Logger receives the service's logs. Defaults to discarding them.
	Logger *slog.Logger
	// RetryDelay is how long a wake message waits before it is delivered
	// again while another process holds its conversation. Defaults to 1 s.
	RetryDelay time.Duration
	// MissingDelay is how long a wake message waits before it is
	// delivered again when this replica lacks the conversation's agent.
	// Defaults to 10 s.
	MissingDelay time.Duration
	// ClaimWait bounds a wake's attempt at the lease. Defaults to 500 ms.
	ClaimWait time.Duration
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
	// Timers, if set, are the pending records the service reads to write
	// the approvals' timeouts itself (the fallback of a server that
	// cannot schedule messages, SPEC §12; with Expirer unset): a call
	// expires only while a replica runs.
	Timers *convstore.Pending
	// TimerInterval is how often Timers are swept. Defaults to 1 s.
	TimerInterval time.Duration
	// SweepInterval is how often, jittered by up to half of it either
	// way, the replica continues the conversations whose status says
	// running while no process holds their lease (a replica was killed
	// mid-run; lapsed.go). Defaults to 5 s.
	SweepInterval time.Duration
	// Unfollow, if set, is called with a conversation's ID when its run on
	// this replica has ended, its state saved: the wiring stops reading
	// the conversation's results there (remote.Client.Unfollow, with
	// remote.ClientConfig.PerConversation), so that a replica receives
	// the results of the conversations it runs, not of every one.
	Unfollow func(conv string)
	// OnFinal, if set, is told how each run of this replica ended, once
	// its state is saved and its lease released (notifications, tests,
	// benchmarks).
	OnFinal func(Final)
}

// Service runs and wakes conversations: [Service.Open] starts it,
// [Service.Close] stops it.
type Service struct {
	cfg    Config
	log    *slog.Logger
	agents map[string]Agent

	ctx     context.Context // the runs' context, cancelled by Close
	cancel  context.CancelFunc
	suspend chan struct{} // closed by Close: live runs suspend
	wakes   chan struct{} // a slot per wake handled at once

	mu       sync.Mutex
	closed   bool
	consume  []jetstream.ConsumeContext
	cons     []jetstream.Consumer // the wake consumers consumed
	unwatch  func()               // stops reading the cancel markers
	running  runningSet           // the conversations whose status says running
	runs     map[string]*Run      // live, by conversation
	missing  map[string]string
	wg       sync.WaitGroup // wakes and runs
	stopOnce sync.Once
}

// New returns a Service over cfg; [Service.Open] starts it.
func New(cfg Config) (*Service, error) {
	if cfg.JetStream == nil || cfg.Session.Store == nil {
		return nil, errors.New("serve: JetStream and Session.Store are required")
	}
	if len(cfg.Agents) == 0 {
		return nil, errors.New("serve: no agent")
	}
	agents := map[string]Agent{}
	for _, a := range cfg.Agents {
		if a.Name == "" || a.Agent == nil {
			return nil, errors.New("serve: an agent needs a name and an agent")
		}
		if _, dup := agents[a.Name]; dup {
			return nil, fmt.Errorf("serve: agent %s given twice", a.Name)
		}
		agents[a.Name] = a
	}
	if cfg.Holder == "" {
		cfg.Holder = "agent serve"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = time.Second
	}
	if cfg.MissingDelay <= 0 {
		cfg.MissingDelay = 10 * time.Second
	}
	if cfg.ClaimWait <= 0 {
		cfg.ClaimWait = 500 * time.Millisecond
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
	cfg.Session.Holder = cfg.Holder
	cfg.Session.Logger = cfg.Logger
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{cfg: cfg, log: cfg.Logger, agents: agents, ctx: ctx, cancel: cancel, suspend: make(chan struct{}),
		wakes: make(chan struct{}, cfg.Concurrency), runs: map[string]*Run{}, missing: map[string]string{},
		running: runningSet{ids: map[string]uint64{}}}, nil
}

// Open ensures the wake consumers and starts consuming them: from then on
// every conversation with something arrived for it is woken, those whose
// messages were stored while no replica ran included.
func (s *Service) Open(ctx context.Context) error {
	cons, err := natsjs.EnsureWakeConsumers(ctx, s.cfg.JetStream, s.cfg.Provision)
	if err != nil {
		return err
	}
	unwatch, err := s.watchCancels(s.ctx) // the watch lives as long as the service, not as Open
	if err != nil {
		return err
	}
	unwatchR, err := s.watchRunning(s.ctx)
	if err != nil {
		unwatch()
		return err
	}
	if unwatchR != nil {
		prev := unwatch
		unwatch = func() { prev(); unwatchR() }
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		unwatch()
		return errors.New("serve: closed")
	}
	s.unwatch = unwatch
	for _, c := range cons {
		cc, err := c.Consume(s.onWake, jetstream.PullMaxMessages(2*s.cfg.Concurrency))
		if err != nil {
			for _, cc := range s.consume {
				cc.Stop()
			}
			s.consume = nil
			s.unwatch = nil
			unwatch()
			return fmt.Errorf("serve: consume the wake messages: %w", err)
		}
		s.consume = append(s.consume, cc)
	}
	s.cons = cons
	if s.cfg.Timers != nil {
		s.wg.Add(1)
		go s.timers()
	}
	if unwatchR != nil {
		s.wg.Add(1)
		go s.lapsedLoop()
	}
	return nil
}

// Close stops waking conversations, asks the live runs to suspend at
// their next safe point (their state saved, their leases released, so
// that another replica continues them), waits for them up to
// Config.SuspendTimeout or ctx's end, then cancels what is left. It is
// idempotent.
func (s *Service) Close(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		consume := s.consume
		s.consume = nil
		s.mu.Unlock()
		for _, cc := range consume {
			cc.Stop()
		}
		for _, cc := range consume {
			<-cc.Closed()
		}
		s.mu.Lock()
		live := len(s.runs)
		s.mu.Unlock()
		close(s.suspend)
		s.log.Info("closing: live runs asked to suspend", slog.Int("runs", live))
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		timer := time.NewTimer(s.cfg.SuspendTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			err = errors.New("serve: live runs did not suspend in time: cancelled")
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.cancel()
		<-done
		s.mu.Lock()
		unwatch := s.unwatch
		s.mu.Unlock()
		if unwatch != nil {
			unwatch()
		}
	})
	return err
}

// Ready reports whether the service consumes its wake messages.
func (s *Service) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && len(s.consume) > 0
}

// CheckReady returns nil when the service consumes its wake messages and
// every wake consumer exists on the server (its info answered): one
// deleted, or a server that does not answer, is an error naming it.
func (s *Service) CheckReady(ctx context.Context) error {
	s.mu.Lock()
	ready, cons := !s.closed && len(s.consume) > 0, s.cons
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
// once Close has begun.
func (s *Service) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// sessionConfig is the configuration of the sessions of the agent named
// agentName (its approvals' quorum); for wakes (!wait) a claim does not
// wait for another holder beyond ClaimWait.
func (s *Service) sessionConfig(wait bool, agentName string) session.Config {
	sc := s.cfg.Session
	sc.Quorum = func(ctx context.Context, toolName string) int { return s.quorum(ctx, agentName, toolName) }
	if sc.Announcer != nil && s.cfg.Expirer != nil {
		sc.Announcer = session.ExpiringAnnouncer{Announcer: sc.Announcer, Expirer: s.cfg.Expirer, Policy: s.livePolicy}
	}
	if !wait {
		sc.Store = quickClaim{Store: sc.Store, wait: s.cfg.ClaimWait}
	}
	return sc
}

// quickClaim is a store whose Claim gives up after wait: a held lease is
// a *conversation.ClaimedError at once rather than after LeaseTTL.
type quickClaim struct {
	conversation.Store
	wait time.Duration
}

// leaseClaimLoader is a store that claims and loads from a lease read
// before (convstore.Store).
type leaseClaimLoader interface {
	ClaimLoad(ctx context.Context, id, holder string, seen convstore.LeaseSeen) (conversation.Lease, *conversation.State, conversation.Revision, error)
}

// leaseClaim is the store of a wake that read the conversation's lease in
// its pre-check: its claim starts from what it saw, the state read
// meanwhile (session.ClaimLoader, by convstore.Store.ClaimLoad).
type leaseClaim struct {
	quickClaim
	cl   leaseClaimLoader
	seen convstore.LeaseSeen
}

// ClaimLoad implements session.ClaimLoader.
func (c leaseClaim) ClaimLoad(ctx context.Context, id, holder string) (conversation.Lease, *conversation.State, conversation.Revision, error) {
	return c.cl.ClaimLoad(ctx, id, holder, c.seen)
}

// tryClaimer is a store that claims without waiting (convstore.Store).
type tryClaimer interface {
	TryClaim(ctx context.Context, id, holder string) (conversation.Lease, error)
}

// Claim implements conversation.Store.
func (q quickClaim) Claim(ctx context.Context, id, holder string) (conversation.Lease, error) {
	if tc, ok := q.Store.(tryClaimer); ok {
		return tc.TryClaim(ctx, id, holder)
	}
	cctx, cancel := context.WithTimeout(ctx, q.wait)
	defer cancel()
	l, err := q.Store.Claim(cctx, id, holder)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, &conversation.ClaimedError{ID: id, Holder: "another process", Until: time.Now().Add(conversation.LeaseTTL)}
	}
	return l, err
}

// RecordStatus implements session.StatusRecorder by the wrapped store's,
// so that a wake's run records its status as any other.
func (q quickClaim) RecordStatus(ctx context.Context, id, agentName, status string) error {
	if rec, ok := q.Store.(session.StatusRecorder); ok {
		return rec.RecordStatus(ctx, id, agentName, status)
	}
	return nil
}

// RecordFailure implements session.FailureRecorder by the wrapped
// store's (its status alone when the store keeps no error).
func (q quickClaim) RecordFailure(ctx context.Context, id, agentName, errText string) error {
	if fr, ok := q.Store.(session.FailureRecorder); ok {
		return fr.RecordFailure(ctx, id, agentName, errText)
	}
	return q.RecordStatus(ctx, id, agentName, session.StatusFailed)
}

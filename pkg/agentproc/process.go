// Package agentproc is the wiring of an agent process: it builds, once,
// from options, the parts every agent process is made of — the remote
// client of the tools workers serve, the conversation store with its
// pending records and the key that authenticates decisions, the session
// configuration, the agent configuration of a spec, with their tracer
// and metrics — and, for `agent serve`, the service core, its notifier
// and its HTTP face over them. `agent run`, `resume`, `serve`, the
// people's commands, the benchmarks and the tests call it; nothing else
// builds these configurations, so that what one command records (spans,
// links, approval metrics) every command records (SPEC §14).
//
// It is the one package that imports every layer: the loop, the NATS
// adapter, the service core and its web face.
package agentproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/toolctl"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// Options configure [Open].
type Options struct {
	// Conn is the process's connection. Required.
	Conn *nats.Conn
	// Provision names the streams and buckets (its Prefix) and says how to
	// create those missing.
	Provision natsjs.ProvisionOptions
	// Logger receives the parts' logs. Defaults to discarding them.
	Logger *slog.Logger
	// TracerProvider records the spans of SPEC §14 (runs, model requests,
	// tool calls, tasks, approvals, decisions published); nil records
	// none.
	TracerProvider trace.TracerProvider
	// Metrics, if set, is the agent's metric set (the dispatcher's, the
	// model's, the runs', the inbox's refusals).
	Metrics *metrics.Agent
	// Approvals, if set, records every decision applied
	// (offload_approvals_total, offload_decision_seconds).
	Approvals *metrics.Approvals
	// Remote, if set, starts the remote client with these options: the
	// toolset of the tools workers advertise and the executor of their
	// background calls. Its Conn, Prefix, Replicas, MemoryStorage, Logger,
	// Metrics and TracerProvider are the process's.
	Remote *remote.ClientConfig
	// Conversations opens the conversation store (its inbox, announcer
	// and publisher).
	Conversations bool
	// Identities verifies the decisions read and authenticates the
	// approvals of calls that need a quorum (SPEC §12): TrustBy counts
	// every decision's by; the service's decision key is read from the
	// store into it by Open (see Key). Nil: none counts but those the
	// service signed.
	Identities *convstore.Identities
	// Key says how the service's decision key is read: KeyNone (the
	// people's commands sign nothing and read no key), KeyBestEffort
	// (agent run and resume: its public half, which verifies; without it
	// no decision is verified and a quorum counts only TrustBy, said in a
	// warning), KeyRequired (agent serve: the key pair, made once across
	// replicas, which signs its faces' decisions; the serve role alone
	// may read its private half).
	Key KeyMode
	// QuietDuplicates logs the inbox's refusals of duplicates at Info.
	QuietDuplicates bool
	// LeaseTTL is the store's lease (tests); zero: conversation.LeaseTTL.
	LeaseTTL time.Duration
}

// KeyMode says how [Open] reads the service's key.
type KeyMode int

// The key modes.
const (
	KeyNone KeyMode = iota
	KeyBestEffort
	KeyRequired
)

// Process is an agent process's parts on one connection. [Process.Close]
// stops them.
type Process struct {
	opts      Options
	log       *slog.Logger
	JetStream jetstream.JetStream
	// Client is the remote client (nil without Options.Remote).
	Client *remote.Client
	// Conversations is the conversation store (nil without
	// Options.Conversations).
	Conversations *convstore.Conversations
	// Identities authenticates and signs the approvals of a quorum.
	Identities *convstore.Identities
}

// Open opens the parts opts asks for: the remote client started, the
// conversation store opened, the service's key read. On an error,
// whatever was started is stopped.
func Open(ctx context.Context, opts Options) (*Process, error) {
	if opts.Conn == nil {
		return nil, fmt.Errorf("%w: agentproc: no connection", natsjs.ErrInvalidConfig)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(opts.Conn)
	if err != nil {
		return nil, err
	}
	ids := opts.Identities
	if ids == nil {
		ids = &convstore.Identities{}
	}
	p := &Process{opts: opts, log: opts.Logger, JetStream: js, Identities: ids}
	if err := p.open(ctx); err != nil {
		_ = p.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return p, nil
}

func (p *Process) open(ctx context.Context) error {
	o := p.opts
	if o.Remote != nil {
		cfg := *o.Remote
		cfg.Conn, cfg.Prefix, cfg.Replicas, cfg.MemoryStorage = o.Conn, o.Provision.Prefix, o.Provision.Replicas, o.Provision.MemoryStorage
		cfg.Logger, cfg.Metrics, cfg.TracerProvider = o.Logger, o.Metrics, o.TracerProvider
		client, err := remote.NewClient(cfg)
		if err != nil {
			return err
		}
		if err := client.Start(ctx); err != nil {
			return err // it names the part that failed
		}
		p.Client = client
	}
	if o.Conversations {
		convs, err := convstore.Open(ctx, convstore.OpenConfig{JetStream: p.JetStream, Provision: o.Provision, Metrics: o.Metrics,
			Logger: o.Logger, QuietDuplicates: o.QuietDuplicates, Identities: p.Identities, LeaseTTL: o.LeaseTTL})
		if err != nil {
			return err
		}
		p.Conversations = convs
	}
	switch o.Key {
	case KeyRequired:
		keys, err := convstore.EnsureServiceKeys(ctx, convstore.OpenConfig{JetStream: p.JetStream, Provision: o.Provision})
		if err != nil {
			return err
		}
		p.Identities.Private = keys.Decisions
	case KeyBestEffort:
		pub, err := convstore.ReadDecisionKey(ctx, o.Conn, o.Provision.Prefix)
		if errors.Is(err, convstore.ErrNoDecisionKey) {
			// No service made it: none signed anything to verify.
			p.log.Debug("no decision key: no decision is signed", slog.Any("error", err))
			break
		}
		if err != nil {
			p.log.Warn("the decisions' signatures cannot be verified: every decision is shown unverified, and the approvals of a quorum are counted only with --trust-nats-by",
				slog.Any("error", err))
			break
		}
		p.Identities.Public = pub
	}
	return nil
}

// Close stops the remote client and waits for the removals the
// conversation store's writes left under way (convstore.Store.Flush). The
// connection is the caller's.
func (p *Process) Close(ctx context.Context) error {
	var err error
	if p.Client != nil {
		err = p.Client.Stop(ctx)
	}
	if p.Conversations != nil {
		err = errors.Join(err, p.Conversations.Store.Flush(ctx))
	}
	return err
}

// Session is the configuration of the process's sessions (SPEC §5.5): the
// one place it is built, for `agent run`, `resume` and `serve` alike.
// holder names the process in the leases; approvals resolves the quorum
// of its calls (and, with a timeout and a server that can schedule
// messages, the announcer schedules the timeouts' decisions: see
// [Process.Announcer]).
func (p *Process) Session(holder string, announcer session.Announcer, approvals session.ApprovalPolicies) session.Config {
	cfg := session.Config{Store: p.Conversations.Store, Inbox: p.Conversations.Inbox, Announcer: announcer, Holder: holder,
		MaxPayload: int(p.opts.Conn.MaxPayload()), Logger: p.log, Connected: p.opts.Conn.IsConnected,
		TracerProvider: p.opts.TracerProvider, Approvals: p.opts.Approvals, Quorum: approvals.Quorum, Expiry: approvals.Expiry}
	if p.Client != nil {
		cfg.Canceller, cfg.Attacher, cfg.Answers = p.Client, p.Client, p.Client
	}
	return cfg
}

// ErrNoSchedules is wrapped by the warning of a server that cannot
// schedule messages (approval timeouts not written by the server).
var ErrNoSchedules = errors.New("the NATS server cannot schedule messages")

// Announcer is the announcer of a process's approvals (SPEC §12): the
// store's, which with each approval whose policy has a timeout also
// schedules the timeout's decision, written by the server at the timeout
// whether or not any agent runs then. On a server that cannot schedule
// messages it announces only, and returns an error wrapping
// ErrNoSchedules (the caller says so) when some policy sets a timeout.
func (p *Process) Announcer(ctx context.Context, approvals session.ApprovalPolicies) (session.Announcer, error) {
	a := p.Conversations.Announcer
	if err := a.CanExpire(ctx); err != nil {
		if approvals.AnyTimeout(ctx) {
			return a, fmt.Errorf("%w (%w): approval timeouts are not written", ErrNoSchedules, err)
		}
		return a, nil
	}
	return session.ExpiringAnnouncer{Announcer: a, Expirer: a, Policy: func(ctx context.Context, _, toolName string) *session.ApprovalPolicy {
		return approvals.Expiry(ctx, toolName)
	}}, nil
}

// OpenDesk opens the people's pending records on nc and the desk over
// them (`agent pending|approve|deny|answer`): the approvals live runs
// announced included, each read of them bounded by refusals (a role that
// may not read the approvals stream gets none at once, not after a
// timeout); a decision of a call that needs a quorum counts its by as
// the identity (the CLI has no key to sign it; the replicas count it only
// with --trust-nats-by). It needs only what the approver and answerer
// roles are granted; the calls held in the tools' queues (SPEC §19) are
// listed too when the role may read the tools' states (admin), else none.
func OpenDesk(ctx context.Context, nc *nats.Conn, prov natsjs.ProvisionOptions, refusals *natsjs.Refusals, log *slog.Logger, tp trace.TracerProvider) (*pending.Desk, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	recs, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: js, Provision: prov, Logger: log})
	if err != nil {
		return nil, err
	}
	recs.Identities = &convstore.Identities{TrustBy: true}
	tools, err := toolctl.New(toolctl.Config{Conn: nc, Provision: prov})
	if err != nil {
		return nil, err
	}
	return pending.New(pending.Config{Records: recs, Live: watchedLive{p: recs, r: refusals}, Queue: watchedQueue{c: tools, r: refusals, log: log},
		Logger: log, TracerProvider: tp})
}

// watchedQueue lists the calls held in the tools' queues, best effort: a
// read refused (a role that may not read the tools' states) or failing
// lists none, at once.
type watchedQueue struct {
	c   *toolctl.Control
	r   *natsjs.Refusals
	log *slog.Logger
}

func (w watchedQueue) Held(ctx context.Context) ([]pending.Queued, error) {
	ctx, stop := w.r.Watch(ctx)
	defer stop()
	held, err := w.c.Held(ctx)
	if err != nil {
		w.log.Debug("the calls held in the tools' queues are not listed", slog.Any("error", err))
		return nil, nil
	}
	return held, nil
}

// watchedLive reads the approvals live runs announced, each read ended at
// once by a permission refused.
type watchedLive struct {
	p *convstore.Pending
	r *natsjs.Refusals
}

func (w watchedLive) Conversations(ctx context.Context) []string {
	ctx, stop := w.r.Watch(ctx)
	defer stop()
	return w.p.Announcer.Conversations(ctx)
}

func (w watchedLive) Waiting(ctx context.Context, conv string, skip map[string]bool) []deferred.PendingTask {
	ctx, stop := w.r.Watch(ctx)
	defer stop()
	return w.p.LiveWaiting(ctx, conv, skip)
}

// SessionOptions say which conversation [Process.OpenSession] opens, for
// whom.
type SessionOptions struct {
	// ID is the stored conversation to open; empty: a new one, created
	// empty with a new ID.
	ID string
	// Holder names the process in the lease.
	Holder string
	// Approval is the approval policy of the tools whose metadata sets
	// none (the spec's: [SpecApproval]); nil: none.
	Approval *session.ApprovalPolicy
	// Tenant, if set, is the tenant of a new conversation, and the one a
	// stored conversation must have (session.Config.Tenant, SPEC §19).
	Tenant string
}

// OpenSession claims the conversation of o (a new one without an ID) and
// loads it: the session of `agent run` and `agent resume`. Its approvals'
// policies are the remote client's tools' (else o.Approval), their
// timeouts scheduled with their announcements; warn, when not nil, says
// that the server cannot schedule them (see [Process.Announcer]).
func (p *Process) OpenSession(ctx context.Context, o SessionOptions) (sess *session.Session, warn, err error) {
	approvals := session.ApprovalPolicies{Default: o.Approval, Logger: p.log}
	if p.Client != nil {
		approvals.Tools = p.Client.Toolset()
	}
	id, create := o.ID, o.ID == ""
	if create {
		id = protocol.NewID()
	}
	announcer, warn := p.Announcer(ctx, approvals)
	cfg := p.Session(o.Holder, announcer, approvals)
	cfg.Tenant = o.Tenant
	sess, err = session.Open(ctx, cfg, id, create)
	return sess, warn, err
}

// SpecApproval is the approval policy of spec s (its approval key), for
// the tools whose metadata sets none; nil when s sets none.
func SpecApproval(s *agentspec.Spec) (*session.ApprovalPolicy, error) {
	if s == nil || s.Approval == nil {
		return nil, nil
	}
	return session.ParseApprovalPolicy(s.Approval.Map())
}

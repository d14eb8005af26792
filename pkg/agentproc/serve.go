package agentproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/a2aface"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/agui"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/mcpface"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/facestore"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/notify"
	"github.com/offload-dev/offload/pkg/natsjs/toolctl"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
	"github.com/offload-dev/offload/pkg/web"
)

// ServeAgent is the agent of spec s in `agent serve` (its name, digest
// and approval policy; its tools those of the process's remote client
// that s names), its approvals left to pause the run. stream streams the
// model's responses; limits are the spec's. An error is the spec's: it
// cannot be applied.
func (p *Process) ServeAgent(s *agentspec.Spec, model llm.Model, stream bool) (serve.Agent, error) {
	tools := tool.Only(p.Client.Toolset(), s.ToolNames()...)
	cfg, err := AgentConfig(p.Agent(AgentOptions{Spec: s, Model: model, Toolset: tools, Stream: stream, Limits: SpecLimits(s)}))
	if err != nil {
		return serve.Agent{}, fmt.Errorf("spec %s: %w", s.Name, err)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return serve.Agent{}, fmt.Errorf("spec %s: %w", s.Name, err)
	}
	sa := serve.Agent{Name: s.Name, Digest: s.Digest, Description: s.Summary(), Agent: a, Tools: tools, NonBlocking: s.Approve == "background", Tenant: s.Tenant}
	if sa.Approval, err = SpecApproval(s); err != nil {
		return serve.Agent{}, fmt.Errorf("spec %s: %w", s.Name, err)
	}
	return sa, nil
}

// ServeOptions configure [Process.Serve].
type ServeOptions struct {
	// Agents are the agents served (see [Process.ServeAgent]).
	Agents []serve.Agent
	// Holder names the replica in the leases.
	Holder string
	// Tokens are the HTTP face's bearer tokens. Required.
	Tokens web.Tokens
	// Registry, if set, gets the replica's metrics and is served on GET
	// /metrics.
	Registry *prometheus.Registry
	// Receivers, if any, are sent a notification for each approval
	// requested and resolved (--notify), with links under PublicURL, the
	// base URL people reach the service at (web.PublicURL): the signed
	// links made in the inbox start with it too.
	Receivers []notify.Receiver
	PublicURL string
	// Limits bound what the HTTP face's clients may hold (web.Limits;
	// zero fields: the defaults).
	Limits web.Limits
	// MCP serves the MCP face at /mcp (agent serve --mcp, SPEC §17).
	MCP bool
	// MCPTools are the registry's tools served besides the agents, each
	// as an agent of its own (ToolAgents; ["all"]: every one the registry
	// holds at the start): on the MCP face with MCP (agent serve
	// --mcp-tools).
	MCPTools []string
	// A2A serves the agents over A2A too (FaceOptions.A2A), with push
	// notifications (FaceOptions.A2APush) whose URLs may reach the
	// networks of A2APushAllow although they are not public.
	A2A          bool
	A2APushAllow PushAllow
	// Service, if set, adjusts the service's configuration before it is
	// built (tests and benchmarks: delays, callbacks).
	Service func(*serve.Config)
}

// Served is a started `agent serve` replica: its core, its notifier and
// its HTTP face. [Served.Stop] stops it.
//
// The replica is two connections to the server. The process's carries
// the runs: their tasks and results, leases, saves, wakes and status.
// Faces, its own, carries what the faces subscribe to for their viewers:
// the inbox's live updates (the pending records' changes, every decision
// and answer published), the conversations' event watches, the
// notifier's reads, and the decisions the face publishes. The server cuts
// a connection whose client reads too slowly for what it is sent (a slow
// consumer: many viewers, large messages); cut, Faces costs the viewers
// a reconnection, never a run its results.
type Served struct {
	// Service is the core.
	Service *serve.Service
	// Faces is the faces' connection, named like the process's with
	// " faces" (agent serve: "agent faces"); closed by [Served.Stop].
	Faces *nats.Conn
	faces jetstream.JetStream
	// agents are the agents served.
	agents []serve.Agent
	// Desk is the pending desk of its face.
	Desk *pending.Desk
	// Notifier sends the notifications (nil without receivers).
	Notifier *notify.Notifier
	// Handler is the HTTP face: the API, the inbox, the links' pages.
	Handler http.Handler
	// Timers, when not nil, says why the approvals' timeouts fall back to
	// the replicas' own timers (a server that cannot schedule messages):
	// a call then expires only while a replica runs.
	Timers error
	// Metrics are the replica's (offload_wake_seconds, the HTTP
	// requests).
	Metrics *metrics.Serve
	face    *Face // stopped by Stop
}

// Service builds and starts the core of an `agent serve` replica on p
// (which needs the conversations): the service over the store and the
// inbox, its sessions configured by [Process.Session], the approvals'
// timeouts scheduled by the server or, on a server that cannot schedule
// messages, written by the replicas' timers (Served.Timers says why).
// It dials the faces' connection (Served.Faces), which the core's event
// watches use. Its metrics go to o.Registry. [Served.Stop] stops it.
func (p *Process) Service(ctx context.Context, o ServeOptions) (*Served, error) {
	if p.Conversations == nil {
		return nil, errors.New("agentproc: a service needs the conversations")
	}
	if len(o.MCPTools) > 0 {
		tools, err := p.ToolAgents(ctx, o.MCPTools)
		if err != nil {
			return nil, err
		}
		o.Agents = append(slices.Clip(o.Agents), tools...)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	recs, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: p.JetStream, Provision: p.opts.Provision})
	if err != nil {
		return nil, err
	}
	recs.Identities = p.Identities
	out := &Served{Metrics: metrics.NewServe(o.Registry), agents: o.Agents}
	if out.Faces, err = dialLike(p.opts.Conn, " faces"); err != nil {
		return nil, fmt.Errorf("agentproc: the faces' connection: %w", err)
	}
	if out.faces, err = jetstream.New(out.Faces); err != nil {
		out.Faces.Close()
		return nil, err
	}
	var expirer session.Expirer = p.Conversations.Announcer
	if err := p.Conversations.Announcer.CanExpire(ctx); err != nil {
		expirer, out.Timers = nil, fmt.Errorf("%w (%w)", ErrNoSchedules, err)
	}
	cfg := serve.Config{JetStream: p.JetStream, Watches: out.faces, Provision: p.opts.Provision, Store: p.Conversations.Store, Inbox: p.Conversations.Inbox,
		Session: p.Session(o.Holder, p.Conversations.Announcer, session.ApprovalPolicies{}), Agents: o.Agents, Holder: o.Holder,
		Logger: p.log, Metrics: out.Metrics, Expirer: expirer, Records: recs}
	if p.Client != nil {
		cfg.Unfollow = p.Client.Unfollow
	}
	if o.Service != nil {
		o.Service(&cfg)
	}
	svc, err := serve.New(cfg)
	if err != nil {
		out.Faces.Close()
		return nil, err
	}
	if err := svc.Start(ctx); err != nil {
		out.Faces.Close()
		return nil, err
	}
	out.Service = svc
	if err := o.Registry.Register(svc.ConversationsCollector()); err != nil {
		_ = out.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return out, nil
}

// Serve builds and starts an `agent serve` replica on p: the core
// ([Process.Service]), its HTTP face ([Process.Face]) and the notifier of
// o.Receivers (on the faces' connection), each metric registered in
// o.Registry (served on GET /metrics).
func (p *Process) Serve(ctx context.Context, o ServeOptions) (*Served, error) {
	if len(o.MCPTools) > 0 && !o.MCP {
		return nil, errors.New("agentproc: the fleet's tools (--mcp-tools) are served on the MCP face (--mcp)")
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	out, err := p.Service(ctx, o)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Served, error) {
		_ = out.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	face, err := p.Face(ctx, out, FaceOptions{Tokens: o.Tokens, Registry: o.Registry, Metrics: out.Metrics, PublicURL: o.PublicURL,
		Limits: o.Limits, MCP: o.MCP, A2A: o.A2A, A2APush: &a2aface.PushOptions{Allow: o.A2APushAllow, Holder: o.Holder}})
	if err != nil {
		return fail(err)
	}
	out.Desk, out.Handler, out.face = face.Desk, face.Handler, face
	if err := o.Registry.Register(pending.NewCollector(out.Desk)); err != nil {
		return fail(err)
	}
	if err := o.Registry.Register(toolctl.NewDeadLetters(face.Tools)); err != nil {
		return fail(err)
	}
	if len(o.Receivers) > 0 {
		n, err := notify.New(notify.Config{JetStream: out.faces, Provision: p.opts.Provision, Receivers: o.Receivers, PublicURL: o.PublicURL,
			Store: p.Conversations.Store, Links: face.Links, Expiry: out.Service.ApprovalTimeout, Logger: p.log, Metrics: metrics.NewNotify(o.Registry)})
		if err == nil {
			err = n.Start(ctx)
		}
		if err != nil {
			return fail(err)
		}
		out.Notifier = n
	}
	return out, nil
}

// PushAllow are the networks A2A push URLs may reach although they are
// not public (agent serve --a2a-push-allow CIDR, repeatable): a
// flag.Value.
type PushAllow []netip.Prefix

// String implements flag.Value.
func (p *PushAllow) String() string {
	if p == nil {
		return ""
	}
	out := make([]string, len(*p))
	for i, n := range *p {
		out[i] = n.String()
	}
	return strings.Join(out, ",")
}

// Type names the flag's values (pflag.Value).
func (p *PushAllow) Type() string { return "CIDR" }

// Set implements flag.Value: one CIDR more.
func (p *PushAllow) Set(v string) error {
	n, err := netip.ParsePrefix(v)
	if err != nil {
		return fmt.Errorf("not a CIDR: %w", err)
	}
	*p = append(*p, n.Masked())
	return nil
}

// FaceOptions configure [Process.Face].
type FaceOptions struct {
	// Tokens are the bearer tokens accepted. Required.
	Tokens web.Tokens
	// Registry, if set, is served on GET /metrics.
	Registry *prometheus.Registry
	// Metrics, if set, counts the requests.
	Metrics *metrics.Serve
	// Identities, if set, replace the process's for the decisions the
	// face publishes (tests of unsigned approvals).
	Identities *convstore.Identities
	// PublicURL is the base URL people reach the service at: the signed
	// links start with it (web.Config.PublicURL).
	PublicURL string
	// Limits bound what the clients may hold (web.Limits).
	Limits web.Limits
	// MCP serves the MCP face at /mcp (agent serve --mcp, SPEC §17).
	MCP bool
	// A2A serves the agents over A2A (SPEC §17, package a2aface: its
	// tasks' records in the service's bucket).
	A2A bool
	// A2APush, if set with A2A, serves A2A push notification configs and
	// sends their notifications from this replica too (a2aface.PushOptions).
	A2APush *a2aface.PushOptions
}

// Face is the HTTP face of a replica and what it decides with.
type Face struct {
	// Desk publishes the decisions and answers given over the face.
	Desk *pending.Desk
	// Links keeps the signed links' key and uses.
	Links *convstore.Links
	// Handler is the API, the inbox and the links' pages (package web).
	Handler http.Handler
	// Tools are the operator's hands on the fleet's tools (/v1/tools).
	Tools *toolctl.Control

	stop   context.CancelFunc // of the A2A pushes' sweep
	pushed chan struct{}      // closed once it returned
}

// Stop stops what the face runs by itself (the A2A pushes' sweep: the
// notifications it was sending are sent by another replica) and waits
// for it. It is idempotent.
func (f *Face) Stop() {
	if f.stop != nil {
		f.stop()
		<-f.pushed
	}
}

// Face builds the HTTP face of replica srv on p, on its faces'
// connection: the pending desk over the people's records (the decisions
// it publishes signed with the service's key, their edited arguments
// checked against the agents' tools, each publish traced), and web's
// handler over srv's core with the inbox, signed links, the operator's
// hands on the fleet's tools (toolctl, /v1/tools) and the AG-UI face
// (agui, its threads mapped in the service's bucket).
func (p *Process) Face(ctx context.Context, srv *Served, o FaceOptions) (*Face, error) {
	svc := srv.Service
	recs, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: srv.faces, Provision: p.opts.Provision})
	if err != nil {
		return nil, err
	}
	recs.Identities = cmp.Or(o.Identities, p.Identities)
	links, err := convstore.OpenLinks(ctx, convstore.OpenConfig{JetStream: srv.faces, Provision: p.opts.Provision})
	if err != nil {
		return nil, err
	}
	tools, err := toolctl.New(toolctl.Config{Conn: srv.Faces, Provision: p.opts.Provision})
	if err != nil {
		return nil, err
	}
	desk, err := pending.New(pending.Config{Records: recs, Tools: svc.Tool, Timeouts: svc.ApprovalTimeout, Queue: tools,
		TracerProvider: p.opts.TracerProvider, Logger: p.log})
	if err != nil {
		return nil, err
	}
	f := &Face{Desk: desk, Links: links, Tools: tools}
	threads, err := facestore.OpenThreads(ctx, facestore.Config{JetStream: srv.faces, Provision: p.opts.Provision})
	if err != nil {
		return nil, err
	}
	ag, err := agui.New(agui.Config{Core: svc, Desk: desk, Threads: threads, Tools: svc.Tool, Logger: p.log})
	if err != nil {
		return nil, err
	}
	cfg := web.Config{Core: svc, Desk: desk, Tokens: o.Tokens, Inbox: true, Links: links, PublicURL: o.PublicURL, Logger: p.log, Metrics: o.Metrics,
		Limits: o.Limits, Tools: tools, AGUI: ag}
	if o.MCP {
		if cfg.MCP, err = p.mcpFace(ctx, srv, desk, o.Limits); err != nil {
			return nil, err
		}
	}
	if o.A2A {
		if cfg.A2A, err = p.a2aFace(ctx, srv, desk, threads, o.A2APush); err != nil {
			return nil, err
		}
		if o.A2APush != nil {
			var pctx context.Context
			pctx, f.stop = context.WithCancel(context.WithoutCancel(ctx))
			f.pushed = make(chan struct{})
			go func() {
				defer close(f.pushed)
				cfg.A2A.RunPushes(pctx)
			}()
		}
	}
	if o.Registry != nil {
		cfg.Gatherer = o.Registry
	}
	f.Handler = web.Handler(cfg)
	return f, nil
}

// mcpFace is the MCP face of srv (mcpface: its agents as tools, its tasks
// kept in the service's bucket).
func (p *Process) mcpFace(ctx context.Context, srv *Served, desk *pending.Desk, lim web.Limits) (*mcpface.Face, error) {
	tasks, err := facestore.OpenMCPTasks(ctx, facestore.Config{JetStream: srv.faces, Provision: p.opts.Provision})
	if err != nil {
		return nil, err
	}
	var agents []mcpface.Agent
	for _, a := range srv.Service.Agents() {
		agents = append(agents, mcpface.Agent{Name: a.Name, Description: a.Description, Input: a.Input})
	}
	return mcpface.New(mcpface.Config{Core: srv.Service, Desk: desk, Tasks: tasks, Agents: agents, Tools: srv.Service.Tool,
		Heartbeat: cmp.Or(lim.Heartbeat, web.DefaultLimits().Heartbeat), Logger: p.log})
}

// a2aFace builds the A2A face of replica srv: its agents, its tasks'
// records in the service's bucket, AG-UI's thread mapping for the
// contexts that are not conversation IDs.
func (p *Process) a2aFace(ctx context.Context, srv *Served, desk *pending.Desk, threads *facestore.Threads, push *a2aface.PushOptions) (*a2aface.Face, error) {
	tasks, err := facestore.OpenA2ATasks(ctx, facestore.Config{JetStream: srv.faces, Provision: p.opts.Provision})
	if err != nil {
		return nil, err
	}
	agents := make([]a2aface.Agent, 0, len(srv.agents))
	for _, a := range srv.agents {
		agents = append(agents, a2aface.Agent{Name: a.Name, Description: a.Description})
	}
	return a2aface.New(a2aface.Config{Core: srv.Service, Desk: desk, Tasks: tasks, Threads: threads, Agents: agents, Push: push, Logger: p.log})
}

// Stop stops the notifier, then the core (its live runs suspend, within
// ctx, and are handed over to another replica), then closes the faces'
// connection (what the face still watches ends).
func (s *Served) Stop(ctx context.Context) error {
	var errs []error
	if s.face != nil {
		s.face.Stop()
	}
	if s.Notifier != nil {
		errs = append(errs, s.Notifier.Stop())
	}
	if s.Service != nil {
		errs = append(errs, s.Service.Stop(ctx))
	}
	if s.Faces != nil {
		s.Faces.Close()
	}
	return errors.Join(errs...)
}

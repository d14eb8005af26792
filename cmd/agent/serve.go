package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/agentmetrics"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/llm/modelref"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// serveFlags are the flags of `agent serve` (SPEC §11).
type serveFlags struct {
	run                   runFlags
	specs                 []string
	specDir, addr, tokens string
	notify                []string
	publicURL             string
	sweep                 time.Duration
}

func newServeCmd(e env) *cobra.Command {
	sf := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve --spec FILE... [flags]",
		Short: "Serve agents over HTTP and continue their conversations when what they wait for arrives, on any replica",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), e, sf) },
	}
	registerStoreFlags(cmd, &sf.run, e)
	fl := cmd.Flags()
	fl.StringArrayVar(&sf.specs, "spec", nil, "YAML file of an agent, with its name (repeatable)")
	fl.StringVar(&sf.specDir, "specs", "", "directory of agent specs: every *.yaml")
	fl.StringVar(&sf.addr, "http", "127.0.0.1:8080", "address of the HTTP API")
	fl.StringVar(&sf.tokens, "tokens", "", "file of bearer tokens, lines TOKEN ROLE NAME (default: an admin token generated into --store)")
	fl.StringArrayVar(&sf.notify, "notify", nil, "POST a JSON notification with signed approve/deny links to URL for each approval requested and resolved; slack:URL for a Slack incoming webhook (repeatable)")
	fl.StringVar(&sf.publicURL, "public-url", "", "base URL people reach the service at, for the notifications' links (default http://ADDR of --http)")
	fl.BoolVar(&sf.run.trustNATSBy, "trust-nats-by", false, "count every decision's by as its approver's identity for a quorum (approval.required): only when whoever may publish decisions is trusted to name themselves")
	fl.StringVar(&sf.run.model, "model", "", "model of the specs that name none (default as agent run's)")
	fl.DurationVar(&sf.run.callTimeout, "call-timeout", remote.DefaultInlineDeadline, "deadline of an inline remote call")
	fl.StringVar(&sf.run.root, "root", ".", "directory the built-in file and shell tools work in (embedded default)")
	fl.DurationVar(&sf.sweep, "sweep-interval", 5*time.Second, "how often, jittered, a replica continues the conversations left running by a replica that died (also just after a lease it saw held lapses)")
	sf.run.mf.register(fl)
	return cmd
}

// runServe wires the service (SPEC §11): the specs' agents on one remote
// client, the conversation store, the wake consumers and the HTTP API,
// until SIGTERM or SIGINT, when live runs are handed over (exit 0).
func runServe(ctx context.Context, e env, sf *serveFlags) error {
	f := &sf.run
	log := newLogger(e.stderr, f.verbose)
	f.mf.logger = log
	specs, err := agentspec.LoadNamed(sf.specs, sf.specDir)
	if err != nil {
		return usageErr("%v", err)
	}
	if sf.sweep <= 0 {
		return usageErr("--sweep-interval: %s: want a positive duration", sf.sweep)
	}
	if err := serve.CheckAddr(sf.addr, sf.tokens != ""); err != nil {
		return usageErr("--http: %v", err)
	}
	receivers, err := parseReceivers(sf.notify)
	if err != nil {
		return err
	}
	if err := checkPublicURL(sf.publicURL); err != nil {
		return err
	}
	tokens, generated, err := serve.LoadTokens(sf.tokens, f.store)
	if err != nil {
		return usageErr("--tokens: %v", err)
	}
	// The shared client offers the tools of every spec, each agent only
	// its own.
	f.agentSpec, f.tools = agentspec.Union(specs)
	reg := prometheus.NewRegistry()
	// offload_pending_calls is the store's (convstore.PendingCollector,
	// {kind}, registered once the pending records are open), not this
	// process's dispatches ({mode}, agent run's): SPEC §7.
	am, sm := metrics.NewAgentWith(reg, metrics.AgentOptions{StoreWidePending: true}), metrics.NewServe(reg)
	f.perConversation = true // a replica reads the results of the conversations it runs only
	// The approvals of a quorum count when the service signed them (its
	// key, read below before anything is read or published) or with
	// --trust-nats-by (SPEC §12).
	f.identities = &convstore.Identities{TrustBy: f.trustNATSBy}
	rem, err := remoteTools(ctx, e, f, log, am)
	if err != nil {
		return err
	}
	defer rem.close()
	convs, err := openConversations(ctx, rem.nc, f, am, log)
	if err != nil {
		return err
	}
	js, _ := jetstream.New(rem.nc) // fails only for invalid options
	prov := f.conn.ProvisionOptions(f.prefix)
	pending, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: js, Provision: prov})
	if err != nil {
		return err
	}
	reg.MustRegister(convstore.NewPendingCollector(pending))
	pending.Identities = f.identities
	links, err := convstore.OpenLinks(ctx, convstore.OpenConfig{JetStream: js, Provision: prov})
	if err != nil {
		return err
	}
	if f.identities.Key, err = links.Key(ctx); err != nil {
		return err
	}
	var agents []serve.Agent
	for _, s := range specs {
		a, err := serveAgent(e, f, s, rem, am)
		if err != nil {
			return err
		}
		sa := serve.Agent{Name: s.Name, Digest: s.Digest, Agent: a, Tools: tool.Only(rem.client.Toolset(), s.ToolNames()...),
			NonBlocking: s.Approve == "background"}
		if s.Approval != nil {
			if sa.Approval, err = session.ParseApprovalPolicy(s.Approval.Map()); err != nil {
				return usageErr("spec %s: %v", s.Name, err)
			}
		}
		agents = append(agents, sa)
	}
	// Approval timeouts are scheduled messages (SPEC §12); on a server
	// that cannot schedule, the replicas' own timers write them, which
	// only a running replica does: said here.
	var expirer session.Expirer = convs.Announcer
	var timers *convstore.Pending
	if err := convs.Announcer.CanExpire(ctx); err != nil {
		expirer, timers = nil, pending
		log.Warn("approval timeouts fall back to agent serve's timers: a call expires only while a replica runs", slog.Any("error", err))
		fmt.Fprintf(e.stderr, "agent serve: the NATS server cannot schedule messages (%v): approval timeouts fall back to agent serve's timers, and expire only while a replica runs\n", err)
	}
	host, _ := os.Hostname()
	svc, err := serve.New(serve.Config{JetStream: js, Provision: prov, Agents: agents, Logger: log, Metrics: sm, Expirer: expirer, Timers: timers, SweepInterval: sf.sweep,
		Holder: fmt.Sprintf("agent serve %s pid %d", host, os.Getpid()), Unfollow: rem.client.Unfollow,
		Session: session.Config{Store: convs.Store, Inbox: convs.Inbox, Announcer: convs.Announcer, Canceller: rem.client,
			Attacher: rem.client, Answers: rem.client, MaxPayload: int(rem.nc.MaxPayload()), Connected: rem.nc.IsConnected}})
	if err != nil {
		return err
	}
	if err := svc.Open(ctx); err != nil {
		return err
	}
	reg.MustRegister(svc.ConversationsCollector())
	if len(receivers) > 0 {
		n, err := serve.NewNotifier(serve.NotifyConfig{JetStream: js, Provision: prov, Receivers: receivers, PublicURL: publicURL(sf),
			Store: convs.Store, Links: links, Expiry: svc.ApprovalTimeout, Logger: log, Metrics: metrics.NewNotify(reg)})
		if err != nil {
			return err
		}
		if err := n.Open(ctx); err != nil {
			return err
		}
		defer n.Close()
	}
	h := serve.Handler(serve.HandlerConfig{Service: svc, Tokens: tokens, Publisher: serve.PendingPublisher{Pending: pending}, Pending: pending, Logger: log,
		Metrics: sm, Gatherer: reg, Inbox: pending, Links: links})
	err = serve.ListenAndServe(ctx, e.suspend, sf.addr, h, svc, 30*time.Second, func(a net.Addr) {
		fmt.Fprintf(e.stderr, "agent serve: http://%s (agents: %s)\n", a, strings.Join(agentspec.Names(specs), ", "))
		fmt.Fprintf(e.stderr, "agent serve: inbox http://%s/ (log in with a token)\n", a)
		if generated != "" {
			fmt.Fprintf(e.stderr, "agent serve: admin token (kept in %s): Authorization: Bearer %s\n", filepath.Join(f.store, serve.AdminTokenFile), generated)
		}
	})
	fmt.Fprintln(e.stderr, "agent serve: stopped")
	return err
}

// serveAgent builds the agent of spec s: its model, its tools out of the
// shared client's, its approvals left to pause the run.
func serveAgent(e env, f *runFlags, s *agentspec.Spec, rem *conn, am *metrics.Agent) (*agent.Agent, error) {
	af := *f
	af.agentSpec, af.model = s, cmp.Or(s.Model, f.model, modelref.Default(e.getenv))
	model, err := newModel(&af, e.getenv, nil)
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", s.Name, err)
	}
	cfg := agent.Config{Model: agentmetrics.Model(model, am), Toolsets: []tool.Toolset{tool.Only(rem.client.Toolset(), s.ToolNames()...)},
		Instructions: "You are a helpful assistant. Use the tools when they help.", AllowDeferred: true, Stream: f.mf.stream,
		Settings: s.Settings(), Logger: f.mf.logger, Capabilities: []agent.Capability{agentmetrics.Runs(am)}}
	if l := s.Limits; l != nil && l.Requests != nil {
		cfg.Limits.Requests = agent.Limit(*l.Requests)
	}
	if l := s.Limits; l != nil && l.ToolCalls != nil {
		cfg.Limits.ToolCalls = agent.Limit(*l.ToolCalls)
	}
	if err := s.Configure(&cfg, background.Config{Executor: rem.client.Executor(), Logger: f.mf.logger}); err != nil {
		return nil, usageErr("spec %s: %v", s.Name, err)
	}
	return agent.New(cfg)
}

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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/llm/modelref"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/notify"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/web"
)

// serveFlags are the flags of `agent serve` (SPEC §11).
type serveFlags struct {
	run                   runFlags
	specs                 []string
	specDir, addr, tokens string
	notify                []string
	publicURL             string
	sweep                 time.Duration
	limits                web.Limits
	mcp                   bool
	mcpTools              []string
	a2a                   bool
	pushAllow             agentproc.PushAllow
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
	fl.BoolVar(&sf.a2a, "a2a", false, "serve the agents over A2A 1.0 too: POST /a2a/AGENT (JSON-RPC), cards at /a2a/AGENT/.well-known/agent-card.json")
	fl.Var(&sf.pushAllow, "a2a-push-allow", "a `CIDR` A2A push URLs may reach although not public (loopback, private, link-local), repeatable")
	fl.StringVar(&sf.publicURL, "public-url", "", "base URL people reach the service at, for the links of the notifications and the inbox (default http://ADDR of --http)")
	fl.IntVar(&sf.limits.MaxConnections, "max-connections", web.DefaultLimits().MaxConnections, "open HTTP connections at most; more wait in the listen backlog")
	fl.IntVar(&sf.limits.MaxStreams, "max-streams", web.DefaultLimits().MaxStreams, "open event streams (Server-Sent Events) of the replica at most; 429 beyond")
	fl.IntVar(&sf.limits.MaxStreamsPerToken, "max-streams-per-token", web.DefaultLimits().MaxStreamsPerToken, "open event streams of one token at most; 429 beyond")
	fl.Float64Var(&sf.limits.TokenRate, "token-rate", web.DefaultLimits().TokenRate, "requests a second one token may make on average (bursts of 4 times as many); 429 beyond")
	fl.IPNetSliceVar(&sf.limits.TrustedProxies, "trusted-proxy", nil, "network (CIDR) of a proxy in front of the HTTP face, whose X-Forwarded-For names the client for the login lockouts (repeatable)")
	fl.BoolVar(&sf.run.trustNATSBy, "trust-nats-by", false, "count every decision's by as its approver's identity for a quorum (approval.required): only when whoever may publish decisions is trusted to name themselves")
	fl.BoolVar(&sf.mcp, "mcp", false, "serve the agents as MCP tools at /mcp (streamable HTTP, the tokens' roles; calls as durable tasks any replica answers)")
	fl.StringSliceVar(&sf.mcpTools, "mcp-tools", nil, "with --mcp: also serve the registry's tools named (a,b) or all of them as MCP tools, each call dispatched to the workers under the tool's policy")
	fl.StringVar(&sf.run.model, "model", "", "model of the specs that name none (default as agent run's)")
	fl.StringVar(&sf.run.tenant, "tenant", "", "tenant of the conversations of the specs that name none, started without one (a request's or a bound token's wins)")
	fl.DurationVar(&sf.run.callTimeout, "call-timeout", remote.DefaultInlineDeadline, "deadline of an inline remote call")
	fl.StringVar(&sf.run.root, "root", ".", "directory the built-in file and shell tools work in (embedded default)")
	fl.StringVar(&sf.run.toolUser, "tool-user", proc.DefaultToolUser, "when serve runs as root: the user (name or ID) the embedded default's shell commands run as, every privilege dropped (root or empty: as root)")
	fl.DurationVar(&sf.sweep, "sweep-interval", 5*time.Second, "how often, jittered, a replica continues the conversations left running by a replica that died (also just after a lease it saw held lapses)")
	sf.run.mf.register(fl)
	return cmd
}

// runServe wires the service (SPEC §11, agentproc.Process.Serve): the
// specs' agents on one remote client, the conversation store, the wake
// consumers and the HTTP face, until SIGTERM or SIGINT, when live runs
// are handed over (exit 0).
func runServe(ctx context.Context, e env, sf *serveFlags) error {
	f := &sf.run
	log := newLogger(e.stderr, f.verbose)
	f.mf.logger = log
	specs, err := agentspec.LoadNamed(sf.specs, sf.specDir)
	if err != nil {
		return usageErr("%v", err)
	}
	if err := protocol.ValidateTenant(f.tenant); err != nil {
		return usageErr("--tenant: %v", err)
	}
	if sf.sweep <= 0 {
		return usageErr("--sweep-interval: %s: want a positive duration", sf.sweep)
	}
	if err := web.CheckAddr(sf.addr, sf.tokens != ""); err != nil {
		return usageErr("--http: %v", err)
	}
	receivers, err := notify.ParseReceivers(sf.notify)
	if err != nil {
		return usageErr("--notify %v", err)
	}
	public, err := web.PublicURL(sf.publicURL, sf.addr)
	if err != nil {
		return usageErr("--public-url %v", err)
	}
	tokens, generated, err := web.LoadTokens(sf.tokens, f.store)
	if err != nil {
		return usageErr("--tokens: %v", err)
	}
	// The shared client offers the tools of every spec, each agent only
	// its own.
	f.agentSpec, f.tools = agentspec.Union(specs)
	f.toolsFrom = "the tools of the specs"
	reg := prometheus.NewRegistry()
	// offload_pending_calls is the store's (pending.Collector, {kind},
	// registered by Serve), not this process's dispatches ({mode}, agent
	// run's): SPEC §7.
	am := metrics.NewAgentWith(reg, metrics.AgentOptions{StoreWidePending: true})
	// A replica reads the results of the conversations it runs only; the
	// approvals of a quorum count when the service signed them (its key,
	// which the serve role alone reads) or with --trust-nats-by (SPEC §12).
	f.role = "serve"
	rem, err := openAgent(ctx, e, f, log, procOptions{conversations: true, key: agentproc.KeyRequired, perConversation: true,
		metrics: am, approvals: metrics.NewApprovals(reg)})
	if err != nil {
		return err
	}
	defer rem.close()
	var agents []serve.Agent
	for _, s := range specs {
		af := *f
		af.agentSpec, af.model = s, cmp.Or(s.Model, f.model, modelref.Default(e.getenv))
		model, err := newModel(&af, e.getenv)
		if err != nil {
			return fmt.Errorf("spec %s: %w", s.Name, err)
		}
		a, err := rem.proc.ServeAgent(s, model, f.mf.stream)
		if err != nil {
			return usageErr("%v", err)
		}
		a.Tenant = cmp.Or(a.Tenant, f.tenant)
		agents = append(agents, a)
	}
	host, _ := os.Hostname()
	srv, err := rem.proc.Serve(ctx, agentproc.ServeOptions{Agents: agents, Holder: fmt.Sprintf("agent serve %s pid %d", host, os.Getpid()),
		Tokens: tokens, Registry: reg, Receivers: receivers, PublicURL: public, Limits: sf.limits, MCP: sf.mcp, MCPTools: sf.mcpTools,
		A2A: sf.a2a, A2APushAllow: sf.pushAllow,
		Service: func(c *serve.Config) { c.SweepInterval, c.Lifecycle = sf.sweep, newLogger(e.stderr, true) }})
	if err != nil {
		return err
	}
	if srv.Timers != nil {
		// Only a running replica writes the timeouts: said here.
		log.Warn("approval timeouts fall back to agent serve's timers: a call expires only while a replica runs", slog.Any("error", srv.Timers))
		fmt.Fprintf(e.stderr, "agent serve: %v: approval timeouts fall back to agent serve's timers, and expire only while a replica runs\n", srv.Timers)
	}
	err = web.ListenAndServe(ctx, e.suspend, sf.addr, srv.Handler, sf.limits, srv.Stop, 30*time.Second, func(a net.Addr) {
		fmt.Fprintf(e.stderr, "agent serve: http://%s (agents: %s)\n", a, strings.Join(agentspec.Names(specs), ", "))
		fmt.Fprintf(e.stderr, "agent serve: inbox http://%s/ (log in with a token)\n", a)
		if generated != "" {
			fmt.Fprintf(e.stderr, "agent serve: admin token (kept in %s): Authorization: Bearer %s\n", filepath.Join(f.store, web.AdminTokenFile), generated)
		}
	})
	fmt.Fprintln(e.stderr, "agent serve: stopped")
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/tool"
)

// remoteTools connects to NATS and starts the remote client: the toolset
// of the tools workers advertise, restricted to --tools, and the executor
// of their background calls. Close the connection returned when done.
//
// Without --nats (or NATS_URL), it uses the embedded default (SPEC §6.4): an
// in-process nats-server storing under --store (or the one another agent
// process started on the same store), with the built-in tools served by a
// worker in this process.
func remoteTools(ctx context.Context, e env, f *runFlags, log *slog.Logger, am *metrics.Agent) (*conn, error) {
	// Start-up steps are bounded; the run itself is not.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	want := splitList(f.tools)
	var builtins []*tool.Tool
	c, err := connect(ctx, e, f, log, func(srv *embedded.Server) error {
		if srv == nil {
			// Checks the names of --tools (and --root) before anything starts.
			_, err := builtinTools(f, builtin.Config{Root: f.root, Logger: log, DenyPaths: []string{f.store}})
			return err
		}
		var err error
		// The file tools refuse the store (it holds the server's
		// credentials); http_fetch never reaches the server's port.
		cfg := builtin.Config{Root: f.root, Logger: log, DenyPaths: []string{srv.StoreDir()}, Reaper: e.reaper}
		if ap, err := netip.ParseAddrPort(srv.Addr()); err == nil {
			cfg.DenyAddrs = []netip.AddrPort{ap}
		}
		builtins, err = builtinTools(f, cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*conn, error) {
		c.close()
		return nil, err
	}
	nc, url, embeddedDefault := c.nc, c.url, c.embedded
	// A permission the user lacks ends the start-up at once, saying what
	// was refused (a refused request gets no reply: it would time out).
	ctx, stopWatch := c.refusals.Watch(ctx)
	defer stopWatch()

	var filter []string
	if len(want) > 0 {
		filter = want
	}
	var taskKey []byte
	if c.srv != nil {
		// The in-process worker runs only the approved tasks of the
		// store's agents (defence in depth: the server is the store's).
		taskKey = c.srv.TaskKey()
	}
	// The spec's policies (and, on the embedded default, the built-in
	// tools' own definitions) win over what the registry advertises.
	client, err := remote.NewClient(remote.ClientConfig{Conn: nc, Prefix: f.prefix, Replicas: f.conn.Replicas, Filter: filter,
		Policies: f.agentSpec.Policies(), InlineDeadline: f.callTimeout, Local: builtins, LocalID: fmt.Sprintf("agent-%d", os.Getpid()),
		Logger: log, Metrics: am, TaskKey: taskKey, TracerProvider: e.tracer, PerConversation: f.perConversation})
	if err != nil {
		return fail(err)
	}
	if err := client.Start(ctx); err != nil {
		return fail(err) // it names the part that failed
	}
	c.client, c.closers = client, append(c.closers, func(ctx context.Context) { _ = client.Stop(ctx) })
	c.tracer = e.tracer

	if clashes := client.Clashes(); len(clashes) > 0 {
		fmt.Fprintf(e.stderr, "agent: %s\n", clashNote(clashes))
	}
	if !embeddedDefault {
		// One rule for both (SPEC §6.1): a --tools name nothing offers is a
		// usage error naming what is offered.
		skipped, err := client.CheckOffered(ctx, want, f.externalNames())
		if err != nil {
			return fail(notOffered(err, "workers on "+natsjs.RedactURL(url), skippedNote(skipped)))
		}
		if tools, _ := client.Toolset().Tools(ctx); len(tools) == 0 && len(f.agentSpec.ExternalDefs()) == 0 {
			fmt.Fprintf(e.stderr, "agent: no worker advertises any tool on %s yet; start toolworker replicas (the model is offered no tools)%s\n", natsjs.RedactURL(url), skippedNote(skipped))
		}
	}
	return c, nil
}

// clashNote names the registry entries that clash with the agent's
// policies, and how, for the start-up's diagnostics.
func clashNote(clashes []remote.Clash) string {
	parts := make([]string, len(clashes))
	for i, c := range clashes {
		parts[i] = c.Key + " (" + c.Reason() + ")"
	}
	return "registry entries clash with the agent's policy, which applies: " + strings.Join(parts, ", ")
}

// skippedNote names the registry entries skipped and why, for the
// messages about the tools offered: "" when none was.
func skippedNote(skipped []remote.SkippedEntry) string {
	if len(skipped) == 0 {
		return ""
	}
	parts := make([]string, len(skipped))
	for i, s := range skipped {
		parts[i] = s.Key + " (" + s.Reason + ")"
	}
	return "; registry entries skipped: " + strings.Join(parts, ", ")
}

// conn is a connection to the NATS server of --nats, or of the store on
// the embedded default, with the remote client of a run.
type conn struct {
	nc  *nats.Conn
	url string
	// embedded is set on the embedded default: no server outlives the
	// agent.
	embedded bool
	// srv is the store's server on the embedded default.
	srv *embedded.Server
	// refusals are the permissions violations the server reported.
	refusals *natsjs.Refusals
	client   *remote.Client // set by remoteTools
	closers  []func(context.Context)
	// tracer records the spans of SPEC §14 (env.tracer); nil when untraced.
	tracer trace.TracerProvider
	// approvals records the decisions the session applies (SPEC §12's
	// metrics), on the run's registry.
	approvals *metrics.Approvals
}

// close stops what runs on the connection, closes it and shuts the
// embedded server down, in reverse order, within 10 s.
func (c *conn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i](ctx)
	}
}

// connect connects to --nats, or on the embedded default (SPEC §6.4) to
// the store's server, starting it when none runs. embeddedHook, when set,
// runs on the embedded default once before the server starts (srv nil)
// and once after (srv set); an error from it ends the connection.
func connect(ctx context.Context, e env, f *runFlags, log *slog.Logger, embeddedHook func(srv *embedded.Server) error) (*conn, error) {
	role := f.role
	if role == "" {
		role = "agent"
	}
	c := &conn{refusals: &natsjs.Refusals{Role: role}}
	fail := func(err error) (*conn, error) {
		c.close()
		return nil, err
	}
	copts, err := f.conn.Options(e.getenv)
	if err != nil {
		return fail(usageErr("%v", err))
	}
	if w := f.conn.ArgvSecretWarning(); w != "" {
		fmt.Fprintln(e.stderr, "agent:", w)
	}
	c.url = f.conn.Servers(copts)
	c.embedded = c.url == "" && copts.Context == nil
	if c.embedded {
		if embeddedHook != nil {
			if err := embeddedHook(nil); err != nil {
				return fail(err)
			}
		}
		srv, err := embedded.Start(ctx, embedded.Config{StoreDir: f.store, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("embedded nats-server: %w", err))
		}
		c.closers = append(c.closers, func(ctx context.Context) { _ = srv.Shutdown(ctx) })
		c.url, c.srv = srv.URL(), srv
		// Only the store's user is accepted, and only the server this store
		// started is used.
		copts = natsjs.ConnectOptions{Nkey: srv.NkeySeedFile(), ExpectServerID: srv.ServerID()}
		fmt.Fprintf(e.stderr, "nats: %s\n", c.url)
		fmt.Fprintf(e.stderr, "nats CLI: %s\n", natsCLI(srv.CLIOptions()))
		if embeddedHook != nil {
			if err := embeddedHook(srv); err != nil {
				return fail(err)
			}
		}
	}
	// An agent fails fast when the server is not there (workers wait).
	copts.Name, copts.Logger, copts.Refusals = "agent", log, c.refusals
	copts.Extra = []nats.Option{nats.Timeout(5 * time.Second), nats.RetryOnFailedConnect(false)}
	if c.srv != nil {
		// Every dial, reconnects included, checks that the store's
		// server still runs: a listener on its port after it went is an
		// impostor, whatever server ID it presents.
		copts.Extra = append(copts.Extra, nats.SetCustomDialer(c.srv))
	}
	nc, err := natsjs.Connect(c.url, copts)
	if err != nil {
		return fail(&exitError{code: exitFailed, err: fmt.Errorf("connect to %s: %w", natsjs.RedactURL(c.url), err)})
	}
	c.nc = nc
	c.closers = append(c.closers, func(context.Context) { nc.Close() })
	return c, nil
}

// natsCLI returns the nats CLI invocation with opts, shell-quoted so that it
// works when pasted.
func natsCLI(opts []string) string { return liveview.ShellJoin(append([]string{"nats"}, opts...)) }

// notOffered is the usage error (exit 2) of a name of --tools that
// nothing offers (a *tool.NotOfferedError; any other error as it is),
// naming from, what is available and note (what was skipped).
func notOffered(err error, from, note string) error {
	var no *tool.NotOfferedError
	if !errors.As(err, &no) {
		return err
	}
	list := strings.Join(no.Available, ", ")
	if list == "" {
		list = "none"
	}
	return usageErr("unknown tool %q in --tools: no such tool is offered by %s (available: %s)%s", no.Name, from, list, note)
}

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/tool"
)

// procOptions are what a command opens of an agent process besides its
// remote client (agentproc.Options: the conversations, how the
// service's key is read, metrics).
type procOptions struct {
	conversations   bool
	key             agentproc.KeyMode
	perConversation bool
	metrics         *metrics.Agent
	approvals       *metrics.Approvals
}

// openAgent connects to NATS and opens the agent process (agentproc.Open):
// the remote client (the toolset of the tools workers advertise,
// restricted to --tools, and the executor of their background calls)
// and what po asks for. Close the connection returned when done.
//
// Without --nats (or NATS_URL), it uses the embedded default (SPEC §6.4): an
// in-process nats-server storing under --store (or the one another agent
// process started on the same store), with the built-in tools served by a
// worker in this process.
func openAgent(ctx context.Context, e env, f *runFlags, log *slog.Logger, po procOptions) (*conn, error) {
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
		cfg := builtin.Config{Root: f.root, Logger: log, DenyPaths: []string{srv.StoreDir()}, Reaper: e.reaper, ToolUser: f.toolUser}
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
	// A permission the user lacks ends the start-up at once, saying what
	// was refused (a refused request gets no reply: it would time out).
	ctx, stopWatch := c.Refusals.Watch(ctx)
	defer stopWatch()

	var filter []string
	if len(want) > 0 {
		filter = want
	}
	var taskKey []byte
	if c.Server != nil {
		// The in-process worker runs only the approved tasks of the
		// store's agents (defence in depth: the server is the store's).
		taskKey = c.Server.TaskKey()
	}
	// The spec's policies (and, on the embedded default, the built-in
	// tools' own definitions) win over what the registry advertises.
	p, err := agentproc.Open(ctx, agentproc.Options{Conn: c.NC, Provision: f.conn.ProvisionOptions(f.prefix), Logger: log,
		TracerProvider: e.tracer, Metrics: po.metrics, Approvals: po.approvals, Conversations: po.conversations, QuietDuplicates: true,
		Identities: &convstore.Identities{TrustBy: f.trustNATSBy}, Key: po.key,
		Remote: &remote.ClientConfig{Filter: filter, Policies: f.agentSpec.Policies(), InlineDeadline: f.callTimeout, Local: builtins,
			LocalID: fmt.Sprintf("agent-%d", os.Getpid()), TaskKey: taskKey, PerConversation: po.perConversation}})
	if err != nil {
		return fail(err) // it names the part that failed
	}
	c.proc = p
	c.OnClose(func(ctx context.Context) { _ = p.Close(ctx) })
	client := p.Client
	if clashes := client.Clashes(); len(clashes) > 0 {
		fmt.Fprintf(e.stderr, "agent: %s\n", remote.ClashNote(clashes))
	}
	if !c.embedded {
		// One rule for both (SPEC §6.1): a --tools name nothing offers is a
		// usage error naming what is offered.
		skipped, err := client.CheckOffered(ctx, want, f.externalNames())
		if err != nil {
			return fail(notOffered(err, f.toolsFrom, "workers on "+natsjs.RedactURL(c.URL), remote.SkippedNote(skipped)))
		}
		if tools, _ := client.Toolset().Tools(ctx); len(tools) == 0 && len(f.agentSpec.ExternalDefs()) == 0 {
			fmt.Fprintf(e.stderr, "agent: no worker advertises any tool on %s yet; start toolworker replicas (the model is offered no tools)%s\n", natsjs.RedactURL(c.URL), remote.SkippedNote(skipped))
		}
	}
	return c, nil
}

// conn is a connection to the NATS server of --nats, or of the store on
// the embedded default, with the agent process opened on it.
type conn struct {
	*agentproc.Conn
	// embedded is set on the embedded default: no server outlives the
	// agent.
	embedded bool
	// proc is the agent process's parts (set by openAgent).
	proc *agentproc.Process
}

// close stops what runs on the connection, closes it and shuts the
// embedded server down, in reverse order, within 10 s.
func (c *conn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Close(ctx)
}

// connect connects to --nats, or on the embedded default (SPEC §6.4) to
// the store's server, starting it when none runs (agentproc.Dial), and
// says the server's URL and CLI options. embeddedHook, when set, runs on
// the embedded default once before the server starts (srv nil) and once
// after (srv set); an error from it ends the connection.
func connect(ctx context.Context, e env, f *runFlags, log *slog.Logger, embeddedHook func(srv *embedded.Server) error) (*conn, error) {
	copts, err := f.conn.Options(e.getenv)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if w := f.conn.ArgvSecretWarning(); w != "" {
		fmt.Fprintln(e.stderr, "agent:", w)
	}
	c, err := agentproc.Dial(ctx, agentproc.DialOptions{URL: f.conn.Servers(copts), Connect: copts, Role: f.role, StoreDir: f.store,
		Logger: log, Embedded: func(srv *embedded.Server) error {
			if srv != nil {
				fmt.Fprintf(e.stderr, "nats: %s\n", srv.URL())
				fmt.Fprintf(e.stderr, "nats CLI: %s\n", natsCLI(srv.CLIOptions()))
			}
			if embeddedHook != nil {
				return embeddedHook(srv)
			}
			return nil
		}})
	if errors.Is(err, agentproc.ErrConnect) {
		return nil, &exitError{Code: exitFailed, Err: err}
	}
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, embedded: c.Server != nil}, nil
}

// natsCLI returns the nats CLI invocation with opts, shell-quoted so that it
// works when pasted.
func natsCLI(opts []string) string { return liveview.ShellJoin(append([]string{"nats"}, opts...)) }

// notOffered is the usage error (exit 2) of a name of --tools (or of
// where tools came from, when set: the spec) that nothing offers (a
// *tool.NotOfferedError; any other error as it is), naming from, what
// is available and note (what was skipped).
func notOffered(err error, where, from, note string) error {
	var no *tool.NotOfferedError
	if !errors.As(err, &no) {
		return err
	}
	list := strings.Join(no.Available, ", ")
	if list == "" {
		list = "none"
	}
	return usageErr("unknown tool %q in %s: no such tool is offered by %s (available: %s)%s", no.Name, cmp.Or(where, "--tools"), from, list, note)
}

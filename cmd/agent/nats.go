package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/tool"
)

// remoteTools connects to NATS and returns the toolset of the tools workers
// advertise, restricted to --tools, and a function that releases
// everything.
//
// Without --nats (or NATS_URL), it uses the embedded default (SPEC §6.4): an
// in-process nats-server storing under --store (or the one another agent
// process started on the same store), with the built-in tools served by a
// worker in this process.
func remoteTools(ctx context.Context, e env, f *runFlags, log *slog.Logger, am *metrics.Agent) (*remote, func(), error) {
	var closers []func(context.Context)
	release := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i](cctx)
		}
	}
	fail := func(err error) (*remote, func(), error) {
		release()
		return nil, nil, err
	}
	// Start-up steps are bounded; the run itself is not.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	want := splitList(f.tools)
	copts, err := f.conn.options(e.getenv)
	if err != nil {
		return fail(err)
	}
	url := f.nats
	embeddedDefault := url == "" && copts.Context == nil
	var builtins []*tool.Tool
	if embeddedDefault {
		// Checks the names of --tools before anything starts.
		if _, err := builtinTools(f, log); err != nil {
			return fail(err)
		}
		srv, err := embedded.Start(ctx, embedded.Config{StoreDir: f.store, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("embedded nats-server: %w", err))
		}
		closers = append(closers, func(ctx context.Context) { _ = srv.Shutdown(ctx) })
		url = srv.URL()
		// Only the store's user is accepted, and only the server this store
		// started is used.
		copts = natsjs.ConnectOptions{Nkey: srv.NkeySeedFile(), ExpectServerID: srv.ServerID()}
		fmt.Fprintf(e.stderr, "nats: %s\n", url)
		fmt.Fprintf(e.stderr, "nats CLI: %s\n", natsCLI(srv.CLIOptions()))
		if builtins, err = embeddedBuiltins(f, srv, want, log); err != nil {
			return fail(err)
		}
	}
	// An agent run fails fast when the server is not there (workers wait).
	copts.Name, copts.Logger = "agent", log
	copts.Extra = []nats.Option{nats.Timeout(5 * time.Second), nats.RetryOnFailedConnect(false)}
	nc, err := natsjs.Connect(url, copts)
	if err != nil {
		return fail(&exitError{code: exitFailed, err: fmt.Errorf("connect to %s: %w", natsjs.RedactURL(url), err)})
	}
	closers = append(closers, func(context.Context) { nc.Close() })

	if embeddedDefault {
		w, err := natsjs.NewWorker(natsjs.WorkerConfig{
			Conn:        nc,
			Prefix:      f.prefix,
			ID:          fmt.Sprintf("agent-%d", os.Getpid()),
			Tools:       builtins,
			Replicas:    f.conn.replicas,
			GracePeriod: 5 * time.Second,
			Logger:      log,
		})
		if err != nil {
			return fail(err)
		}
		if err := w.Start(ctx); err != nil {
			return fail(fmt.Errorf("built-in tools worker: %w", err))
		}
		closers = append(closers, func(ctx context.Context) { _ = w.StopAndCancel(ctx) })
	}

	d, err := natsjs.NewDispatcher(natsjs.DispatcherConfig{Conn: nc, Prefix: f.prefix, Replicas: f.conn.replicas, Logger: log, Metrics: am})
	if err != nil {
		return fail(err)
	}
	if err := d.Start(ctx); err != nil {
		return fail(fmt.Errorf("dispatcher: %w", err))
	}
	closers = append(closers, func(ctx context.Context) { _ = d.Stop(ctx) })

	var filter []string
	if len(want) > 0 {
		filter = want
	}
	rt, err := natsjs.NewRemoteToolset(ctx, natsjs.RemoteConfig{Conn: nc, Prefix: f.prefix, Replicas: f.conn.replicas, Dispatcher: d, Filter: filter, Logger: log})
	if err != nil {
		return fail(fmt.Errorf("tool registry: %w", err))
	}
	closers = append(closers, func(context.Context) { rt.Close() })

	if !embeddedDefault {
		tools, _ := rt.Tools(ctx)
		if len(tools) == 0 {
			fmt.Fprintf(e.stderr, "agent: no worker advertises %s on %s yet; start toolworker replicas (the model is offered no tools)\n", describeTools(want), natsjs.RedactURL(url))
		}
		for _, name := range want {
			if !slices.ContainsFunc(tools, func(t *tool.Tool) bool { return t.Name == name }) && len(tools) > 0 {
				fmt.Fprintf(e.stderr, "agent: no worker advertises tool %q yet\n", name)
			}
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	return &remote{rt: rt, nc: nc, js: js, d: d, embedded: embeddedDefault}, release, nil
}

// remote is what an agent connected to NATS works with.
type remote struct {
	rt *natsjs.RemoteToolset
	nc *nats.Conn
	js jetstream.JetStream
	d  *natsjs.Dispatcher
	// embedded is set on the embedded default: no server outlives the
	// agent.
	embedded bool
}

// embeddedBuiltins builds the built-in tools the embedded default serves:
// only those selected by --tools (all without it), with the file tools
// refusing the store (it holds the server's credentials) and http_fetch
// never reaching the server's port.
func embeddedBuiltins(f *runFlags, srv *embedded.Server, want []string, log *slog.Logger) ([]*tool.Tool, error) {
	cfg := builtin.Config{Root: f.root, Logger: log, DenyPaths: []string{srv.StoreDir()}}
	if ap, err := netip.ParseAddrPort(srv.Addr()); err == nil {
		cfg.DenyAddrs = []netip.AddrPort{ap}
	}
	all, err := builtin.Tools(cfg)
	if err != nil {
		return nil, usageErr("built-in tools: %v", err)
	}
	if len(want) > 0 {
		all = slices.DeleteFunc(all, func(t *tool.Tool) bool { return !slices.Contains(want, t.Name) })
	}
	return all, nil
}

// connFlags are the NATS credential flags, the usual NATS ways (a user and
// password in the --nats URL work too), and the replication factor of
// what the command creates (SPEC §5.6).
type connFlags struct {
	creds    string
	nkey     string
	context  string
	replicas int
	envErr   error // a bad OFFLOAD_REPLICAS
}

// replicasEnv is the environment variable of --replicas.
const replicasEnv = "OFFLOAD_REPLICAS"

// addConnFlags registers --creds, --nkey, --context and --replicas on fl.
func addConnFlags(fl *pflag.FlagSet, c *connFlags, getenv func(string) string) {
	fl.StringVar(&c.creds, "creds", getenv("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fl.StringVar(&c.nkey, "nkey", getenv("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	fl.StringVar(&c.context, "context", "", "nats CLI context (name or JSON file) giving the server and credentials")
	def := 0
	if v := getenv(replicasEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			c.envErr = usageErr("%s=%q: want a replica count (0 or more)", replicasEnv, v)
		}
		def = n
	}
	fl.IntVar(&c.replicas, "replicas", def, "replicas of every stream and bucket created (env "+replicasEnv+"; default: the definitions', 1); when given, existing ones must have as many")
}

// options returns the connection options of the flags.
func (c *connFlags) options(getenv func(string) string) (natsjs.ConnectOptions, error) {
	o := natsjs.ConnectOptions{Creds: c.creds, Nkey: c.nkey}
	if c.envErr != nil {
		return o, c.envErr
	}
	if c.replicas < 0 {
		return o, usageErr("--replicas must not be negative")
	}
	if c.context != "" {
		nctx, err := natsjs.LoadContext(c.context, getenv)
		if err != nil {
			return o, usageErr("--context: %v", err)
		}
		o.Context = &nctx
	}
	return o, nil
}

// natsCLI returns the nats CLI invocation with opts, shell-quoted so that it
// works when pasted.
func natsCLI(opts []string) string {
	parts := []string{"nats"}
	for _, o := range opts {
		parts = append(parts, shellQuote(o))
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func describeTools(want []string) string {
	if len(want) == 0 {
		return "any tool"
	}
	return "the tools " + strings.Join(want, ", ")
}

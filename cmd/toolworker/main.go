// Command toolworker serves tools to offload agents over NATS JetStream:
// built-in tools and tools backed by a command in any language.
//
//	toolworker [--nats URL] [--creds FILE | --nkey FILE | --context NAME] [--inbox-prefix P]
//	           [--config tools.yaml] [--tools a,b|all] [--root DIR]
//	           [--allow-private-network] [--concurrency N] [--metrics ADDR]
//	           [--id NAME] [--prefix P] [--grace D] [--replicas N] [--tool-user USER]
//	toolworker check --tool NAME [--args JSON] [--slow-args JSON] [--exec CMD] [--nats URL] [--prefix P] [--timeout D]
//
// toolworker check is the conformance kit (pkg/natsjs/conformance): it
// drives the running worker(s) of a tool, in any language, through the
// rules of docs/PROTOCOL.md and prints one line per rule.
//
// --nats takes a comma-separated list of URLs (the servers of a cluster);
// --replicas (env OFFLOAD_REPLICAS) is the replication factor of the
// streams it creates, compared with existing ones when given.
//
// Run as root (the common case in containers), the worker runs its
// commands (--config tools and shell) as --tool-user, default nobody, with
// every privilege dropped, so that they cannot read its NATS credentials
// or API keys (internal/proc.User); as another user, they run as it.
//
// Run any number of replicas: they share one durable consumer per tool.
// SIGTERM or SIGINT stops fetching, lets running tasks finish within the
// grace period, then hands the rest back for another replica; a second
// signal cancels them at once. A signal during start-up stops it at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/internal/natsflags"
	"github.com/offload-dev/offload/internal/opsserver"
	"github.com/offload-dev/offload/internal/otelenv"
	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/cmdtool"
	"github.com/offload-dev/offload/pkg/mcptool"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/authconf"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// userRE is what --print-auth takes: a user name usable as an inbox
// prefix token and in an environment variable's name.
var userRE = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// stopMargin is how long a stop may take beyond the grace period.
const stopMargin = 15 * time.Second

const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

type options struct {
	config      string
	tools       string
	root        string
	concurrency int
	metrics     string
	id          string
	prefix      string
	grace       time.Duration
	ackWait     time.Duration
	maxDeliver  int
	verbose     bool
	printAuth   string // --print-auth: the user whose auth.conf entry to print
	// conn are the connection flags; natsURL the servers they give and
	// copts their connection options (credentials, --context).
	conn         natsflags.Flags
	natsURL      string
	copts        natsjs.ConnectOptions
	allowPrivate bool // the built-ins' network policy
	// toolUser (--tool-user) is the user the commands run as when the
	// worker is root.
	toolUser string
	getenv   func(string) string
	// reaper kills every descendant of the commands run (nil: their
	// process group only).
	reaper *proc.Reaper
	// mcp are the --mcp shorthands; servers the MCP servers started
	// (stopped after the worker), mcpMetrics their metrics.
	mcp        []string
	servers    *mcptool.Servers
	mcpMetrics *mcptool.Metrics
}

func main() {
	proc.SentinelMain() // the reaper's sentinel is this binary again
	// The worker holds NATS credentials and the tools' API keys: no
	// command it runs may read them (/proc/<pid>/environ) nor outlive its
	// task.
	if err := proc.NoDump(); err != nil {
		fmt.Fprintln(os.Stderr, "toolworker: warning:", err)
	}
	reaper, err := proc.NewReaper()
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolworker: warning:", err)
	}
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr, nil, reaper))
}

// run is the whole command; signals, when nil, are the process's SIGINT and
// SIGTERM; reaper, when set, kills the descendants of the commands run. It
// returns the exit code.
func run(args []string, getenv func(string) string, stderr io.Writer, signals <-chan os.Signal, reaper *proc.Reaper) int {
	return runTo(os.Stdout, args, getenv, stderr, signals, reaper)
}

// runTo is run with what it prints (--print-auth) going to stdout.
func runTo(stdout io.Writer, args []string, getenv func(string) string, stderr io.Writer, signals <-chan os.Signal, reaper *proc.Reaper) int {
	if len(args) > 0 && args[0] == "check" {
		return runCheck(stdout, args[1:], getenv, stderr)
	}
	opts, err := parseFlags(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, errHelp) {
			return exitOK
		}
		fmt.Fprintln(stderr, "toolworker:", err)
		return exitUsage
	}
	if _, err := otelenv.Wanted(getenv); err != nil {
		fmt.Fprintln(stderr, "toolworker:", err)
		return exitUsage
	}
	level := slog.LevelInfo
	if opts.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText})))

	opts.reaper = reaper
	opts.servers, opts.mcpMetrics = &mcptool.Servers{}, mcptool.NewMetrics(nil)
	defer opts.servers.Stop()
	tools, err := selectTools(opts, log)
	if err != nil {
		fmt.Fprintln(stderr, "toolworker:", err)
		return exitUsage
	}
	if opts.printAuth != "" {
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Name
		}
		slices.Sort(names)
		fmt.Fprint(stdout, authconf.WorkerUser(opts.prefix, opts.printAuth, names).Entry())
		return exitOK
	}
	if signals == nil {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(ch)
		signals = ch
	}
	if err := serve(opts, tools, log, signals); err != nil {
		log.Error("toolworker failed", slog.Any("error", err))
		return exitFailed
	}
	return exitOK
}

// errHelp is returned by parseFlags when the help was asked for (and
// printed).
var errHelp = errors.New("help requested")

// flagParser makes cmd a parser of flags alone: no arguments, usage and
// errors on stderr, parsed set once the flags parsed.
func flagParser(cmd *cobra.Command, stderr io.Writer, parsed *bool) {
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unexpected arguments: %s", strings.Join(args, " "))
		}
		return nil
	}
	cmd.RunE = func(*cobra.Command, []string) error { *parsed = true; return nil }
	cmd.SetOut(stderr)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		fmt.Fprint(stderr, c.UsageString())
		return flagError(err)
	})
}

// defaultURL is NATS_URL, else the local server's.
func defaultURL(getenv func(string) string) string {
	if u := getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{getenv: getenv}
	parsed := false
	cmd := &cobra.Command{
		Use:   "toolworker [flags]",
		Short: "Serve tools to offload agents over NATS JetStream",
		Long: "Serve tools to offload agents over NATS JetStream.\n\n" +
			"Commands:\n" +
			"  check    check the worker of a tool, in any language, against the wire protocol's rules\n" +
			"           (docs/PROTOCOL.md): toolworker check --tool NAME [flags]; toolworker check --help",
	}
	flagParser(cmd, stderr, &parsed)
	defURL := defaultURL(getenv)
	host, _ := os.Hostname()
	fs := cmd.Flags()
	o.conn.Register(fs, getenv, defURL, "NATS server URL, or a comma-separated list of a cluster's (env NATS_URL)")
	fs.StringVar(&o.config, "config", "", "YAML file declaring command-backed tools (tools:) and MCP servers (mcp_servers:)")
	fs.StringArrayVar(&o.mcp, "mcp", nil, "an MCP stdio server whose tools to serve, `NAME=COMMAND ARGS…` (repeatable; mcp_servers: in --config for the other settings)")
	fs.StringVar(&o.tools, "tools", "", "tools to serve: comma-separated names, or all (default: the tools of --config)")
	fs.StringVar(&o.root, "root", ".", "directory the built-in file and shell tools work in")
	fs.IntVar(&o.concurrency, "concurrency", 4, "tasks run at once by this replica")
	fs.StringVar(&o.metrics, "metrics", "", "address serving /metrics, /healthz and /readyz (e.g. 127.0.0.1:9101)")
	fs.StringVar(&o.id, "id", fmt.Sprintf("%s-%d", host, os.Getpid()), "worker ID in the registry")
	fs.StringVar(&o.prefix, "prefix", protocol.DefaultPrefix, "subject prefix")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "how long running tasks may finish after SIGTERM before they are handed back (0: hand them back at once)")
	fs.DurationVar(&o.ackWait, "ack-wait", 0, "ack wait of the task consumers, kept alive by in-progress acks (default: jetstream/consumers/task.json); every replica must agree")
	fs.IntVar(&o.maxDeliver, "max-deliver", 0, "deliveries of a task before it fails with DeliveriesExhausted (default: offload.max_deliver in jetstream/consumers/task.json); every replica must agree")
	fs.BoolVarP(&o.verbose, "v", "v", false, "debug logs")
	fs.StringVar(&o.printAuth, "print-auth", "", "print the deploy/nats/auth.conf users entry of a worker user named `USER` serving exactly these tools (--tools, --config, --prefix), then exit without connecting")
	fs.BoolVar(&o.allowPrivate, "allow-private-network", false, "let http_fetch reach loopback, private and link-local addresses (never the NATS server)")
	fs.StringVar(&o.toolUser, "tool-user", proc.DefaultToolUser, "when the worker runs as root: the user (name or ID) its commands (--config tools, shell) run as, with every privilege dropped; root or empty: as root, able to read the worker's secrets")
	cmd.SetArgs(longFlags(args, fs))
	if err := cmd.Execute(); err != nil {
		return nil, err
	}
	if !parsed {
		return nil, errHelp // --help: the usage was printed
	}
	if o.concurrency < 1 {
		return nil, errors.New("--concurrency must be at least 1")
	}
	copts, err := o.conn.Options(getenv)
	if err != nil {
		return nil, err
	}
	if w := o.conn.ArgvSecretWarning(); w != "" {
		fmt.Fprintln(stderr, "toolworker:", w)
	}
	// --context's server is used unless --nats or NATS_URL gives one.
	o.copts, o.natsURL = copts, o.conn.Servers(copts)
	if err := protocol.ValidatePrefix(o.prefix); err != nil {
		return nil, err
	}
	if o.printAuth != "" && !userRE.MatchString(o.printAuth) {
		return nil, fmt.Errorf("--print-auth %q: a user name is letters, digits and _", o.printAuth)
	}
	if o.id == "" || strings.ContainsAny(o.id, ". *>") {
		return nil, fmt.Errorf("--id %q must be non-empty and contain no '.', ' ', '*' or '>'", o.id)
	}
	return o, nil
}

// selectTools builds the served tools: the --config tools by default, the
// built-ins only when named or with --tools all.
func selectTools(o *options, log *slog.Logger) ([]*tool.Tool, error) {
	toolUser := o.toolUser
	if o.printAuth != "" {
		toolUser = "" // nothing runs: --print-auth only prints
	}
	var fromConfig []*tool.Tool
	var servers []mcptool.ServerConfig
	configDir := ""
	for _, m := range o.mcp {
		c, err := mcptool.ParseShorthand(m)
		if err != nil {
			return nil, err
		}
		servers = append(servers, c)
	}
	if o.config != "" {
		cfg, err := cmdtool.Load(o.config)
		if err != nil {
			return nil, err
		}
		configDir = cfg.Dir()
		for _, s := range cfg.Specs {
			if slices.Contains(builtin.Names(), s.Name) {
				return nil, fmt.Errorf("--config tool %q has the name of a built-in tool", s.Name)
			}
		}
		if fromConfig, err = cfg.Tools(cmdtool.Options{Dir: filepath.Dir(o.config), Logger: log, Getenv: o.getenv, Reaper: o.reaper, ToolUser: toolUser}); err != nil {
			return nil, toolUserHint(err)
		}
		servers = append(cfg.MCPServers, servers...)
	}
	mcpTools, err := startMCP(o, servers, configDir, toolUser, log)
	if err != nil {
		return nil, err
	}
	fromConfig = append(fromConfig, mcpTools...)
	bcfg := builtin.Config{
		Root: o.root, Logger: log, Getenv: o.getenv, Reaper: o.reaper, ToolUser: toolUser,
		AllowPrivateNetwork: o.allowPrivate,
		// The worker's own credentials and server stay out of reach.
		DenyPaths: credentialFiles(o),
		DenyAddrs: serverAddrs(o.natsURL),
	}
	builtins, err := builtin.Tools(bcfg)
	if err != nil {
		return nil, toolUserHint(err)
	}
	out, err := pickTools(o.tools, fromConfig, builtins)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(out))
	for i, t := range out {
		names[i] = t.Name
	}
	if err := builtin.CheckUser(bcfg, names); err != nil {
		return nil, toolUserHint(err)
	}
	return out, nil
}

// startMCP starts the MCP servers (those of --config in its directory,
// the --mcp ones in the current one) and returns their tools.
func startMCP(o *options, servers []mcptool.ServerConfig, configDir, toolUser string, log *slog.Logger) ([]*tool.Tool, error) {
	if len(servers) == 0 {
		return nil, nil
	}
	user, err := proc.ToolUser(toolUser)
	if err != nil {
		return nil, toolUserHint(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, c := range servers {
		dir := configDir
		if i >= len(servers)-len(o.mcp) {
			dir = "" // a --mcp server: the current directory
		}
		if err := o.servers.Start(ctx, c, mcptool.Options{Dir: dir, Logger: log, Getenv: o.getenv, Reaper: o.reaper, User: user, Metrics: o.mcpMetrics}); err != nil {
			return nil, err
		}
	}
	return o.servers.Tools()
}

// toolUserHint adds to an error of the tool user what the operator can do.
func toolUserHint(err error) error {
	switch {
	case errors.Is(err, proc.ErrNoSuchUser):
		return fmt.Errorf("--tool-user: %w", err)
	case errors.Is(err, proc.ErrNoAccess):
		return fmt.Errorf("%w (give the tool user access, another directory, or --tool-user)", err)
	}
	return err
}

// pickTools returns the tools --tools (want) names among the --config
// tools and the built-ins: the --config tools by default, the built-ins
// only when named or with all.
func pickTools(want string, fromConfig, builtins []*tool.Tool) ([]*tool.Tool, error) {
	want = strings.TrimSpace(want)
	switch want {
	case "":
		if len(fromConfig) == 0 {
			return nil, errors.New("nothing to serve: give --config with tools, --mcp, or --tools (names or all)")
		}
		return fromConfig, nil
	case "all":
		return append(fromConfig, builtins...), nil
	}
	byName := map[string]*tool.Tool{}
	for _, t := range append(fromConfig, builtins...) {
		byName[t.Name] = t
	}
	var out []*tool.Tool
	for _, name := range strings.Split(want, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		t, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("unknown tool %q in --tools (built-ins: %s)", name, strings.Join(builtin.Names(), ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// tracingFlushTimeout bounds the export of the spans left at exit.
const tracingFlushTimeout = 5 * time.Second

func serve(o *options, tools []*tool.Tool, log *slog.Logger, signals <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	wm := metrics.NewWorker(reg)
	if o.mcpMetrics != nil {
		reg.MustRegister(o.mcpMetrics.Calls, o.mcpMetrics.Restarts, o.mcpMetrics.Up)
	}
	tp, err := otelenv.New(ctx, o.getenv, "toolworker")
	if err != nil {
		return err
	}
	defer func() {
		// The spans still buffered are exported within a bound: an
		// unreachable collector delays the exit by at most that.
		sctx, scancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer scancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("traces not exported", slog.Any("error", err))
		}
	}()
	var tracer trace.TracerProvider
	if tp.Enabled {
		tracer = tp
	}

	copts := o.copts
	copts.Name, copts.Logger, copts.Refusals = "toolworker "+o.id, log, &natsjs.Refusals{Role: "worker"}
	nc, err := natsjs.Connect(o.natsURL, copts)
	if err != nil {
		return err
	}
	defer nc.Close()
	// A connection closed for good (credentials refused, a wrong server)
	// ends the process with an error, so that it is restarted.
	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	if sig, err := awaitServer(nc, o.natsURL, log, signals, closed); sig != nil || err != nil {
		if sig != nil {
			log.Info("stopped before the worker started", slog.String("signal", sig.String()))
		}
		return err
	}

	w, err := worker.New(worker.Config{
		Conn:           nc,
		Prefix:         o.prefix,
		ID:             o.id,
		Tools:          tools,
		Concurrency:    o.concurrency,
		GracePeriod:    o.grace,
		AckWait:        o.ackWait,
		MaxDeliver:     o.maxDeliver,
		Replicas:       o.conn.Replicas,
		Logger:         log,
		Metrics:        wm,
		TracerProvider: tracer,
	})
	if err != nil {
		return err
	}

	if o.metrics != "" {
		stop, err := opsserver.Start(o.metrics, reg, w.Ready, log)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		defer stop()
	}

	sig, err := start(ctx, w, signals, copts.Refusals)
	if sig != nil && err != nil {
		// Stopped while starting: nothing runs yet.
		log.Info("stopped before the worker started", slog.String("signal", sig.String()), slog.Any("error", err))
		return nil
	}
	if err != nil {
		return err
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	// The MCP servers' tools follow their tools/list_changed from now on.
	o.servers.Follow(w, names)
	log.Info("toolworker started", slog.String("id", o.id), slog.String("nats", nc.ConnectedUrlRedacted()), slog.Any("tools", names), slog.Int("concurrency", o.concurrency))
	if u, err := proc.ToolUser(o.toolUser); err == nil && u != nil {
		log.Info("commands run as the tool user, every privilege dropped", slog.String("tool_user", u.String()))
	} else if err == nil && os.Geteuid() == 0 {
		log.Warn("the worker runs as root and so do its commands: they can read its credentials and API keys (give --tool-user an unprivileged user)", slog.String("tool_user", o.toolUser))
	}

	if sig == nil {
		select {
		case sig = <-signals:
		case <-w.Stopped():
			return errors.New("worker stopped unexpectedly")
		case <-closed:
			// Nothing can be handed back any more: stop at once.
			stopCtx, stopCancel := context.WithTimeout(context.Background(), stopMargin)
			defer stopCancel()
			_ = w.StopAndCancel(stopCtx)
			if err := nc.LastError(); err != nil {
				return fmt.Errorf("nats connection closed: %w", err)
			}
			return errors.New("nats connection closed")
		}
	}
	log.Info("stopping", slog.String("signal", sig.String()), slog.Duration("grace", o.grace))
	// Stop lets running tasks finish within the grace period, then hands
	// the rest back (nak) and flushes before it returns, so that the
	// connection closes only after the hand-backs. Its context bounds only
	// what comes after the grace period (tools that ignore their
	// cancellation, results that cannot be published); a second signal
	// ends it at once, handing back what is still held.
	stopCtx, stopCancel := context.WithTimeout(context.Background(), o.grace+stopMargin)
	defer stopCancel()
	stop := w.Stop
	if o.grace <= 0 { // no grace period (the worker's zero is its default)
		stop = w.StopAndCancel
	}
	done := make(chan error, 1)
	go func() { done <- stop(stopCtx) }()
	select {
	case err = <-done:
	case sig := <-signals:
		log.Warn("second signal: cancelling running tasks", slog.String("signal", sig.String()))
		stopCancel()
		err = <-done
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("toolworker stopped")
	return nil
}

// startTimeout bounds the start-up: the wait for a server, then the
// worker's start.
const startTimeout = 30 * time.Second

// awaitServer waits, within startTimeout, for nc to reach a server of
// url: a worker may start before its server, but says at once that it
// waits, and why it gave up (issue 38: not a JetStream call's timeout).
// A signal or the connection closed for good meanwhile ends the wait
// (the signal is returned).
func awaitServer(nc *nats.Conn, url string, log *slog.Logger, signals <-chan os.Signal, closed <-chan nats.Status) (os.Signal, error) {
	connected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(connected)
	if nc.IsConnected() {
		return nil, nil
	}
	where := natsjs.RedactURL(url)
	log.Warn("no NATS server at "+where+" yet: waiting for one", slog.Duration("up_to", startTimeout))
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-connected:
		return nil, nil
	case sig := <-signals:
		return sig, nil
	case <-closed:
		return nil, fmt.Errorf("no NATS server at %s: the connection was closed: %w", where, nc.LastError())
	case <-timer.C:
		if nc.IsConnected() {
			return nil, nil
		}
		why := "nothing answered"
		if err := nc.LastError(); err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf("no NATS server at %s (%s) after %s: start nats-server, or give --nats", where, why, startTimeout)
	}
}

// start starts w within 30 s; a signal meanwhile cuts the start-up short
// and is returned (with Start's error, unless it had succeeded), and so
// does a permission the user lacks (a refused request gets no reply: it
// would wait the 30 s).
func start(ctx context.Context, w *worker.Worker, signals <-chan os.Signal, refusals *natsjs.Refusals) (os.Signal, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ctx, stopWatch := refusals.Watch(ctx)
	defer stopWatch()
	got := make(chan os.Signal, 1)
	started, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-signals:
			got <- sig
			cancel()
		case <-started:
		}
	}()
	err := w.Start(ctx)
	close(started)
	<-watched
	select {
	case sig := <-got:
		return sig, err
	default:
		return nil, err
	}
}

// durationsAsText writes durations as Go duration strings ("1.5s"), not as
// the JSON handler's integer nanoseconds.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

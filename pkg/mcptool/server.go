package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/tool"
)

// ProtocolVersion is the MCP protocol version the worker speaks: the one
// whose tasks (SEP-1686) and elicitation it implements.
const ProtocolVersion = "2025-11-25"

// Supervision timings.
const (
	restartFirst    = 100 * time.Millisecond // first restart delay
	restartLongest  = 30 * time.Second       // restart delay at most
	stableAfter     = 30 * time.Second       // a connection up this long resets the delay
	connectTimeout  = 30 * time.Second       // start, initialize and the first tools/list
	notifyTimeout   = 5 * time.Second        // a notification sent after the caller's context ended
	stopDrain       = 2 * time.Second        // a stdio server's output read after it was killed
	listChangedWait = 100 * time.Millisecond // notifications/tools/list_changed coalesced
)

// ErrServerDown is wrapped (with tool.ErrWorkerFault) by the error of a
// call whose server connection was lost under it, or that found no
// connection within its timeout.
var ErrServerDown = errors.New("mcptool: MCP server down")

// Options are what a [Server] takes from its worker.
type Options struct {
	// Dir is the working directory of a stdio server, and what a relative
	// program is resolved against. Defaults to the current directory.
	Dir string
	// Logger receives the server's events and its stderr. Defaults to
	// discarding them.
	Logger *slog.Logger
	// Getenv reads the worker's environment (the env: variables, the
	// header references). Defaults to os.Getenv.
	Getenv func(string) string
	// Reaper, when set, kills every descendant of a stdio server when it
	// ends (internal/proc.Reaper).
	Reaper *proc.Reaper
	// User, when set, is the user a stdio server runs as, with every
	// privilege dropped (internal/proc.User).
	User *proc.User
	// Metrics, if set, records the metrics of SPEC §16.
	Metrics *Metrics
}

// Server is one MCP server of a worker: its connection (a supervised
// stdio process, or a streamable HTTP endpoint), the tools it lists, and
// the calls made to them. Start it with [Start]; [Server.Stop] ends it.
type Server struct {
	cfg  ServerConfig
	opts Options
	log  *slog.Logger

	ctx    context.Context // ended by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // the supervisor and the follower
	kick   chan struct{}  // asks the follower to list the tools again (follow.go)

	mu      sync.Mutex
	conn    *conn         // the live connection; nil while down
	changed chan struct{} // closed (and replaced) when conn changes
	listed  []mcpTool     // the tools the server listed, allow-listed
	byName  map[string]*mcpTool
	served  servedSet // what the host serves of them
	host    Host      // set by Follow
	names   *names    // set by Follow

	ids atomic.Int64 // request IDs of the calls this package sends

	pmu    sync.Mutex
	parked map[string]*parkedCall // calls waiting for an elicitation's answer, by offload task
}

// mcpTool is one tool as the server lists it, with its raw input schema.
type mcpTool struct {
	Name        string            `json:"name"`
	Title       string            `json:"title,omitempty"`
	Description string            `json:"description,omitempty"`
	InputSchema json.RawMessage   `json:"inputSchema"`
	Annotations map[string]any    `json:"annotations,omitempty"`
	Execution   *mcpToolExecution `json:"execution,omitempty"`
}

type mcpToolExecution struct {
	TaskSupport string `json:"taskSupport,omitempty"`
}

// conn is one connection to the server: for stdio, one process.
type conn struct {
	client *client.Client
	tr     transport.Interface
	done   chan struct{} // closed when the connection is lost
	once   sync.Once
	exited chan struct{} // stdio: closed when the process and its output are done
	kill   func()        // stdio: kills the process group
	since  time.Time

	// progress routes notifications/progress to the calls that asked
	// for it, by token.
	progress sync.Map // string → func(progress, total float64, message string)
	// flights are the calls in flight, to which the server's
	// elicitations go.
	flights sync.Map // *flight → struct{}
}

// lost marks the connection lost (once).
func (c *conn) lost() { c.once.Do(func() { close(c.done) }) }

// Start connects to the server (for stdio: starts it), initializes the MCP
// session, lists its tools and keeps the connection up until [Server.Stop]:
// a stdio server that exits is restarted with backoff. A first connection
// that fails is Start's error.
func Start(ctx context.Context, cfg ServerConfig, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Getenv = getenvOr(opts.Getenv)
	s := &Server{cfg: cfg, opts: opts, log: opts.Logger.With(slog.String("mcp_server", cfg.Name)), changed: make(chan struct{}), parked: map[string]*parkedCall{},
		kick: make(chan struct{}, 1), served: servedSet{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, tools, err := s.connect(cctx)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("mcptool: mcp server %q: %w", cfg.Name, err)
	}
	s.listed = tools
	s.index()
	s.setConn(c)
	s.wg.Add(2)
	go s.supervise(c)
	go s.follower()
	return s, nil
}

// Name returns the server's configured name.
func (s *Server) Name() string { return s.cfg.Name }

// Stop ends the connection (kills a stdio server's process group, ends an
// HTTP session) and waits for the supervisor.
func (s *Server) Stop() {
	s.cancel()
	s.pmu.Lock()
	for task, p := range s.parked {
		p.timer.Stop()
		delete(s.parked, task)
	}
	s.pmu.Unlock()
	s.wg.Wait()
}

func (s *Server) setConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn = c
	close(s.changed)
	s.changed = make(chan struct{})
	s.opts.Metrics.up(s.cfg.Name, c != nil)
}

// current returns the live connection, waiting for one (a restart)
// within ctx.
func (s *Server) current(ctx context.Context) (*conn, error) {
	for {
		s.mu.Lock()
		c, changed := s.conn, s.changed
		s.mu.Unlock()
		if c != nil {
			select {
			case <-c.done:
			default:
				return c, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %q: no connection: %w", ErrServerDown, s.cfg.Name, context.Cause(ctx))
		case <-s.ctx.Done():
			return nil, fmt.Errorf("%w: %q: stopped", ErrServerDown, s.cfg.Name)
		}
	}
}

// supervise keeps the server connected until Stop: when the connection is
// lost it reconnects, after a delay that doubles from restartFirst to
// restartLongest and starts again once a connection stayed up stableAfter.
func (s *Server) supervise(c *conn) {
	defer s.wg.Done()
	delay := restartFirst
	for {
		select {
		case <-s.ctx.Done():
			s.close(c)
			s.setConn(nil)
			return
		case <-c.done:
		}
		s.close(c)
		s.setConn(nil)
		if time.Since(c.since) > stableAfter {
			delay = restartFirst
		}
		s.log.Warn("mcp server connection lost; restarting", slog.Duration("delay", delay))
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, restartLongest)
			ctx, cancel := context.WithTimeout(s.ctx, connectTimeout)
			next, tools, err := s.connect(ctx)
			cancel()
			if err != nil {
				s.log.Warn("mcp server restart failed", slog.Duration("next_delay", delay), slog.Any("error", err))
				continue
			}
			s.opts.Metrics.restarted(s.cfg.Name)
			s.noteTools(tools)
			c = next
			s.setConn(c)
			s.relist() // the host serves what it lists now
			s.log.Info("mcp server restarted")
			break
		}
	}
}

// close ends c: the client closed, a stdio process group killed and its
// output drained.
func (s *Server) close(c *conn) {
	c.lost()
	if c.kill != nil {
		c.kill()
	}
	_ = c.client.Close()
	if c.exited != nil {
		<-c.exited
	}
}

// connect makes one connection: starts a stdio server or opens the HTTP
// transport, initializes the session and lists the tools.
func (s *Server) connect(ctx context.Context) (*conn, []mcpTool, error) {
	c := &conn{done: make(chan struct{}), since: time.Now()}
	var err error
	if len(s.cfg.Command) > 0 {
		err = s.startStdio(c)
	} else {
		err = s.openHTTP(c)
	}
	if err != nil {
		return nil, nil, err
	}
	c.client = client.NewClient(c.tr, client.WithProtocolVersion(ProtocolVersion), client.WithClientCapabilities(clientCapabilities()))
	fail := func(err error) (*conn, []mcpTool, error) {
		s.close(c)
		return nil, nil, err
	}
	// The transport answers the server's requests on the context it
	// starts with: the server's, not the connecting call's.
	if err := c.client.Start(s.ctx); err != nil {
		return fail(fmt.Errorf("start transport: %w", err))
	}
	// The package answers the server's requests itself (elicitation,
	// sampling refused, ping), and routes its notifications.
	if bi, ok := c.tr.(transport.BidirectionalInterface); ok {
		bi.SetRequestHandler(func(ctx context.Context, r transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
			return s.serverRequest(ctx, c, r)
		})
	}
	c.client.OnNotification(func(n mcp.JSONRPCNotification) { s.notification(c, n) })
	c.client.OnConnectionLost(func(error) { c.lost() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = ProtocolVersion
	init.Params.ClientInfo = mcp.Implementation{Name: "offload-toolworker", Version: "1"}
	init.Params.Capabilities = clientCapabilities()
	if _, err := c.client.Initialize(ctx, init); err != nil {
		return fail(fmt.Errorf("initialize: %w", err))
	}
	tools, err := s.list(ctx, c)
	if err != nil {
		return fail(err)
	}
	if c.exited != nil {
		go func() {
			<-c.exited
			c.lost()
		}()
	}
	return c, tools, nil
}

// clientCapabilities are what the worker's client declares: elicitation
// (form and URL), no sampling (a worker has no model), no roots.
func clientCapabilities() mcp.ClientCapabilities {
	return mcp.ClientCapabilities{Elicitation: elicitationCapability()}
}

// startStdio starts the stdio server: its own process group through the
// worker's reaper, as the tool user, with the minimal environment plus
// env:. Its stderr goes to the log.
func (s *Server) startStdio(c *conn) error {
	prog := s.cfg.Command[0]
	dir := s.opts.Dir
	if dir == "" {
		dir = "."
	}
	if strings.ContainsRune(prog, filepath.Separator) && !filepath.IsAbs(prog) {
		prog = filepath.Join(dir, prog)
	}
	path, err := exec.LookPath(prog)
	if err != nil {
		return fmt.Errorf("command %q: %w", s.cfg.Command[0], err)
	}
	// The server's context kills its process group when the server stops.
	cmd := exec.CommandContext(s.ctx, path, s.cfg.Command[1:]...)
	cmd.Dir = dir
	cmd.Env = s.environ()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	cmd.Stdin = stdinR
	c.exited = make(chan struct{})
	started := make(chan error, 1)
	var pid atomic.Int64
	runner := proc.Runner{Reaper: s.opts.Reaper, User: s.opts.User}
	stderr := &logWriter{log: s.log}
	go func() {
		defer close(c.exited)
		err := runner.RunStarted(cmd, stdoutW, stderr, stopDrain, func(p int) {
			pid.Store(int64(p))
			started <- nil
		})
		if pid.Load() == 0 {
			started <- err
		}
		_ = stdoutW.CloseWithError(io.EOF)
		_ = stdinR.Close()
		stderr.flush()
		if err != nil {
			s.log.Warn("mcp server exited", slog.Any("error", err))
		} else {
			s.log.Info("mcp server exited")
		}
	}()
	if err := <-started; err != nil {
		<-c.exited
		return fmt.Errorf("start %q: %w", s.cfg.Command[0], err)
	}
	c.kill = func() {
		if p := pid.Load(); p > 0 {
			proc.KillGroup(int(p))
		}
	}
	c.tr = transport.NewIO(stdoutR, stdinW, nil)
	return nil
}

// environ is a stdio server's environment: proc.BaseEnv and the env:
// names the worker has, nothing else (no NATS credentials, no API keys).
func (s *Server) environ() []string {
	var env []string
	seen := map[string]bool{}
	for _, name := range append(append([]string{}, proc.BaseEnv...), s.cfg.Env...) {
		if seen[name] {
			continue
		}
		seen[name] = true
		if v := s.opts.Getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// openHTTP opens the streamable HTTP transport with the configured
// headers.
func (s *Server) openHTTP(c *conn) error {
	var opts []transport.StreamableHTTPCOption
	if h := s.cfg.headers(s.opts.Getenv); len(h) > 0 {
		opts = append(opts, transport.WithHTTPHeaders(h))
	}
	tr, err := transport.NewStreamableHTTP(s.cfg.URL, opts...)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	c.tr = tr
	return nil
}

// request sends one JSON-RPC request on c and returns its result. A
// request whose context ends first is cancelled with
// notifications/cancelled unless notCancel (an MCP task's, cancelled with
// tasks/cancel instead). A connection lost meanwhile is ErrServerDown.
func (s *Server) request(ctx context.Context, c *conn, method string, params any, notCancel bool) (json.RawMessage, error) {
	id := mcp.NewRequestId("offload-" + strconv.FormatInt(s.ids.Add(1), 10))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-rctx.Done():
		}
	}()
	resp, err := c.tr.SendRequest(rctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: id, Method: method, Params: params})
	if err == nil && resp == nil {
		err = errors.New("no response")
	}
	if err != nil {
		select {
		case <-c.done:
			return nil, fmt.Errorf("%w: %q: connection lost during %s", ErrServerDown, s.cfg.Name, method)
		default:
		}
		if ctx.Err() != nil {
			if !notCancel {
				s.sendCancelled(c, id, context.Cause(ctx))
			}
			return nil, context.Cause(ctx)
		}
		if s.ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %q: stopped", ErrServerDown, s.cfg.Name)
		}
		if len(s.cfg.Command) == 0 {
			// An HTTP server that cannot be reached: its connection is
			// made again, and the call fails over.
			c.lost()
			return nil, fmt.Errorf("%w: %q: %s: %w", ErrServerDown, s.cfg.Name, method, err)
		}
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if resp.Error != nil {
		return nil, &RPCError{Code: resp.Error.Code, Message: resp.Error.Message}
	}
	return resp.Result, nil
}

// sendCancelled tells the server to stop working on request id.
func (s *Server) sendCancelled(c *conn, id mcp.RequestId, cause error) {
	reason := "cancelled"
	if cause != nil {
		reason = cause.Error()
	}
	n := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION, Notification: mcp.Notification{
		Method: string(mcp.MethodNotificationCancelled),
		Params: mcp.NotificationParams{AdditionalFields: map[string]any{"requestId": id, "reason": reason}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	if err := c.tr.SendNotification(ctx, n); err != nil {
		s.log.Warn("notifications/cancelled not sent", slog.Any("error", err))
	}
}

// RPCError is a JSON-RPC error the server answered.
type RPCError struct {
	Code    int
	Message string
}

// Error implements error.
func (e *RPCError) Error() string { return fmt.Sprintf("MCP error %d: %s", e.Code, e.Message) }

// list lists the server's tools (following cursors), keeping those of
// the allow-list.
func (s *Server) list(ctx context.Context, c *conn) ([]mcpTool, error) {
	var out []mcpTool
	cursor := ""
	for range 1000 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := s.request(ctx, c, string(mcp.MethodToolsList), params, false)
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		var page struct {
			Tools      []mcpTool `json:"tools"`
			NextCursor string    `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		for _, t := range page.Tools {
			if len(s.cfg.Tools) == 0 || contains(s.cfg.Tools, t.Name) {
				out = append(out, t)
			}
		}
		if len(out) > MaxTools {
			return nil, fmt.Errorf("tools/list: %w", tooMany(len(out)))
		}
		if page.NextCursor == "" || page.NextCursor == cursor {
			break
		}
		cursor = page.NextCursor
	}
	for _, want := range s.cfg.Tools {
		found := false
		for _, t := range out {
			found = found || t.Name == want
		}
		if !found {
			s.log.Warn("tools: names a tool the server does not list", slog.String("tool", want))
		}
	}
	return out, nil
}

// index rebuilds byName from listed; s.mu held or not yet shared.
func (s *Server) index() {
	s.byName = make(map[string]*mcpTool, len(s.listed))
	for i := range s.listed {
		s.byName[s.listed[i].Name] = &s.listed[i]
	}
}

// tool returns what the server listed of name.
func (s *Server) tool(name string) (mcpTool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byName[name]
	if !ok {
		return mcpTool{}, false
	}
	return *t, true
}

// noteTools records a new listing (logged when it differs from the one
// before; the follower hands the differences to the host).
func (s *Server) noteTools(tools []mcpTool) {
	s.mu.Lock()
	before, _ := json.Marshal(s.listed)
	after, _ := json.Marshal(tools)
	s.listed = tools
	s.index()
	s.mu.Unlock()
	if string(before) != string(after) {
		s.log.Info("mcp server's tools changed", slog.Int("tools", len(tools)))
	}
}

// notification handles a notification of the server: progress to the
// call that asked for it, tools/list_changed by listing again.
func (s *Server) notification(c *conn, n mcp.JSONRPCNotification) {
	switch n.Method {
	case string(mcp.MethodNotificationProgress):
		f := n.Params.AdditionalFields
		token := fmt.Sprint(f["progressToken"])
		if report, ok := c.progress.Load(token); ok {
			p, _ := f["progress"].(float64)
			total, _ := f["total"].(float64)
			msg, _ := f["message"].(string)
			report.(func(float64, float64, string))(p, total, msg)
		}
	case string(mcp.MethodNotificationToolsListChanged):
		s.relist() // debounced by the follower
	}
}

// logWriter writes a stdio server's stderr to the log, line by line.
type logWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.log.Info("mcp server stderr", slog.String("line", string(w.buf[:i])))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 {
		w.log.Info("mcp server stderr", slog.String("line", string(w.buf)))
		w.buf = nil
	}
	return len(p), nil
}

func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.log.Info("mcp server stderr", slog.String("line", string(w.buf)))
		w.buf = nil
	}
}

// Servers are the MCP servers of a worker, started one by one with
// [Servers.Start] and stopped together with [Servers.Stop]. The zero value
// is ready; a nil *Servers has no server.
type Servers struct {
	list []*Server
}

// Start starts the server of cfg (see [Start]) and keeps it.
func (ss *Servers) Start(ctx context.Context, cfg ServerConfig, opts Options) error {
	for _, s := range ss.list {
		if s.cfg.Name == cfg.Name {
			return fmt.Errorf("%w: duplicate mcp server name %q", ErrInvalidConfig, cfg.Name)
		}
	}
	s, err := Start(ctx, cfg, opts)
	if err != nil {
		return err
	}
	ss.list = append(ss.list, s)
	return nil
}

// Tools returns the offload tools of every server (see [Server.Tools]).
func (ss *Servers) Tools() ([]*tool.Tool, error) {
	if ss == nil {
		return nil, nil
	}
	var out []*tool.Tool
	for _, s := range ss.list {
		tools, err := s.Tools()
		if err != nil {
			return nil, err
		}
		out = append(out, tools...)
	}
	return out, nil
}

// Stop stops every server (see [Server.Stop]).
func (ss *Servers) Stop() {
	if ss == nil {
		return
	}
	var wg sync.WaitGroup
	for _, s := range ss.list {
		wg.Go(s.Stop)
	}
	wg.Wait()
}

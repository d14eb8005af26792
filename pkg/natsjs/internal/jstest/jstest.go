// Package jstest holds what the tests of natsjs's packages (worker,
// remote, convstore) share: workers and dispatchers started on an
// in-process server and stopped with the test, tasks, results, a gated tool
// and the bound of every wait (the kit's, internal/offloadtest). Only
// tests import it.
package jstest

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// Wait bounds every wait on a signal in these tests (the kit's).
const Wait = offloadtest.Wait

// AckWait is the consumers' ack wait in these tests.
const AckWait = time.Second

// Logger logs to stderr when OFFLOAD_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("OFFLOAD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type echoArgs struct {
	Text string `json:"text"`
}

// EchoTool is the tool echo, which returns "<prefix><text>".
func EchoTool(prefix string) *tool.Tool {
	return tool.Func("echo", "Echo the text.", func(_ context.Context, _ *tool.RunContext, a echoArgs) (string, error) {
		return prefix + a.Text, nil
	})
}

// Gate is a tool body that signals when it starts and blocks until it is
// released or its context ends.
type Gate struct {
	Started chan string    // task's tool call ID, at start
	Release chan struct{}  // closed to let every run return
	CtxDone chan time.Time // when a run saw its context end
	once    sync.Once
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{Started: make(chan string, 64), Release: make(chan struct{}), CtxDone: make(chan time.Time, 64)}
}

// Open lets every run return (once).
func (g *Gate) Open() { g.once.Do(func() { close(g.Release) }) }

// Tool returns a tool whose runs wait for the gate and then return result.
func (g *Gate) Tool(name, result string) *tool.Tool {
	return tool.Func(name, "Wait for the gate.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		g.Started <- rc.ToolCallID
		select {
		case <-g.Release:
			return result, nil
		case <-ctx.Done():
			g.CtxDone <- time.Now()
			return "", ctx.Err()
		}
	})
}

// StartWorker starts a worker on its own connection (closed at the end of
// the test, after the worker is stopped).
func StartWorker(t *testing.T, srv *natstest.Server, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = srv.Conn(t)
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = AckWait
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger().With("test", t.Name())
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !w.Ready() {
		t.Fatal("worker not ready after Start")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Wait)
		defer cancel()
		if err := w.StopAndCancel(ctx); err != nil {
			t.Errorf("stop worker %s: %v", w.ID(), err)
		}
	})
	return w
}

// StartDispatcher starts a dispatcher with metrics on its own connection.
func StartDispatcher(t *testing.T, srv *natstest.Server, cfg remote.DispatcherConfig) (*remote.Dispatcher, *metrics.Agent) {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = srv.Conn(t)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewAgent(prometheus.NewRegistry())
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger().With("test", t.Name())
	}
	d, err := remote.NewDispatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Wait)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Errorf("stop dispatcher: %v", err)
		}
	})
	return d, cfg.Metrics
}

// NewTask returns a task of toolName in conversation conv with a new task
// ID and tool call ID.
func NewTask(toolName, conv, args string) protocol.Task {
	return protocol.Task{TaskID: protocol.NewID(), Tool: toolName, Args: json.RawMessage(args), ConversationID: conv, ToolCallID: "call_" + protocol.NewID()}
}

// CallResult is what a call of [GoCall] returned.
type CallResult struct {
	Res protocol.Result
	Err error
}

// GoCall runs d.Call in a goroutine; the result arrives on the channel.
func GoCall(ctx context.Context, d *remote.Dispatcher, task protocol.Task) <-chan CallResult {
	ch := make(chan CallResult, 1)
	go func() {
		res, err := d.Call(ctx, task)
		ch <- CallResult{res, err}
	}()
	return ch
}

// SubscribeResults subscribes (core) to every result of the default prefix.
func SubscribeResults(t *testing.T, nc *nats.Conn) <-chan protocol.Result {
	t.Helper()
	ch := make(chan protocol.Result, 64)
	sub, err := nc.Subscribe("tools.result.>", func(m *nats.Msg) {
		var r protocol.Result
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Errorf("result on %s: %v", m.Subject, err)
			return
		}
		ch <- r
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// Content returns the string content of an ok result, failing the test
// for any other.
func Content(t *testing.T, res protocol.Result) string {
	t.Helper()
	if res.Status != protocol.StatusOK {
		t.Fatalf("result status %s (%s %s), want ok", res.Status, res.ErrorType, res.Message)
	}
	var s string
	if err := json.Unmarshal(res.Content, &s); err != nil {
		t.Fatalf("content %s: %v", res.Content, err)
	}
	return s
}

// MustProvision creates the default streams, buckets and consumers on js,
// failing the test if it cannot.
func MustProvision(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if err := natsjs.Provision(context.Background(), js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
}

// LogSignal is a slog handler that sends on Ch every record whose message
// is Msg (without blocking): a signal for tests that wait on a component's
// internals. Records go on to Handler.
type LogSignal struct {
	slog.Handler
	Msg string
	Ch  chan struct{}
}

// Handle implements slog.Handler.
func (h LogSignal) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.Msg {
		select {
		case h.Ch <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

// Enabled is true for every level: the record must reach Handle.
func (h LogSignal) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs implements slog.Handler.
func (h LogSignal) WithAttrs(as []slog.Attr) slog.Handler {
	return LogSignal{h.Handler.WithAttrs(as), h.Msg, h.Ch}
}

// WithGroup implements slog.Handler.
func (h LogSignal) WithGroup(g string) slog.Handler {
	return LogSignal{h.Handler.WithGroup(g), h.Msg, h.Ch}
}

// SignalOn returns a logger (of [Logger]'s handler) that signals every
// record with message msg.
func SignalOn(msg string) (*slog.Logger, <-chan struct{}) {
	ch := make(chan struct{}, 64)
	return slog.New(LogSignal{Logger().Handler(), msg, ch}), ch
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/internal/benchcall"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// offloadSystem measures offload's path: the remote tool's handler (what the
// agent loop calls) → Dispatcher → task stream → Worker → result stream →
// Dispatcher → back in the handler.
type offloadSystem struct {
	nc      *nats.Conn
	disp    *remote.Dispatcher
	remote  *remote.Toolset
	workers []*offloadWorker
	conv    string
	tool    *tool.Tool // the remote lookup tool, as the agent loop gets it per step
	// tp, when set, traces the dispatcher and the workers, and tracer
	// starts an agent's tool span around each call (tracing.go).
	tp     trace.TracerProvider
	tracer trace.Tracer
	// prefix is the subject prefix of its streams ("" for the default): a
	// dispatcher reads every result of its prefix, so that systems alive
	// at once (the tracing section's) each have their own.
	prefix string
}

type offloadWorker struct {
	nc *nats.Conn
	w  *worker.Worker
}

func newOffloadSystem(ctx context.Context, ep endpoint) (*offloadSystem, error) {
	return newTracedOffloadSystem(ctx, ep, nil, "")
}

// newTracedOffloadSystem is newOffloadSystem traced by tp (nil: untraced),
// on the streams of prefix ("": the default).
func newTracedOffloadSystem(ctx context.Context, ep endpoint, tp trace.TracerProvider, prefix string) (*offloadSystem, error) {
	nc, err := ep.connect("bench agent")
	if err != nil {
		return nil, err
	}
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: nc, TracerProvider: tp, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Start(sctx); err != nil {
		return nil, err
	}
	rt, err := remote.NewToolset(remote.ToolsetConfig{Conn: nc, Dispatcher: d, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	if err := rt.Start(sctx); err != nil {
		return nil, err
	}
	s := &offloadSystem{nc: nc, disp: d, remote: rt, conv: protocol.NewID(), tp: tp, prefix: prefix}
	if tp != nil {
		s.tracer = tp.Tracer("offload-bench")
	}
	return s, nil
}

// startWorkers starts n workers of slots each serving the lookup tool
// with the default tool options, as a user's first tool has them: not
// declared idempotent, so its workers keep the effect ledger (SPEC §13,
// one stored write per task).
func (s *offloadSystem) startWorkers(ctx context.Context, ep endpoint, n, slots int) error {
	return s.startWorkersWith(ctx, ep, n, slots, workerOpts{prefix: s.prefix})
}

// workerOpts are the bench workers' variants (the effect ledger's section,
// effects.go): the lookup tool declared idempotent or not, and how long it
// takes.
type workerOpts struct {
	idempotent bool          // the lookup tool declared idempotent: no ledger entry
	takes      time.Duration // the tool sleeps this long before it answers (0: a no-op)
	prefix     string        // the subject prefix ("": the default)
	// served, when set, is the tool served instead of lookup (the MCP
	// section, mcp.go).
	served   *tool.Tool
	noLimits bool // worker.Config.NoLimits
}

// lookupTool returns the bench's tool as o says.
func lookupTool(o workerOpts) *tool.Tool {
	if o.takes <= 0 {
		lookup := benchcall.Lookup()
		lookup.Idempotent = o.idempotent
		return lookup
	}
	opts := []tool.Option{}
	if o.idempotent {
		opts = append(opts, tool.Idempotent())
	}
	return tool.Func("lookup", "Looks rows up.", func(ctx context.Context, _ *tool.RunContext, a benchcall.LookupArgs) (string, error) {
		t := time.NewTimer(o.takes) // a local database write, say
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if a.Query == "" {
			return "", tool.Retry("query is empty")
		}
		return benchcall.Output, nil
	}, opts...)
}

// startWorkersWith starts n workers of slots each in this process, as o
// says.
func (s *offloadSystem) startWorkersWith(ctx context.Context, ep endpoint, n, slots int, o workerOpts) error {
	if o.prefix == "" {
		o.prefix = s.prefix
	}
	ws, err := startBenchWorkers(ctx, ep, n, slots, o, s.tp)
	s.workers = append(s.workers, ws...)
	if err != nil {
		return err
	}
	return s.waitTool(ctx)
}

// startBenchWorkers starts n workers of slots each serving lookupTool(o),
// each on a connection of its own, traced by tp (nil: untraced). On an
// error it returns those started so far.
func startBenchWorkers(ctx context.Context, ep endpoint, n, slots int, o workerOpts, tp trace.TracerProvider) ([]*offloadWorker, error) {
	var out []*offloadWorker
	for i := range n {
		nc, err := ep.connect("bench worker")
		if err != nil {
			return out, err
		}
		t := lookupTool(o)
		if o.served != nil {
			t = o.served
		}
		w, err := worker.New(worker.Config{Conn: nc, ID: fmt.Sprintf("bench-%d", i), Tools: []*tool.Tool{t}, Concurrency: slots,
			NoLimits: o.noLimits, TracerProvider: tp, Prefix: o.prefix})
		if err != nil {
			nc.Close()
			return out, err
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = w.Start(sctx)
		cancel()
		if err != nil {
			nc.Close()
			return out, err
		}
		out = append(out, &offloadWorker{nc: nc, w: w})
	}
	return out, nil
}

// stopBenchWorkers stops ws and closes their connections.
func stopBenchWorkers(ctx context.Context, ws []*offloadWorker) {
	for _, w := range ws {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = w.w.Stop(sctx)
		cancel()
		w.nc.Close()
	}
}

// waitTool waits until the registry shows the tool to the agent side.
func (s *offloadSystem) waitTool(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		tools, _ := s.remote.Tools(ctx)
		if len(tools) > 0 {
			s.tool = tools[0]
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the lookup tool never appeared in the registry")
		}
		select {
		case <-s.remote.Changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *offloadSystem) stopWorkers(ctx context.Context) {
	stopBenchWorkers(ctx, s.workers)
	s.workers = nil
}

func (s *offloadSystem) call(ctx context.Context) error {
	if s.tracer != nil {
		// The agent's span of the call, as the loop starts it.
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "execute_tool lookup")
		defer span.End()
	}
	rc := &tool.RunContext{ConversationID: s.conv, RunID: s.conv, ToolCallID: "c", ToolName: "lookup"}
	v, err := s.tool.Run(ctx, rc, json.RawMessage(benchcall.Args))
	if err != nil {
		return err
	}
	r, _ := v.(tool.Return)
	if raw, _ := r.Value.(json.RawMessage); len(raw) < len(benchcall.Output) {
		return fmt.Errorf("unexpected result %v", v)
	}
	return nil
}

func (s *offloadSystem) close() {
	s.stopWorkers(context.Background())
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.remote.Stop(sctx)
	_ = s.disp.Stop(sctx)
	s.nc.Close()
}

// inProcessCall is the in-process executor: argument validation and the
// tool's handler, as the agent loop runs a local tool.
func inProcessCall() caller {
	t := benchcall.Lookup()
	rc := &tool.RunContext{ToolName: "lookup"}
	return wall(func(ctx context.Context) error {
		args, err := t.ParseArgs(benchcall.Args)
		if err != nil {
			return err
		}
		_, err = t.Run(ctx, rc, args)
		return err
	})
}

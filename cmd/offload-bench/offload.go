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
}

type offloadWorker struct {
	nc *nats.Conn
	w  *worker.Worker
}

func newOffloadSystem(ctx context.Context, ep endpoint) (*offloadSystem, error) {
	return newTracedOffloadSystem(ctx, ep, nil)
}

// newTracedOffloadSystem is newOffloadSystem traced by tp (nil: untraced).
func newTracedOffloadSystem(ctx context.Context, ep endpoint, tp trace.TracerProvider) (*offloadSystem, error) {
	nc, err := ep.connect("bench agent")
	if err != nil {
		return nil, err
	}
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: nc, TracerProvider: tp})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Start(sctx); err != nil {
		return nil, err
	}
	rt, err := remote.NewToolset(remote.ToolsetConfig{Conn: nc, Dispatcher: d})
	if err != nil {
		return nil, err
	}
	if err := rt.Start(sctx); err != nil {
		return nil, err
	}
	s := &offloadSystem{nc: nc, disp: d, remote: rt, conv: protocol.NewID(), tp: tp}
	if tp != nil {
		s.tracer = tp.Tracer("offload-bench")
	}
	return s, nil
}

// startWorkers starts n workers of slots each serving the lookup tool,
// declared idempotent as a lookup is (SPEC §13: its worker writes no
// ledger entry).
func (s *offloadSystem) startWorkers(ctx context.Context, ep endpoint, n, slots int) error {
	return s.startWorkersWith(ctx, ep, n, slots, workerOpts{idempotent: true})
}

// workerOpts are the bench workers' variants: the lookup tool declared
// idempotent or not, the effect ledger on or off.
type workerOpts struct {
	idempotent bool // the lookup tool declared idempotent: no ledger entry
	noLedger   bool // worker.Config.NoEffectLedger
	// served, when set, is the tool served instead of lookup (the MCP
	// section, mcp.go).
	served   *tool.Tool
	noLimits bool // worker.Config.NoLimits
}

// startWorkersWith starts n workers of slots each, as o says (the ledger's
// cost, effects.go, measures the lookup tool not declared idempotent with
// the ledger and without it).
func (s *offloadSystem) startWorkersWith(ctx context.Context, ep endpoint, n, slots int, o workerOpts) error {
	for i := range n {
		nc, err := ep.connect("bench worker")
		if err != nil {
			return err
		}
		lookup := benchcall.Lookup()
		lookup.Idempotent = o.idempotent
		if o.served != nil {
			lookup = o.served
		}
		w, err := worker.New(worker.Config{Conn: nc, ID: fmt.Sprintf("bench-%d", i), Tools: []*tool.Tool{lookup}, Concurrency: slots,
			NoEffectLedger: o.noLedger, NoLimits: o.noLimits, TracerProvider: s.tp})
		if err != nil {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = w.Start(sctx)
		cancel()
		if err != nil {
			return err
		}
		s.workers = append(s.workers, &offloadWorker{nc: nc, w: w})
	}
	// Wait until the registry shows the tool to the agent side.
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
	for _, w := range s.workers {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = w.w.Stop(sctx)
		cancel()
		w.nc.Close()
	}
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

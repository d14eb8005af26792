package main

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// served is one tool served by a worker replica and offered to the agent
// side through a dispatcher and a remote toolset, all on one connection.
type served struct {
	rt   *remote.Toolset
	stop func()
}

// serveTool starts a worker with slots slots serving t, a dispatcher and a
// remote toolset restricted to t, and waits until the registry shows t.
func serveTool(ctx context.Context, nc *nats.Conn, id string, t *tool.Tool, slots int) (*served, error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) (*served, error) { stop(); return nil, err }
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := worker.New(worker.Config{Conn: nc, ID: id, Tools: []*tool.Tool{t}, Concurrency: slots})
	if err != nil {
		return fail(err)
	}
	if err := w.Start(sctx); err != nil {
		return fail(err)
	}
	stops = append(stops, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(stopCtx)
	})
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: nc})
	if err != nil {
		return fail(err)
	}
	if err := d.Start(sctx); err != nil {
		return fail(err)
	}
	stops = append(stops, func() { _ = d.Stop(context.Background()) })
	rt, err := remote.NewToolset(remote.ToolsetConfig{Conn: nc, Dispatcher: d, Filter: []string{t.Name}})
	if err != nil {
		return fail(err)
	}
	if err := rt.Start(sctx); err != nil {
		return fail(err)
	}
	stops = append(stops, func() { _ = rt.Stop(context.Background()) })
	if err := waitForTool(sctx, rt, t.Name); err != nil {
		return fail(err)
	}
	return &served{rt: rt, stop: stop}, nil
}

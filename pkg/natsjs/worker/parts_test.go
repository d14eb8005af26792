package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// registryEntry returns the registry entry of toolName served by worker
// id, nil when there is none.
func (b *bundle) registryEntry(t *testing.T, toolName, id string) *natsjs.RegistryEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := b.js.KeyValue(ctx, "tools_registry")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, natsjs.RegistryKey(toolName, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var entry natsjs.RegistryEntry
	if err := json.Unmarshal(e.Value(), &entry); err != nil {
		t.Fatal(err)
	}
	return &entry
}

// A tool served while the worker runs (Serve) is advertised and run; a
// tool retired (Retire) has its registry entry withdrawn and stops being
// pulled, while its calls running finish and hear their cancels; its
// part's goroutines and subscriptions end after them; a task of it stored
// meanwhile waits, and runs once the tool is served again; a tool served
// again with a change runs as changed (SPEC §16, tools/list_changed).
func TestServeAndRetireWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	log, retired := jstest.SignalOn("tool retired")
	w := b.worker(t, worker.Config{ID: "w", Concurrency: 4, Logger: log, Tools: []*tool.Tool{echoLike("a", "a1")}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if b.registryEntry(t, "late", "w") != nil {
		t.Fatal("registry entry of late before it was served")
	}

	g := jstest.NewGate()
	if err := w.Serve(ctx, g.Tool("late", "done")); err != nil {
		t.Fatal(err)
	}
	if e := b.registryEntry(t, "late", "w"); e == nil || e.Description != "Wait for the gate." {
		t.Fatalf("registry entry of late after Serve: %+v", e)
	}
	finish := jstest.NewTask("late", protocol.NewID(), `{}`)
	stop := jstest.NewTask("late", protocol.NewID(), `{}`)
	b.publishTask(t, finish)
	b.publishTask(t, stop)
	for range 2 {
		select {
		case <-g.Started:
		case <-ctx.Done():
			t.Fatal("the calls of a tool served while running did not start")
		}
	}

	if err := w.Retire(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	if e := b.registryEntry(t, "late", "w"); e != nil {
		t.Fatalf("registry entry of late after Retire: %+v", e)
	}
	b.publishCancel(t, stop) // still heard by the call running
	if r := resultOf(t, results, stop); r.Status != protocol.StatusCancelled {
		t.Fatalf("cancelled call of a retired tool: %s %s", r.Status, r.Message)
	}
	select {
	case <-retired:
		t.Fatal("tool retired while a call of it still ran")
	default:
	}
	g.Open()
	if got := jstest.Content(t, resultOf(t, results, finish)); got != "done" {
		t.Fatalf("running call of a retired tool: %q", got)
	}
	select {
	case <-retired: // its fetcher, runners and pump ended
	case <-ctx.Done():
		t.Fatal("the retired tool's part did not end")
	}

	// Stored while the tool is retired: not pulled, kept for a worker
	// that serves it.
	waiting := jstest.NewTask("late", protocol.NewID(), `{}`)
	b.publishTask(t, waiting)
	info, err := b.taskConsumer(t, "late").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 1 || info.NumAckPending != 0 {
		t.Fatalf("a retired tool's task: %d pending, %d delivered", info.NumPending, info.NumAckPending)
	}
	if err := w.Serve(ctx, echoLike("late", "back")); err != nil {
		t.Fatal(err)
	}
	if got := jstest.Content(t, resultOf(t, results, waiting)); got != "back" {
		t.Fatalf("task stored while its tool was retired: %q", got)
	}

	// A change of a tool served: new calls run the new one, its entry is
	// rewritten.
	changed := tool.Func("a", "Changed.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "a2", nil })
	if err := w.Serve(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if e := b.registryEntry(t, "a", "w"); e == nil || e.Description != "Changed." {
		t.Fatalf("registry entry of a changed tool: %+v", e)
	}
	call := jstest.NewTask("a", protocol.NewID(), `{}`)
	b.publishTask(t, call)
	if got := jstest.Content(t, resultOf(t, results, call)); got != "a2" {
		t.Fatalf("call of a changed tool: %q", got)
	}

	// Checked like the tools of New; refused once the worker stops.
	if err := w.Serve(ctx, nil); !errors.Is(err, natsjs.ErrInvalidConfig) {
		t.Fatalf("Serve of no tool: %v", err)
	}
	if err := w.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Serve(ctx, echoLike("after", "x")); !errors.Is(err, worker.ErrNotRunning) {
		t.Fatalf("Serve after stop: %v", err)
	}
	if err := w.Retire(ctx, "a"); !errors.Is(err, worker.ErrNotRunning) {
		t.Fatalf("Retire after stop: %v", err)
	}
}

// A task of a tool served while the worker runs, stored and cancelled
// before its part subscribed to its cancels, is not run: the cancel index
// saw no cancel of it, so the part looks its tasks stored until then up.
func TestServeLooksUpCancelsStoredBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	w := b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{echoLike("a", "a1")}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	b.provision(t) // the late tool's consumer is made by Serve; the streams are there
	task := jstest.NewTask("late", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	b.publishCancel(t, task)
	ran := make(chan struct{}, 1)
	late := tool.Func("late", "Record a run.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ran <- struct{}{}
		return "ran", nil
	})
	if err := w.Serve(ctx, late); err != nil {
		t.Fatal(err)
	}
	if r := resultOf(t, results, task); r.Status != protocol.StatusCancelled {
		t.Fatalf("a task cancelled before its tool was served: %s %s", r.Status, r.Message)
	}
	select {
	case <-ran:
		t.Fatal("a task cancelled before its tool was served ran")
	default:
	}
}

package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/benchcall"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// BenchmarkWorkerTask is the worker's handling of one task, every rule of
// it (decode to respond): b.N tasks of offload-bench's lookup tool
// (declared idempotent: no ledger entry) stored at once, and one worker of
// 16 slots answering them; an op ends when its result is seen. The server
// runs in this process, so allocs/op holds its allocations and the
// publisher's too: compare it between two versions of the worker, not
// with offload-bench's figures.
func BenchmarkWorkerTask(b *testing.B) {
	srv := natstest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lookup := benchcall.Lookup()
	lookup.Idempotent = true
	w, err := worker.New(worker.Config{Conn: srv.Conn(b), ID: "bench", Tools: []*tool.Tool{lookup}, Concurrency: 16, Logger: jstest.Logger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	nc := srv.Conn(b)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(b.N+1))
	if err != nil {
		b.Fatal(err)
	}
	results := make(chan struct{}, 1024)
	sub, err := nc.Subscribe("tools.result.>", func(*nats.Msg) { results <- struct{}{} })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	conv := protocol.NewID()
	tasks := make([][]byte, b.N)
	for i := range tasks {
		task := jstest.NewTask("lookup", conv, benchcall.Args)
		if tasks[i], err = json.Marshal(task); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, data := range tasks {
		if _, err := js.PublishAsync("tools.task.lookup", data); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		select {
		case <-results:
		case <-ctx.Done():
			b.Fatal("results missing")
		}
	}
	b.StopTimer()
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("publishes not acknowledged")
	}
}

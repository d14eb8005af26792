package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// A slot freed while a pull request is still outstanding is asked for at
// once, in a second request, instead of once the first is answered: with
// two slots, one task done and none waiting, the worker has two requests
// waiting at the consumer (one per free slot), and holds no task.
func TestFreedSlotAskedForAtOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	g := newGate()
	startWorker(t, srv, natsjs.WorkerConfig{ID: "pulls", Tools: []*tool.Tool{g.tool("job", "done")}, Concurrency: 2})
	d, _ := startDispatcher(t, srv, natsjs.DispatcherConfig{})
	ctx := context.Background()
	js, err := jetstream.New(srv.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(ctx, "TOOLS_TASKS", natsjs.TaskConsumerName("job"))
	if err != nil {
		t.Fatal(err)
	}
	consumerState := func(want string, ok func(*jetstream.ConsumerInfo) bool) {
		t.Helper()
		var info *jetstream.ConsumerInfo
		for deadline := time.Now().Add(wait); ; {
			if info, err = c.Info(ctx); err != nil {
				t.Fatal(err)
			}
			if ok(info) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("consumer never reached %s: waiting %d, ack pending %d, pending %d", want,
					info.NumWaiting, info.NumAckPending, info.NumPending)
			}
			time.Sleep(10 * time.Millisecond) // the consumer's state has no signal
		}
	}
	// Both slots are asked for in one request, which the first task
	// answers in part.
	consumerState("one request", func(i *jetstream.ConsumerInfo) bool { return i.NumWaiting == 1 })
	call := goCall(ctx, d, newTask("job", protocol.NewID(), `{}`))
	recv(t, g.started, "the task to start")
	g.open()
	if cr := recv(t, call, "the result"); cr.err != nil || content(t, cr.res) != "done" {
		t.Fatalf("result %+v, %v", cr.res, cr.err)
	}
	// The freed slot is asked for while the first request still waits.
	consumerState("two requests and no task held", func(i *jetstream.ConsumerInfo) bool {
		return i.NumWaiting == 2 && i.NumAckPending == 0 && i.NumPending == 0
	})
}

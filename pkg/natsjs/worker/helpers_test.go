package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait

// testAckWait is the consumers' ack wait in these tests.
const testAckWait = jstest.AckWait

// bundle is what every worker test starts from (setup): an in-process
// server, a connection of the test's own and a JetStream context on it.
// What a test needs beyond that (the results, a dispatcher, workers,
// the server's advisories), it asks the bundle for, in the order the test needs it: a
// subscription made before a task is published sees its result.
type bundle struct {
	srv *natstest.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

// setup starts a server with opts, stopped when the test ends.
func setup(t *testing.T, opts ...natstest.Option) *bundle {
	t.Helper()
	srv := natstest.Start(t, opts...)
	nc := srv.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{srv: srv, nc: nc, js: js}
}

// results subscribes (core) to every result of the default prefix.
func (b *bundle) results(t *testing.T) <-chan protocol.Result {
	t.Helper()
	return jstest.SubscribeResults(t, b.nc)
}

// dispatcher starts a dispatcher on its own connection.
func (b *bundle) dispatcher(t *testing.T, cfg remote.DispatcherConfig) (*remote.Dispatcher, *metrics.Agent) {
	t.Helper()
	return jstest.StartDispatcher(t, b.srv, cfg)
}

// worker starts a worker on its own connection (unless cfg has one),
// stopped when the test ends.
func (b *bundle) worker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	return jstest.StartWorker(t, b.srv, cfg)
}

// provision creates the default streams, buckets and consumers (again).
func (b *bundle) provision(t *testing.T) {
	t.Helper()
	jstest.MustProvision(t, b.js)
}

// publishTask stores task on its tool's subject, as an agent does.
func (b *bundle) publishTask(t *testing.T, task protocol.Task) {
	t.Helper()
	data, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := b.js.Publish(ctx, "tools.task."+task.Tool, data, jetstream.WithMsgID(task.TaskID)); err != nil {
		t.Fatal(err)
	}
}

// publishCancel stores a cancel for task, as an agent does.
func (b *bundle) publishCancel(t *testing.T, task protocol.Task) {
	t.Helper()
	data, _ := json.Marshal(protocol.Cancel{TaskID: task.TaskID, Reason: "test"})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := b.js.Publish(ctx, "tools.cancel."+task.ConversationID+"."+task.TaskID+"."+task.Tool, data); err != nil {
		t.Fatal(err)
	}
}

// subscribe calls fn with every message on subject (core), until the test
// ends; the subscription is in place when it returns.
func (b *bundle) subscribe(t *testing.T, subject string, fn func(*nats.Msg)) {
	t.Helper()
	sub, err := b.nc.Subscribe(subject, fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// signal returns a channel that receives (without blocking the
// subscription) for each message on subject.
func (b *bundle) signal(t *testing.T, subject string) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 16)
	b.subscribe(t, subject, func(*nats.Msg) {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ch
}

// terminations signals each termination (Term) of a delivery of
// toolName's task consumer, by the server's advisory.
func (b *bundle) terminations(t *testing.T, toolName string) <-chan struct{} {
	t.Helper()
	return b.signal(t, "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.TOOLS_TASKS."+natsjs.TaskConsumerName(toolName))
}

// naks signals each nak (a task handed back) of toolName's task consumer,
// by the server's advisory.
func (b *bundle) naks(t *testing.T, toolName string) <-chan struct{} {
	t.Helper()
	return b.signal(t, "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.TOOLS_TASKS."+natsjs.TaskConsumerName(toolName))
}

// inProgressAcks signals, with the time it was seen, every in-progress ack
// (+WPI) sent for the task consumer of toolName.
func (b *bundle) inProgressAcks(t *testing.T, toolName string) <-chan time.Time {
	t.Helper()
	ch := make(chan time.Time, 64)
	b.subscribe(t, "$JS.ACK.TOOLS_TASKS."+natsjs.TaskConsumerName(toolName)+".>", func(m *nats.Msg) {
		if string(m.Data) == "+WPI" {
			select {
			case ch <- time.Now():
			default:
			}
		}
	})
	return ch
}

// taskConsumer returns the task consumer of toolName.
func (b *bundle) taskConsumer(t *testing.T, toolName string) jetstream.Consumer {
	t.Helper()
	c, err := b.js.Consumer(context.Background(), "TOOLS_TASKS", natsjs.TaskConsumerName(toolName))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// storedResult waits for the result of task stored in the results stream
// whose attempt is attempt.
func (b *bundle) storedResult(t *testing.T, task protocol.Task, attempt int) protocol.Result {
	t.Helper()
	return b.storedResultWithin(t, task, attempt, wait)
}

// storedResultWithin is storedResult with its own bound on the wait.
func (b *bundle) storedResultWithin(t *testing.T, task protocol.Task, attempt int, within time.Duration) protocol.Result {
	t.Helper()
	ctx := context.Background()
	oc, err := b.js.OrderedConsumer(ctx, "TOOLS_RESULTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"tools.result." + task.ConversationID + "." + task.TaskID + "." + task.Tool},
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := oc.Next(jetstream.FetchMaxWait(within))
		if err != nil {
			t.Fatalf("no result of attempt %d stored: %v", attempt, err)
		}
		var r protocol.Result
		if err := json.Unmarshal(msg.Data(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Attempt == attempt {
			return r
		}
	}
}

// cutWorker starts a worker whose connection goes through a proxy that the
// test can cut; it reconnects quickly once restored. The proxy is restored
// before the worker stops at the end of the test.
func (b *bundle) cutWorker(t *testing.T, cfg worker.Config) (*worker.Worker, *natstest.Proxy, <-chan struct{}) {
	t.Helper()
	proxy := natstest.NewProxy(t, b.srv.URL())
	reconnected := make(chan struct{}, 16)
	cfg.Conn = natstest.Connect(t, proxy.URL(), append(natstest.Reconnecting(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))...)
	w := b.worker(t, cfg)
	t.Cleanup(proxy.Restore) // runs before the worker's stop
	return w, proxy, reconnected
}

// dyingHolder starts a replica "dies" (behind a proxy the test cuts, with
// the given concurrency, 0 for the default) serving job with one delivery
// per task, and a task of job that it starts on that only delivery.
func (b *bundle) dyingHolder(t *testing.T, g *jstest.Gate, concurrency int) (protocol.Task, *natstest.Proxy) {
	t.Helper()
	_, proxy, _ := b.cutWorker(t, worker.Config{ID: "dies", Concurrency: concurrency, MaxDeliver: 1, Tools: []*tool.Tool{g.Tool("job", "never")}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the only delivery")
	return task, proxy
}

// resultOf waits for task's result on results (other results are skipped).
func resultOf(t *testing.T, results <-chan protocol.Result, task protocol.Task) protocol.Result {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case r := <-results:
			if r.TaskID == task.TaskID {
				return r
			}
		case <-timeout:
			t.Fatalf("no result for task %s", task.TaskID)
		}
	}
}

// settled is nil once c holds no task: none pending, none waiting for an
// ack.
func settled(ctx context.Context, c jetstream.Consumer) error {
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		return fmt.Errorf("tasks still held: %d pending, %d waiting for an ack", info.NumPending, info.NumAckPending)
	}
	return nil
}

// echoLike is a tool that returns result at once.
func echoLike(name, result string, opts ...tool.Option) *tool.Tool {
	return tool.Func(name, "Answer at once.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return result, nil }, opts...)
}

// toolState returns the fleet control state of toolName as stored.
func (b *bundle) toolState(t *testing.T, toolName string) *limits.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := b.js.KeyValue(ctx, "tools_limits")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, natsjs.LimitsKey(toolName))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &limits.State{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var st limits.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// signalProgress returns a channel that receives the progress reports of
// task (subscribed before it returns).
func (b *bundle) signalProgress(t *testing.T, task protocol.Task) <-chan protocol.Progress {
	t.Helper()
	ch := make(chan protocol.Progress, 16)
	b.subscribe(t, "tools.progress."+task.ConversationID+"."+task.TaskID+"."+task.Tool, func(m *nats.Msg) {
		if p, err := protocol.DecodeProgress(m.Data, task.TaskID, nil); err == nil {
			select {
			case ch <- p:
			default:
			}
		}
	})
	return ch
}

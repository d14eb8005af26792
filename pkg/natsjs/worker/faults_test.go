package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// These tests inject faults (cut connections, missing streams, a server
// that gave up on a task while no replica was connected) and check that the
// worker loses nothing (SPEC §5.3).

// A cancel published while the worker is cut off from the server reaches
// the running tool once the worker reconnects.
func TestCancelWhileDisconnectedStopsRunningTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	_, proxy, reconnected := b.cutWorker(t, worker.Config{ID: "cut", Tools: []*tool.Tool{g.Tool("job", "finished")}})

	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start")
	proxy.Cut()
	b.publishCancel(t, task)
	proxy.Restore()
	offloadtest.WaitOrTimeout(t, reconnected, "the worker to reconnect")
	offloadtest.WaitOrTimeout(t, g.CtxDone, "the running tool to be cancelled")
	if r := resultOf(t, results, task); r.Status != protocol.StatusCancelled {
		t.Fatalf("result %+v, want cancelled", r)
	}
}

// A task stored while the worker runs, cancelled while the worker is cut
// off, never starts once the worker is back.
func TestCancelWhileDisconnectedNeverStartsQueuedTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	_, proxy, reconnected := b.cutWorker(t, worker.Config{ID: "cut", Concurrency: 1, Tools: []*tool.Tool{g.Tool("job", "finished")}})

	conv := protocol.NewID()
	first, second := jstest.NewTask("job", conv, `{}`), jstest.NewTask("job", conv, `{}`)
	b.publishTask(t, first)
	if id := offloadtest.WaitOrTimeout(t, g.Started, "the first task to start"); id != first.ToolCallID {
		t.Fatalf("started %s", id)
	}
	b.publishTask(t, second) // waits: the only slot is taken
	proxy.Cut()
	b.publishCancel(t, second)
	proxy.Restore()
	offloadtest.WaitOrTimeout(t, reconnected, "the worker to reconnect")
	g.Open()
	if r := resultOf(t, results, first); r.Status != protocol.StatusOK {
		t.Fatalf("first result %+v", r)
	}
	if r := resultOf(t, results, second); r.Status != protocol.StatusCancelled {
		t.Fatalf("second result %+v, want cancelled", r)
	}
	select {
	case id := <-g.Started:
		t.Fatalf("the cancelled task started (%s)", id)
	default:
	}
}

// A task whose cancel look-up fails is handed back, not run blind; it runs
// once the look-up works again.
func TestFailedCancelLookupDoesNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	naked := b.naks(t, "job")
	ctx := context.Background()
	b.provision(t)
	// Both tasks are stored before the worker starts: both are looked up.
	conv := protocol.NewID()
	first, second := jstest.NewTask("job", conv, `{}`), jstest.NewTask("job", conv, `{}`)
	b.publishTask(t, first)
	b.publishTask(t, second)
	g := jstest.NewGate()
	b.worker(t, worker.Config{ID: "w", Concurrency: 1, Tools: []*tool.Tool{g.Tool("job", "finished")}})
	if id := offloadtest.WaitOrTimeout(t, g.Started, "the first task to start"); id != first.ToolCallID {
		t.Fatalf("started %s", id)
	}
	if err := b.js.DeleteStream(ctx, "TOOLS_CANCEL"); err != nil { // look-ups fail from now on
		t.Fatal(err)
	}
	g.Open()
	if r := resultOf(t, results, first); r.Status != protocol.StatusOK {
		t.Fatalf("first result %+v", r)
	}
	offloadtest.WaitOrTimeout(t, naked, "the second task to be handed back")
	select {
	case id := <-g.Started:
		t.Fatalf("a task ran without its cancel look-up (%s)", id)
	default:
	}
	b.provision(t)
	if id := offloadtest.WaitOrTimeout(t, g.Started, "the second task to run once look-ups work"); id != second.ToolCallID {
		t.Fatalf("started %s", id)
	}
	if r := resultOf(t, results, second); r.Status != protocol.StatusOK {
		t.Fatalf("second result %+v", r)
	}
}

// A finished tool whose result cannot be published is not run again: the
// worker keeps the result and retries the publish until it succeeds.
func TestResultPublishRetriedNotRerun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	job := tool.Func("job", "Count runs.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	log, failed := jstest.SignalOn("result not published; retrying")
	b.worker(t, worker.Config{ID: "w", Logger: log, Tools: []*tool.Tool{job}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, started, "the tool to start")
	ctx := context.Background()
	if err := b.js.DeleteStream(ctx, "TOOLS_RESULTS"); err != nil { // results cannot be stored
		t.Fatal(err)
	}
	close(release)
	offloadtest.WaitOrTimeout(t, failed, "a failed publish")
	offloadtest.WaitOrTimeout(t, failed, "a second failed publish: a retry, not a re-run")
	if n := runs.Load(); n != 1 {
		t.Fatalf("the finished tool ran %d times", n)
	}
	b.provision(t)
	oc, err := b.js.OrderedConsumer(ctx, "TOOLS_RESULTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"tools.result." + task.ConversationID + "." + task.TaskID + "." + task.Tool},
	})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := oc.Next(jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatalf("the result was never stored: %v", err)
	}
	var r protocol.Result
	if err := json.Unmarshal(msg.Data(), &r); err != nil || r.Status != protocol.StatusOK {
		t.Fatalf("stored result %s: %v", msg.Data(), err)
	}
	// The delivery was acknowledged: nothing is left to redeliver.
	c := b.taskConsumer(t, "job")
	// No signal: the ack is the worker's message to the server, and only
	// the consumer's state says when the server has applied it.
	offloadtest.Eventually(t, "the task to be acknowledged", func() error { return settled(ctx, c) })
	if n := runs.Load(); n != 1 {
		t.Fatalf("the finished tool ran %d times", n)
	}
}

// A task whose deliveries were exhausted while no replica was connected
// still ends in a DeliveriesExhausted result once a replica starts: the
// server never gives up on a task (its consumer's max_deliver is -1), and
// the next replica that pulls it finds the delivery past the limit.
func TestDeliveriesExhaustedWhileNoReplicaConnected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	task, proxy := b.dyingHolder(t, g, 0)
	proxy.Cut() // the replica is gone: no heartbeat

	b.worker(t, worker.Config{ID: "later", MaxDeliver: 1, Tools: []*tool.Tool{g.Tool("job", "never")}})
	r := resultOf(t, results, task)
	if r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeliveriesExhausted || r.Worker != "later" {
		t.Fatalf("result %+v", r)
	}
}

// A worker on the definitions' default ack wait has a killed replica's
// task restarted elsewhere within about 10 s (SPEC §5.3): the task
// consumer has the definitions' ack wait, after which the server hands
// the task to the survivor. The figure itself is asserted under -tags
// soak (a bound on the wall clock).
func TestDefaultAckWaitRecovery(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for the default ack wait")
	}
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	// Idempotent, so that the survivor runs it again rather than leave it
	// to a person (TestUnknownEffectNotRunAgain).
	dying := g.Tool("job", "from the killed one")
	dying.Idempotent = true
	_, proxy, _ := b.cutWorker(t, worker.Config{ID: "killed", AckWait: -1, Tools: []*tool.Tool{dying}})
	b.worker(t, worker.Config{ID: "survivor", AckWait: -1, Tools: []*tool.Tool{echoLike("job", "from the survivor", tool.Idempotent())}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start on the first replica")
	killed := time.Now()
	proxy.Cut()
	r := resultOf(t, results, task)
	if got := jstest.Content(t, r); got != "from the survivor" {
		t.Fatalf("result %q", got)
	}
	offloadtest.Bound(t, time.Since(killed), 12*time.Second, "the restart of the killed replica's task")
	def, err := natsjs.TaskConsumerConfig("job", natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.taskConsumer(t, "job").CachedInfo().Config.AckWait; got != def.AckWait || got > 10*time.Second {
		t.Fatalf("the task consumer's ack wait is %v, want the definitions' %v (at most 10 s)", got, def.AckWait)
	}
}

// A task past its deadline is answered DeadlineExceeded without running.
func TestDeadlinePassedNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	var runs atomic.Int32
	job := tool.Func("job", "Count runs.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		runs.Add(1)
		return "ran", nil
	})
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{job}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	task.Deadline = time.Now().Add(-time.Second)
	b.publishTask(t, task)
	r := resultOf(t, results, task)
	if r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeadlineExceeded {
		t.Fatalf("result %+v", r)
	}
	if runs.Load() != 0 {
		t.Fatal("a task past its deadline ran")
	}
}

// A tool that ignores its cancellation does not keep its task from another
// replica: when Stop's context ends, the task is handed back at once
// (a nak, which the server's advisory shows, rather than the ack wait's
// expiry), and Stop says so. The tools are idempotent: the tool that
// ignored its cancellation may still run, so a tool not so declared would
// be answered as an unknown effect (TestUnknownEffectNotRunAgain).
func TestStopHandsBackToolIgnoringCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	stuck := make(chan struct{})
	defer close(stuck)
	started := make(chan struct{}, 1)
	deaf := tool.Func("job", "Ignore cancellation.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		started <- struct{}{}
		<-stuck
		return "too late", nil
	}, tool.Idempotent())
	const ackWait = 10 * time.Second
	// Not startWorker: this worker is stopped by the test, with an error.
	w, err := worker.New(worker.Config{Conn: b.srv.Conn(t), ID: "deaf", AckWait: ackWait, GracePeriod: 10 * time.Millisecond,
		Logger: jstest.Logger(), Tools: []*tool.Tool{deaf}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), wait)
	defer scancel()
	if err := w.Start(sctx); err != nil {
		t.Fatal(err)
	}
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, started, "the tool to start")
	naks := b.naks(t, "job")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := time.Now()
	if err := w.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the context's error", err)
	}
	offloadtest.WaitOrTimeout(t, naks, "the task to be handed back (nak)")
	b.worker(t, worker.Config{ID: "other", AckWait: ackWait, Tools: []*tool.Tool{echoLike("job", "taken over", tool.Idempotent())}})
	r := resultOf(t, results, task)
	if got := jstest.Content(t, r); got != "taken over" {
		t.Fatalf("result %q", got)
	}
	offloadtest.Bound(t, time.Since(stopped), ackWait/2, "the take-over after the stop")
}

// A task that runs longer than the ack wait is kept alive by in-progress
// acks: no other replica gets it.
func TestHeartbeatKeepsLongTaskAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	beats := b.inProgressAcks(t, "job")
	results := b.results(t)
	g, other := jstest.NewGate(), jstest.NewGate()
	b.worker(t, worker.Config{ID: "runs", Tools: []*tool.Tool{g.Tool("job", "kept alive")}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start")
	b.worker(t, worker.Config{ID: "waits", Tools: []*tool.Tool{other.Tool("job", "redelivered")}})
	first := offloadtest.WaitOrTimeout(t, beats, "an in-progress ack")
	for {
		if at := offloadtest.WaitOrTimeout(t, beats, "an in-progress ack"); at.Sub(first) > 2*testAckWait {
			break // the task outlived two ack waits
		}
	}
	g.Open()
	if got := jstest.Content(t, resultOf(t, results, task)); got != "kept alive" {
		t.Fatalf("result %q", got)
	}
	select {
	case id := <-other.Started:
		t.Fatalf("the running task was redelivered (%s)", id)
	default:
	}
}

// With the definitions' ack wait, the heartbeat follows it (a third of
// it), not an older, longer ack wait: the worker's interval is a third of
// the definitions' ack wait, and an in-progress ack is sent. How soon it
// comes is asserted under -tags soak (a bound on the wall clock).
func TestHeartbeatFollowsDefinitionAckWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	beats := b.inProgressAcks(t, "job")
	g := jstest.NewGate()
	defer g.Open()
	w := b.worker(t, worker.Config{ID: "w", AckWait: -1, Tools: []*tool.Tool{g.Tool("job", "x")}})
	def, err := natsjs.TaskConsumerConfig("job", natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := worker.HeartbeatEvery(w); got != def.AckWait/3 {
		t.Fatalf("in-progress acks every %v, want a third of the definitions' ack wait %v", got, def.AckWait)
	}
	b.publishTask(t, jstest.NewTask("job", protocol.NewID(), `{}`))
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start")
	started := time.Now()
	beat := offloadtest.WaitOrTimeout(t, beats, "an in-progress ack")
	offloadtest.Bound(t, beat.Sub(started), def.AckWait/2, "the first in-progress ack")
}

// Results that cannot be published keep their runners busy after their
// tools returned (their slots are given back at once when tasks are
// waiting). The worker must not pull a task then that no runner can
// start: it would wait without in-progress acks, be redelivered to
// another replica after its ack wait, and run twice.
func TestUnpublishedResultsDoNotStrandPulledTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.provision(t)
	// Stored before the worker starts: each is delivered with the rest
	// waiting behind it.
	conv := protocol.NewID()
	tasks := []protocol.Task{jstest.NewTask("job", conv, `{}`), jstest.NewTask("job", conv, `{}`), jstest.NewTask("job", conv, `{}`)}
	for _, task := range tasks {
		b.publishTask(t, task)
	}
	g := jstest.NewGate()
	defer g.Open()
	// Not startWorker: this worker is stopped by the test before it counts
	// the runs.
	log, failed := jstest.SignalOn("result not published; retrying")
	w, err := worker.New(worker.Config{Conn: b.srv.Conn(t), ID: "stuck", AckWait: testAckWait, Concurrency: 1,
		Logger: log, Tools: []*tool.Tool{g.Tool("job", "done")}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, wait)
	defer scancel()
	if err := w.Start(sctx); err != nil {
		t.Fatal(err)
	}
	if id := offloadtest.WaitOrTimeout(t, g.Started, "the first task to start"); id != tasks[0].ToolCallID {
		t.Fatalf("started %s", id)
	}
	if err := b.js.DeleteStream(ctx, "TOOLS_RESULTS"); err != nil { // results cannot be stored
		t.Fatal(err)
	}
	g.Open()
	if id := offloadtest.WaitOrTimeout(t, g.Started, "the second task to start"); id != tasks[1].ToolCallID {
		t.Fatalf("started %s", id)
	}
	offloadtest.WaitOrTimeout(t, failed, "a failed publish")
	// Both runners of the worker now retry results. The third task is
	// left to another replica (the test): its first delivery is there.
	c := b.taskConsumer(t, "job")
	msg, err := c.Next(jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatalf("the third task was never delivered: %v", err)
	}
	md, err := msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if md.NumDelivered != 1 {
		t.Errorf("the third task was delivered %d times: the stuck worker held it without running it", md.NumDelivered)
	}
	if err := msg.DoubleAck(ctx); err != nil { // run by the other replica
		t.Fatal(err)
	}
	b.provision(t)
	// No signal: only the consumer's state says when the server has
	// applied the worker's acks.
	offloadtest.Eventually(t, "the tasks to be acknowledged", func() error { return settled(ctx, c) })
	stopCtx, stopCancel := context.WithTimeout(ctx, wait)
	defer stopCancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-g.Started:
		t.Fatalf("a task ran twice (%s)", id)
	default:
	}
}

// A task still running in the grace period of a stop is cancelled by a
// cancel published while the worker was cut off: the worker still catches
// up with the cancels after a reconnect while it lets its tasks finish.
func TestCancelWhileDisconnectedDuringGracePeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	defer g.Open()
	proxy := natstest.NewProxy(t, b.srv.URL())
	reconnected := make(chan struct{}, 16)
	nc := natstest.Connect(t, proxy.URL(), append(natstest.Reconnecting(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))...)
	// Not startWorker: the test stops this worker itself, with a grace
	// period far longer than the test waits.
	// The stop begins with the removal of the worker's registry entry.
	deregistered := make(chan struct{}, 1)
	b.subscribe(t, "$KV.tools_registry.job.grace", func(m *nats.Msg) {
		if m.Header.Get("KV-Operation") == "DEL" {
			deregistered <- struct{}{}
		}
	})
	w, err := worker.New(worker.Config{Conn: nc, ID: "grace", AckWait: testAckWait, GracePeriod: time.Hour,
		Logger: jstest.Logger(), Tools: []*tool.Tool{g.Tool("job", "finished")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start")
	stopped := make(chan error, 1)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 4*wait) // longer than the test waits for the cancel
	defer stopCancel()
	go func() { stopped <- w.Stop(stopCtx) }()
	offloadtest.WaitOrTimeout(t, deregistered, "the worker to stop")
	proxy.Cut()
	b.publishCancel(t, task)
	proxy.Restore()
	offloadtest.WaitOrTimeout(t, reconnected, "the worker to reconnect")
	offloadtest.WaitOrTimeout(t, g.CtxDone, "the running tool to be cancelled")
	if r := resultOf(t, results, task); r.Status != protocol.StatusCancelled {
		t.Fatalf("result %+v, want cancelled", r)
	}
	if err := offloadtest.WaitOrTimeout(t, stopped, "the stop"); err != nil {
		t.Fatal(err)
	}
}

// Stop stops fetching first: a task stored while the worker removes its
// registry entries (which may take long with a slow server) is left to
// other replicas, not pulled and started by the stopping worker.
func TestStopFetchesNothingWhileDeregistering(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := jstest.NewGate()
	defer g.Open()
	w, err := worker.New(worker.Config{Conn: b.srv.Conn(t), ID: "w", AckWait: testAckWait,
		Logger: jstest.Logger(), Tools: []*tool.Tool{g.Tool("job", "done")}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, wait)
	defer scancel()
	if err := w.Start(sctx); err != nil {
		t.Fatal(err)
	}
	// A registry that does not answer: the delete waits, and the test
	// answers it (as the stream would) when it has seen what it waits for.
	if err := b.js.DeleteStream(ctx, "KV_tools_registry"); err != nil {
		t.Fatal(err)
	}
	deleting := make(chan *nats.Msg, 1)
	b.subscribe(t, "$KV.tools_registry.job.w", func(m *nats.Msg) { deleting <- m })
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(sctx) }()
	del := offloadtest.WaitOrTimeout(t, deleting, "the registry entry's delete")
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	c := b.taskConsumer(t, "job")
	// A worker still fetching gets the task at once; give it a moment.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 {
			break
		}
	}
	_ = del.Respond([]byte(`{"stream":"KV_tools_registry","seq":2}`))
	g.Open()
	if err := offloadtest.WaitOrTimeout(t, stopped, "the stop"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-g.Started:
		t.Fatalf("the stopping worker started a task stored after the stop began (%s)", id)
	default:
	}
	// Left for another replica, which gets it: at once, or, when the task
	// reached a pull request of the stopping worker just as its
	// subscription went away (seen once on a loaded machine), after the
	// task's ack wait.
	msg, err := c.Next(jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatalf("the task was not left for another replica: %v", err)
	}
	got, err := protocol.DecodeTask(msg.Data(), nil)
	if err != nil || got.TaskID != task.TaskID {
		t.Fatalf("another replica got %s (%v), want task %s", msg.Data(), err, task.TaskID)
	}
	_ = msg.Term()
}

// A task delivered past its limit while its result cannot be published is
// still answered once results can be stored again, also when the consumer
// holds other deliveries: the DeliveriesExhausted result is kept and its
// publish retried, with the delivery kept alive, like any result.
func TestDeliveriesExhaustedAnsweredAfterFailedPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := jstest.NewGate()
	defer g.Open()
	// One replica that will die with the task, one that stays (and gets
	// its next delivery), with one slot held by another task.
	lost, proxy := b.dyingHolder(t, g, 1)
	log, failed := jstest.SignalOn("result not published; retrying")
	b.worker(t, worker.Config{ID: "stays", Concurrency: 2, MaxDeliver: 1, Logger: log, Tools: []*tool.Tool{g.Tool("job", "never")}})
	held := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, held)
	offloadtest.WaitOrTimeout(t, g.Started, "a task held by the replica that stays")
	if err := b.js.DeleteStream(ctx, "TOOLS_RESULTS"); err != nil { // results cannot be stored
		t.Fatal(err)
	}
	proxy.Cut() // the first replica is gone: no heartbeat
	offloadtest.WaitOrTimeout(t, failed, "the DeliveriesExhausted result to fail")
	b.provision(t)
	r := b.storedResult(t, lost, 0)
	if r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeliveriesExhausted || r.Worker != "stays" {
		t.Fatalf("result %+v", r)
	}
}

// A task whose deliveries were exhausted while no replica was connected is
// answered once a replica starts, also while the tool's consumer holds
// another delivery all along.
func TestDeliveriesExhaustedWhileNoReplicaConnectedUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := jstest.NewGate()
	defer g.Open()
	lost, proxy := b.dyingHolder(t, g, 1)

	// Another task of the tool is held all along: its delivery is handed
	// back with a delay longer than the test.
	held := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, held)
	c := b.taskConsumer(t, "job")
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if len(got) != 1 {
		t.Fatalf("fetched %d tasks, want the held one (%v)", len(got), batch.Error())
	}
	if err := got[0].NakWithDelay(time.Hour); err != nil {
		t.Fatal(err)
	}

	proxy.Cut() // the replica is gone: no heartbeat, nobody listens
	if info, err := c.Info(ctx); err != nil || info.NumAckPending == 0 {
		t.Fatalf("consumer holds no delivery (%v): the test proves nothing", err)
	}

	b.worker(t, worker.Config{ID: "later", MaxDeliver: 1, Tools: []*tool.Tool{g.Tool("job", "never")}})
	r := b.storedResult(t, lost, 0)
	if r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeliveriesExhausted || r.Worker != "later" {
		t.Fatalf("result %+v", r)
	}
}

// A task consumer of a deployment made before the delivery limit moved to
// the consumer's metadata (the server's max_deliver set, no metadata) is
// updated in place by the worker that binds it: the server no longer gives
// up on a task (which would leave it stored, unanswered, for want of the
// advisory stream), and the replica that receives the delivery past the
// limit answers DeliveriesExhausted, then terminates the delivery.
func TestDeliveriesExhaustedOnLegacyConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.provision(t)
	legacy, err := natsjs.TaskConsumerConfig("job", natsjs.ProvisionOptions{AckWait: testAckWait})
	if err != nil {
		t.Fatal(err)
	}
	legacy.MaxDeliver, legacy.Metadata = 1, nil
	if _, err := b.js.CreateConsumer(ctx, "TOOLS_TASKS", legacy); err != nil {
		t.Fatal(err)
	}
	terminated := b.terminations(t, "job")
	g := jstest.NewGate()
	defer g.Open()
	first := b.worker(t, worker.Config{ID: "first", Concurrency: 1, MaxDeliver: 1, Tools: []*tool.Tool{g.Tool("job", "never")}})
	info, err := b.taskConsumer(t, "job").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if limit, ok := natsjs.DeliveryLimit(info.Config); info.Config.MaxDeliver != -1 || !ok || limit != 1 {
		t.Fatalf("consumer not updated in place: max_deliver %d, metadata %v", info.Config.MaxDeliver, info.Config.Metadata)
	}
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the only delivery")
	b.worker(t, worker.Config{ID: "second", MaxDeliver: 1, Tools: []*tool.Tool{g.Tool("job", "never")}})
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := first.StopAndCancel(sctx); err != nil { // its hand-back uses up the last delivery
		t.Fatal(err)
	}
	r := b.storedResult(t, task, 0)
	if r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeliveriesExhausted || r.Worker != "second" {
		t.Fatalf("result %+v", r)
	}
	offloadtest.WaitOrTimeout(t, terminated, "the exhausted delivery to be terminated")
}

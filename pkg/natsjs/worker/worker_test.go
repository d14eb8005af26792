package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

func TestWorkerReplicasShareBurst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, am := b.dispatcher(t, remote.DispatcherConfig{})
	g := jstest.NewGate()
	var mu sync.Mutex
	runs := map[string]int{}     // tool call ID → executions
	byWorker := map[string]int{} // worker → executions of the blocked wave
	wm := metrics.NewWorker(prometheus.NewRegistry())
	for i := range 3 {
		id := fmt.Sprintf("w%d", i)
		slow := tool.Func("slow", "Block until released.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
			mu.Lock()
			runs[rc.ToolCallID]++
			byWorker[id]++
			mu.Unlock()
			g.Started <- rc.ToolCallID
			select {
			case <-g.Release:
				return "done by " + id, nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
		b.worker(t, worker.Config{ID: id, Tools: []*tool.Tool{slow, jstest.EchoTool(id + ":")}, Concurrency: 2, Metrics: wm})
	}
	ctx := context.Background()
	conv := protocol.NewID()

	// Six blocking tasks can only all run if every replica takes exactly two:
	// no replica prefetches beyond its free slots.
	var slowCalls []<-chan jstest.CallResult
	for range 6 {
		slowCalls = append(slowCalls, jstest.GoCall(ctx, d, jstest.NewTask("slow", conv, `{}`)))
	}
	for range 6 {
		offloadtest.WaitOrTimeout(t, g.Started, "a slow task to start")
	}
	mu.Lock()
	for id, n := range byWorker {
		if n != 2 {
			t.Errorf("worker %s runs %d slow tasks, want 2 (%v)", id, n, byWorker)
		}
	}
	mu.Unlock()
	g.Open()

	// A burst of fast tasks.
	const burst = 30
	calls := make(map[string]<-chan jstest.CallResult, burst)
	for i := range burst {
		task := jstest.NewTask("echo", conv, fmt.Sprintf(`{"text":"%d"}`, i))
		calls[fmt.Sprint(i)] = jstest.GoCall(ctx, d, task)
	}
	workers := map[string]bool{}
	for text, ch := range calls {
		cr := offloadtest.WaitOrTimeout(t, ch, "an echo result")
		if cr.Err != nil {
			t.Fatal(cr.Err)
		}
		got := jstest.Content(t, cr.Res)
		if want := cr.Res.Worker + ":" + text; got != want {
			t.Errorf("echo %s = %q, want %q", text, got, want)
		}
		workers[cr.Res.Worker] = true
	}
	for _, ch := range slowCalls {
		cr := offloadtest.WaitOrTimeout(t, ch, "a slow result")
		if cr.Err != nil {
			t.Fatal(cr.Err)
		}
		if got := jstest.Content(t, cr.Res); got != "done by "+cr.Res.Worker {
			t.Errorf("slow result %q from %s", got, cr.Res.Worker)
		}
	}
	mu.Lock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("task %s executed %d times", id, n)
		}
	}
	mu.Unlock()
	if got := testutil.ToFloat64(wm.TasksTotal.WithLabelValues("echo", "ok")); got != burst {
		t.Errorf("worker tasks_total{echo,ok} = %v, want %d", got, burst)
	}
	if got := testutil.ToFloat64(am.ToolCallsTotal.WithLabelValues("echo", "inline", "ok")); got != burst {
		t.Errorf("tool_calls_total{echo,inline,ok} = %v, want %d", got, burst)
	}
	if got := testutil.ToFloat64(am.PendingCalls.WithLabelValues("inline")); got != 0 {
		t.Errorf("pending calls = %v, want 0", got)
	}
	for _, r := range metrics.RefuseReasons() {
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(r))); got != 0 {
			t.Errorf("refused{%s} = %v, want 0", r, got)
		}
	}
	t.Logf("echo tasks served by %d workers", len(workers))
}

// A crashed worker's task is redelivered to another replica, which runs
// an idempotent tool again (a tool not declared idempotent becomes a
// person's decision: TestUnknownEffectNotRunAgain).
func TestWorkerCrashRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, am := b.dispatcher(t, remote.DispatcherConfig{})
	g := jstest.NewGate()
	crashConn := b.srv.Conn(t)
	crashing := g.Tool("job", "from the crashed worker")
	crashing.Idempotent = true
	crashed := b.worker(t, worker.Config{ID: "crashes", Conn: crashConn, Tools: []*tool.Tool{crashing}})
	conv := protocol.NewID()
	ch := jstest.GoCall(context.Background(), d, jstest.NewTask("job", conv, `{}`))
	offloadtest.WaitOrTimeout(t, g.Started, "the job to start on the first worker")

	// The second replica can only get the task once the first lets go of it.
	other := tool.Func("job", "Wait for the gate.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "from the survivor", nil
	}, tool.Idempotent())
	b.worker(t, worker.Config{ID: "survivor", Tools: []*tool.Tool{other}})
	crashConn.Close() // crash: no ack, no nak, no more heartbeats

	cr := offloadtest.WaitOrTimeout(t, ch, "the redelivered result")
	if cr.Err != nil {
		t.Fatal(cr.Err)
	}
	if got := jstest.Content(t, cr.Res); got != "from the survivor" || cr.Res.Worker != "survivor" {
		t.Errorf("result %q from %q", got, cr.Res.Worker)
	}
	g.Open() // the crashed worker's tool returns; its result cannot leave
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := crashed.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseDuplicate))); got != 0 {
		t.Errorf("duplicates refused: %v", got)
	}
}

func TestCancelBeforePickup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	d, am := b.dispatcher(t, remote.DispatcherConfig{})
	ctx := context.Background()
	conv := protocol.NewID()
	task := jstest.NewTask("never", conv, `{}`)
	b.publishTask(t, task)
	if err := d.Cancel(ctx, conv, task.TaskID, task.Tool, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	wm := metrics.NewWorker(prometheus.NewRegistry())
	never := tool.Func("never", "Must not run.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		t.Error("a cancelled task ran")
		return "", nil
	})
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{never}, Metrics: wm})
	res := offloadtest.WaitOrTimeout(t, results, "the cancelled result")
	if res.Status != protocol.StatusCancelled || res.TaskID != task.TaskID {
		t.Fatalf("result %+v, want cancelled", res)
	}
	if got := testutil.ToFloat64(wm.TasksTotal.WithLabelValues("never", "cancelled")); got != 1 {
		t.Errorf("tasks_total{never,cancelled} = %v", got)
	}
	// The worker's confirmation is neither late nor unknown.
	for _, r := range metrics.RefuseReasons() {
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(r))); got != 0 {
			t.Errorf("refused{%s} = %v, want 0", r, got)
		}
	}
}

func TestCancelDuringRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	g := jstest.NewGate()
	wm := metrics.NewWorker(prometheus.NewRegistry())
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{g.Tool("job", "finished")}, Metrics: wm})

	ctx, cancel := context.WithCancel(context.Background())
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	ch := jstest.GoCall(ctx, d, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the job to start")
	cancelled := time.Now()
	cancel()
	seen := offloadtest.WaitOrTimeout(t, g.CtxDone, "the tool's context to end")
	t.Logf("tool context cancelled %v after the call's", seen.Sub(cancelled))
	cr := offloadtest.WaitOrTimeout(t, ch, "Call to return")
	if cr.Err != context.Canceled { //nolint:errorlint // the call returns ctx's error itself, not a wrap of it
		t.Fatalf("Call error %v, want context.Canceled", cr.Err)
	}
	res := offloadtest.WaitOrTimeout(t, results, "the cancelled result")
	if res.Status != protocol.StatusCancelled || res.TaskID != task.TaskID {
		t.Fatalf("result %+v, want cancelled", res)
	}
	if got := testutil.ToFloat64(wm.CancellationsTotal.WithLabelValues("job")); got != 1 {
		t.Errorf("cancellations = %v, want 1", got)
	}
}

func TestWorkerOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	var panicked sync.Once
	boom := tool.Func("boom", "Panic once.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		panicked.Do(func() { panic("kaboom") })
		return "fine", nil
	})
	sleepy := tool.Func("sleepy", "Wait for the context.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	reports := make(chan protocol.Progress, 4)
	reporting := tool.Func("reporting", "Report progress.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (map[string]any, error) {
		progress.Report(ctx, "half way", progress.Fraction(0.5))
		return map[string]any{"approved": rc.ToolCallApproved, "meta": rc.ToolCallMetadata, "retry": rc.Retry, "conv": rc.ConversationID}, nil
	})
	retrying := tool.Func("retrying", "Ask for a retry.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Retry("try harder")
	})
	b.subscribe(t, "tools.progress.>", func(m *nats.Msg) {
		var p protocol.Progress
		if err := json.Unmarshal(m.Data, &p); err == nil {
			reports <- p
		}
	})
	var gatedRuns sync.Mutex
	gatedRan := 0
	gated := tool.Func("gated", "Needs approval.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		gatedRuns.Lock()
		gatedRan++
		gatedRuns.Unlock()
		return "done", nil
	}, tool.NeedsApproval())
	b.worker(t, worker.Config{ID: "w", Concurrency: 1, Tools: []*tool.Tool{boom, jstest.EchoTool(""), sleepy, reporting, retrying, gated}})
	ctx := context.Background()
	conv := protocol.NewID()
	call := func(task protocol.Task) protocol.Result {
		t.Helper()
		res, err := d.Call(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	t.Run("panic then serve", func(t *testing.T) {
		res := call(jstest.NewTask("boom", conv, `{}`))
		if res.Status != protocol.StatusError || res.ErrorType != protocol.ErrorPanic {
			t.Fatalf("panic result %+v", res)
		}
		if got := jstest.Content(t, call(jstest.NewTask("boom", conv, `{}`))); got != "fine" {
			t.Fatalf("after the panic: %q", got)
		}
	})
	t.Run("invalid arguments", func(t *testing.T) {
		res := call(jstest.NewTask("echo", conv, `{"text":5}`))
		if res.Status != protocol.StatusRetry || res.ErrorType != protocol.ErrorInvalidArguments || res.Message == "" {
			t.Fatalf("result %+v, want retry InvalidArguments", res)
		}
		_, err := res.Outcome()
		var retry *tool.ModelRetry
		if !errors.As(err, &retry) {
			t.Fatalf("outcome %v, want *tool.ModelRetry", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		task := jstest.NewTask("sleepy", conv, `{}`)
		task.Deadline = time.Now().Add(200 * time.Millisecond)
		res := call(task)
		if res.Status != protocol.StatusError || res.ErrorType != protocol.ErrorDeadlineExceeded {
			t.Fatalf("result %+v, want DeadlineExceeded", res)
		}
	})
	t.Run("run context and progress", func(t *testing.T) {
		task := jstest.NewTask("reporting", conv, `{}`)
		task.Approved, task.Retry, task.ToolCallMetadata = true, 1, map[string]any{"by": "ann"}
		res := call(task)
		var got map[string]any
		if err := json.Unmarshal(res.Content, &got); err != nil {
			t.Fatal(err)
		}
		if got["approved"] != true || got["retry"] != 1.0 || got["conv"] != conv || fmt.Sprint(got["meta"]) != "map[by:ann]" {
			t.Errorf("run context seen by the tool: %v", got)
		}
		p := offloadtest.WaitOrTimeout(t, reports, "a progress report")
		if p.TaskID != task.TaskID || p.Message != "half way" || p.Fraction == nil || *p.Fraction != 0.5 {
			t.Errorf("progress %+v", p)
		}
	})
	t.Run("approval required fails closed", func(t *testing.T) {
		res := call(jstest.NewTask("gated", conv, `{}`))
		if res.Status != protocol.StatusApprovalRequired {
			t.Fatalf("unapproved task: %+v", res)
		}
		approved := jstest.NewTask("gated", conv, `{}`)
		approved.Approved = true
		if got := jstest.Content(t, call(approved)); got != "done" {
			t.Fatalf("approved task: %q", got)
		}
		gatedRuns.Lock()
		defer gatedRuns.Unlock()
		if gatedRan != 1 {
			t.Errorf("the tool ran %d times, want once (approved only)", gatedRan)
		}
	})
	t.Run("retry", func(t *testing.T) {
		res := call(jstest.NewTask("retrying", conv, `{}`))
		if res.Status != protocol.StatusRetry || res.Message != "try harder" {
			t.Fatalf("result %+v", res)
		}
	})
}

func TestMalformedTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	wm := metrics.NewWorker(prometheus.NewRegistry())
	b.worker(t, worker.Config{ID: "w", Concurrency: 1, Tools: []*tool.Tool{jstest.EchoTool("")}, Metrics: wm})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ctx := context.Background()
	if _, err := b.js.Publish(ctx, "tools.task.echo", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	task, conv := protocol.NewID(), protocol.NewID()
	bad := fmt.Sprintf(`{"task_id":%q,"conversation_id":%q,"tool":"echo","args":5}`, task, conv)
	if _, err := b.js.Publish(ctx, "tools.task.echo", []byte(bad)); err != nil {
		t.Fatal(err)
	}
	res := offloadtest.WaitOrTimeout(t, results, "the error result of the malformed task")
	if res.TaskID != task || res.Status != protocol.StatusError || res.ErrorType != "DecodeError" {
		t.Fatalf("result %+v", res)
	}
	// With one slot, a later task is fetched only after both were
	// terminated: then neither is left in the work queue.
	if got, err := d.Call(ctx, jstest.NewTask("echo", conv, `{"text":"next"}`)); err != nil || jstest.Content(t, got) != "next" {
		t.Fatalf("next task: %+v %v", got, err)
	}
	s, err := b.js.Stream(ctx, "TOOLS_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		if _, err := s.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("task %d still in the stream: %v", seq, err)
		}
	}
	if got := testutil.ToFloat64(wm.TasksTotal.WithLabelValues("echo", "error")); got != 2 {
		t.Errorf("tasks_total{echo,error} = %v, want 2", got)
	}
}

func TestDeliveriesExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	g := jstest.NewGate()
	first := b.worker(t, worker.Config{ID: "first", MaxDeliver: 1, Tools: []*tool.Tool{g.Tool("job", "never")}})
	ch := jstest.GoCall(context.Background(), d, jstest.NewTask("job", protocol.NewID(), `{}`))
	offloadtest.WaitOrTimeout(t, g.Started, "the only delivery")
	b.worker(t, worker.Config{ID: "second", MaxDeliver: 1, Tools: []*tool.Tool{g.Tool("job", "never")}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The first worker hands the task back: its last delivery is used up.
	if err := first.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}
	cr := offloadtest.WaitOrTimeout(t, ch, "the DeliveriesExhausted result")
	if cr.Err != nil {
		t.Fatal(cr.Err)
	}
	if cr.Res.Status != protocol.StatusError || cr.Res.ErrorType != protocol.ErrorDeliveriesExhausted || cr.Res.Worker != "second" {
		t.Fatalf("result %+v", cr.Res)
	}
	_, err := cr.Res.Outcome()
	var remote *protocol.RemoteError
	if !errors.As(err, &remote) || remote.Type != protocol.ErrorDeliveriesExhausted {
		t.Fatalf("outcome %v", err)
	}
}

func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	g := jstest.NewGate()
	logger, stopping := jstest.SignalOn("worker stopping")
	w := b.worker(t, worker.Config{ID: "w", Logger: logger, Tools: []*tool.Tool{g.Tool("job", "finished in grace")}})
	ch := jstest.GoCall(context.Background(), d, jstest.NewTask("job", protocol.NewID(), `{}`))
	offloadtest.WaitOrTimeout(t, g.Started, "the job to start")

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		stopped <- w.Stop(ctx)
	}()
	// Only once the worker is stopping can it be seen not to stop: a check
	// right after starting Stop would pass before Stop even began. Absence
	// is observed over a window that starts at that signal; a Stop that
	// did not wait for its task ends (or cancels the tool) well within it.
	offloadtest.WaitOrTimeout(t, stopping, "the worker to start stopping")
	select {
	case <-w.Stopped():
		t.Fatal("stopped while a task runs")
	case cr := <-ch:
		t.Fatalf("result before the tool returned: %+v", cr)
	case <-g.CtxDone:
		t.Fatal("the running tool was cancelled within the grace period")
	case <-time.After(200 * time.Millisecond):
	}
	g.Open()
	cr := offloadtest.WaitOrTimeout(t, ch, "the result finished during the grace period")
	if cr.Err != nil {
		t.Fatal(cr.Err)
	}
	if got := jstest.Content(t, cr.Res); got != "finished in grace" {
		t.Fatalf("result %q", got)
	}
	if err := offloadtest.WaitOrTimeout(t, stopped, "Stop to return"); err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, w.Stopped(), "Stopped to close")
	if w.Ready() {
		t.Error("ready after Stop")
	}
}

func TestStopHandsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	g := jstest.NewGate()
	leavingConn := b.srv.Conn(t)
	w := b.worker(t, worker.Config{ID: "leaving", Conn: leavingConn, GracePeriod: 50 * time.Millisecond, Tools: []*tool.Tool{g.Tool("job", "x")}})
	ch := jstest.GoCall(context.Background(), d, jstest.NewTask("job", protocol.NewID(), `{}`))
	offloadtest.WaitOrTimeout(t, g.Started, "the job to start")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.Stop(ctx); err != nil { // the grace period ends first
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, g.CtxDone, "the tool to be cancelled")
	// Whatever the leaving worker published reached the server before this
	// flush returns, so before the other replica can answer: the first
	// result seen must be the other replica's.
	if err := leavingConn.Flush(); err != nil {
		t.Fatal(err)
	}
	stays := tool.Func("job", "Answer.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "taken over", nil })
	b.worker(t, worker.Config{ID: "stays", Tools: []*tool.Tool{stays}})
	if r := offloadtest.WaitOrTimeout(t, results, "the first result of the task"); r.Worker != "stays" {
		t.Fatalf("a handed-back task got a result from the leaving worker: %+v", r)
	}
	cr := offloadtest.WaitOrTimeout(t, ch, "the result from the other replica")
	if cr.Err != nil {
		t.Fatal(cr.Err)
	}
	if got := jstest.Content(t, cr.Res); got != "taken over" {
		t.Fatalf("result %q", got)
	}
}

func TestWorkerConfigErrors(t *testing.T) {
	t.Parallel()
	ext, err := tool.New(tool.Def{Name: "ext"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc := &nats.Conn{}
	for name, cfg := range map[string]worker.Config{
		"no conn":   {Tools: []*tool.Tool{jstest.EchoTool("")}},
		"no tools":  {Conn: nc},
		"external":  {Conn: nc, Tools: []*tool.Tool{ext}},
		"duplicate": {Conn: nc, Tools: []*tool.Tool{jstest.EchoTool(""), jstest.EchoTool("")}},
		"prefix":    {Conn: nc, Prefix: "a.b", Tools: []*tool.Tool{jstest.EchoTool("")}},
	} {
		if _, err := worker.New(cfg); !errors.Is(err, natsjs.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// A task stored while the worker runs, and cancelled before the worker has a
// slot for it, is answered from the cancels the worker saw on its
// subscription (no JetStream look-up): it never completes.
func TestCancelWhileQueuedBehindBusyWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	g := jstest.NewGate()
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{g.Tool("job", "finished")}, Concurrency: 1})

	conv := protocol.NewID()
	first := jstest.NewTask("job", conv, `{}`)
	firstDone := jstest.GoCall(context.Background(), d, first)
	offloadtest.WaitOrTimeout(t, g.Started, "the first job to start") // the only slot is taken

	second := jstest.NewTask("job", conv, `{}`)
	b.publishTask(t, second)
	if err := d.Cancel(context.Background(), conv, second.TaskID, second.Tool, "not needed any more"); err != nil {
		t.Fatal(err)
	}
	g.Open()
	if cr := offloadtest.WaitOrTimeout(t, firstDone, "the first call"); cr.Err != nil || cr.Res.Status != protocol.StatusOK {
		t.Fatalf("first call: %+v", cr)
	}
	for range 2 {
		res := offloadtest.WaitOrTimeout(t, results, "a result")
		if res.TaskID == second.TaskID && res.Status != protocol.StatusCancelled {
			t.Fatalf("second task result %+v, want cancelled", res)
		}
	}
}

// A result too large for a message is replaced by a ResultTooLarge error
// that still names its task, tool call, attempt and worker, and is stored
// under the attempt's message ID.
func TestWorkerReplacesTooLargeResult(t *testing.T) {
	t.Parallel()
	b := setup(t, natstest.MaxPayload(64<<10))
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	huge := tool.Func("huge", "Return too much.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return strings.Repeat("x", 80<<10), nil
	})
	b.worker(t, worker.Config{ID: "w", Concurrency: 1, Tools: []*tool.Tool{huge}})
	task := jstest.NewTask("huge", protocol.NewID(), `{}`)
	task.Attempt = 2
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := d.Call(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != protocol.StatusError || res.ErrorType != protocol.ErrorResultTooLarge || !strings.Contains(res.Message, "max payload is 65536") {
		t.Fatalf("result %s %s (%s), want error %s", res.Status, res.ErrorType, res.Message, protocol.ErrorResultTooLarge)
	}
	if res.TaskID != task.TaskID || res.ToolCallID != task.ToolCallID || res.Attempt != 2 || res.Worker != "w" ||
		res.StartedAt.IsZero() || res.FinishedAt.IsZero() {
		t.Errorf("replacement result %+v does not describe task %s attempt 2 on worker w", res, task.TaskID)
	}
	stream, err := b.js.Stream(ctx, natsjs.NamesFor("").Results)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, protocol.Subjects{}.Result(task.ConversationID, task.TaskID, task.Tool))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Header.Get(jetstream.MsgIDHeader), "res:"+task.TaskID+":2"; got != want {
		t.Errorf("stored with message ID %q, want %q", got, want)
	}
}

// A forged task that looks like a pull status (no body, a Status header)
// is terminated as malformed like any other, not mistaken for the server's
// status and left to wedge a slot until it exhausts its deliveries.
func TestTaskWithStatusHeaderTerminated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	terminated := b.signal(t, "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.TOOLS_TASKS.task_echo")
	b.worker(t, worker.Config{ID: "w", Concurrency: 1, Tools: []*tool.Tool{jstest.EchoTool("")}})
	ctx := context.Background()
	for _, status := range []string{"100", "404", "408"} {
		m := nats.NewMsg("tools.task.echo")
		m.Header.Set("Status", status)
		m.Header.Set("Nats-Pending-Messages", "1")
		if _, err := b.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitOrTimeout(t, terminated, "the forged task with status "+status+" to be terminated")
	}
}

// The error result of a malformed task keeps the task's attempt: a later
// attempt's result is not dropped as a duplicate of the first's
// (Nats-Msg-Id res:<task>:<attempt>).
func TestMalformedTaskKeepsAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{jstest.EchoTool("")}})
	task := jstest.NewTask("echo", protocol.NewID(), `{}`)
	// Attempt 0 ended deferred (approval required).
	first := nats.NewMsg("tools.result." + task.ConversationID + "." + task.TaskID + ".echo")
	first.Header.Set(jetstream.MsgIDHeader, "res:"+task.TaskID+":0")
	first.Data = []byte(`{"status":"approval_required"}`)
	if _, err := b.js.PublishMsg(ctx, first); err != nil {
		t.Fatal(err)
	}
	bad := fmt.Sprintf(`{"task_id":%q,"conversation_id":%q,"tool":"echo","args":5,"attempt":1}`, task.TaskID, task.ConversationID)
	if _, err := b.js.Publish(ctx, "tools.task.echo", []byte(bad)); err != nil {
		t.Fatal(err)
	}
	if r := b.storedResult(t, task, 1); r.Status != protocol.StatusError || r.ErrorType != "DecodeError" {
		t.Fatalf("result %+v", r)
	}
}

// A malformed task whose error result cannot be published is not
// terminated without it: it comes back, and its result is stored once
// the results stream is back.
func TestMalformedTaskResultRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	log, failed := jstest.SignalOn("error result of a malformed task not published")
	b.worker(t, worker.Config{ID: "w", Logger: log, Tools: []*tool.Tool{jstest.EchoTool("")}})
	if err := b.js.DeleteStream(ctx, "TOOLS_RESULTS"); err != nil { // results cannot be stored
		t.Fatal(err)
	}
	task := jstest.NewTask("echo", protocol.NewID(), `{}`)
	bad := fmt.Sprintf(`{"task_id":%q,"conversation_id":%q,"tool":"echo","args":5}`, task.TaskID, task.ConversationID)
	if _, err := b.js.Publish(ctx, "tools.task.echo", []byte(bad)); err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, failed, "a failed publish")
	b.provision(t)
	if r := b.storedResult(t, task, 0); r.Status != protocol.StatusError || r.ErrorType != "DecodeError" {
		t.Fatalf("result %+v", r)
	}
}

// A worker whose start fails leaves no registry entry behind: agents would
// offer its tools, served by nobody, until the entries expired.
func TestFailedStartLeavesNoRegistryEntry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The registry entry of "big" exceeds the server's max payload: its
	// write fails after that of "a" (entries are written in name order).
	big := tool.Func("big", strings.Repeat("x", 2<<20), func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil })
	w, err := worker.New(worker.Config{Conn: b.srv.Conn(t), ID: "w", AckWait: testAckWait, Logger: jstest.Logger(),
		Tools: []*tool.Tool{echoLike("a", "x"), big}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.Start(ctx); err == nil {
		_ = w.StopAndCancel(ctx)
		t.Fatal("started with an entry too large for the registry")
	}
	kv, err := b.js.KeyValue(ctx, "tools_registry")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, natsjs.RegistryKey("a", "w")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("registry entry of a failed worker: %v %v", e, err)
	}
}

// A tool whose result cannot be encoded (metadata holding NaN) gets an
// error result, instead of the worker retrying the publish forever and
// holding the task.
func TestUnencodableResultAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	nan := tool.Func("nan", "Return metadata JSON cannot encode.", func(context.Context, *tool.RunContext, struct{}) (tool.Return, error) {
		return tool.Return{Value: "x", Metadata: map[string]any{"score": math.NaN()}}, nil
	})
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{nan}})
	task := jstest.NewTask("nan", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	r := resultOf(t, results, task)
	if r.Status != protocol.StatusError || !strings.Contains(r.Message, "NaN") || r.Worker != "w" {
		t.Fatalf("result %+v", r)
	}
}

package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// runLog is a tool body that records the idempotency key of every run, so
// that a test counts how often the attempt's side effect happened.
type runLog struct {
	mu   sync.Mutex
	keys []string
	ran  chan string
}

func newRunLog() *runLog { return &runLog{ran: make(chan string, 16)} }

func (l *runLog) tool(name string, opts ...tool.Option) *tool.Tool {
	return tool.Func(name, "Count the runs.", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		l.mu.Lock()
		l.keys = append(l.keys, rc.IdempotencyKey)
		l.mu.Unlock()
		l.ran <- rc.IdempotencyKey
		return "ran", nil
	}, opts...)
}

func (l *runLog) runs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...)
}

// killedMidRun starts a replica ("killed", behind a proxy) whose tool job
// blocks, gets a task of job started on it, and cuts it off: it no longer
// acknowledges anything, as if SIGKILLed mid-run. The gate's runs see the
// key of the attempt; it is returned on keys.
func (b *bundle) killedMidRun(t *testing.T, opts ...tool.Option) (protocol.Task, chan string) {
	t.Helper()
	g := jstest.NewGate()
	keys := make(chan string, 4)
	gated := tool.Func("job", "Wait for the gate.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		keys <- rc.IdempotencyKey
		g.Started <- rc.ToolCallID
		<-ctx.Done()
		return "", ctx.Err()
	}, opts...)
	_, proxy, _ := b.cutWorker(t, worker.Config{ID: "killed", Tools: []*tool.Tool{gated}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start on the replica that is killed")
	proxy.Cut()
	return task, keys
}

// A non-idempotent tool whose worker was killed mid-run is not run again:
// the next delivery of the attempt finds it started in the ledger, with no
// result, and answers approval_required with the unknown effect's metadata
// (SPEC §13), so that a person decides. Before the ledger, the survivor ran
// it a second time.
func TestUnknownEffectNotRunAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	task, _ := b.killedMidRun(t)
	l := newRunLog()
	b.worker(t, worker.Config{ID: "survivor", Tools: []*tool.Tool{l.tool("job")}})
	r := resultOf(t, results, task)
	if r.Status != protocol.StatusApprovalRequired || r.Worker != "survivor" {
		t.Fatalf("result %+v, want approval_required by the survivor", r)
	}
	if r.Metadata[tool.EffectMetaKey] != tool.EffectUnknown || r.Metadata["worker"] != "killed" {
		t.Fatalf("metadata %v, want offload.effect unknown, worker killed", r.Metadata)
	}
	if at, err := time.Parse(time.RFC3339Nano, r.Metadata["started_at"].(string)); err != nil || at.IsZero() {
		t.Fatalf("started_at %v: %v", r.Metadata["started_at"], err)
	}
	if runs := l.runs(); len(runs) != 0 {
		t.Fatalf("the survivor ran the tool again: %v", runs)
	}
	offloadtest.Eventually(t, "the acknowledgement, as the server counts it (no signal)",
		func() error { return settled(context.Background(), b.taskConsumer(t, "job")) })
	if e, rev := b.effectAt(t, task); e.Started.Worker != "killed" || e.Finished != nil || rev != 1 || b.ledgerWrites(t) != 1 {
		t.Fatalf("ledger entry %+v at %d, %d ledger writes; want started by killed, the only write (the stored result is the proof)", e, rev, b.ledgerWrites(t))
	}
}

// An idempotent tool (tool.Idempotent) whose worker was killed mid-run runs
// again on the survivor, with the same idempotency key: <task>:<attempt>.
func TestIdempotentToolRunAgainWithTheSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	task, keys := b.killedMidRun(t, tool.Idempotent())
	first := offloadtest.WaitOrTimeout(t, keys, "the first run's key")
	l := newRunLog()
	b.worker(t, worker.Config{ID: "survivor", Tools: []*tool.Tool{l.tool("job", tool.Idempotent())}})
	r := resultOf(t, results, task)
	if r.Status != protocol.StatusOK || r.Worker != "survivor" {
		t.Fatalf("result %+v, want ok by the survivor", r)
	}
	want := task.TaskID + ":0"
	if runs := l.runs(); first != want || len(runs) != 1 || runs[0] != want {
		t.Fatalf("keys: first run %q, then %v; want %q on both", first, runs, want)
	}
	b.noEffect(t, task)
}

// An idempotent tool keeps no ledger entry, yet a redelivery of its attempt whose result was stored
// before its worker died is still answered from the stored result without
// running. Before, the killed replica's run had written started (and the
// survivor finished).
func TestIdempotentToolKeepsNoEntry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	task, _ := b.killedMidRun(t, tool.Idempotent())
	// What the killed replica leaves behind had it stored the result
	// before it died.
	seq := b.storeResult(t, task, protocol.Result{TaskID: task.TaskID, Content: json.RawMessage(`"stored"`), Worker: "killed"})
	l := newRunLog()
	logger, answered := jstest.SignalOn("attempt answered before: acknowledged without running")
	b.worker(t, worker.Config{ID: "survivor", Logger: logger, Tools: []*tool.Tool{l.tool("job", tool.Idempotent())}})
	offloadtest.WaitOrTimeout(t, answered, "the redelivery answered from the stored result")
	if runs := l.runs(); len(runs) != 0 {
		t.Fatalf("the survivor ran the tool: %v", runs)
	}
	s, err := b.js.Stream(context.Background(), "TOOLS_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	if st := s.CachedInfo().State; st.Msgs != 1 || st.LastSeq != seq {
		t.Fatalf("results stream %d messages, last %d; want the one stored at %d", st.Msgs, st.LastSeq, seq)
	}
	b.noEffect(t, task)
}

// A delivery of an attempt whose result was stored before its worker died
// (before it acknowledged the delivery) is acknowledged without running,
// and nothing more is stored, in the results or the ledger; so is one
// whose entry is finished (as workers before issue 40 wrote it).
func TestStoredResultAnsweredWithoutRunning(t *testing.T) {
	t.Parallel()
	for _, finished := range []bool{false, true} {
		name := "result stored, entry started"
		if finished {
			name = "entry finished"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.provision(t)
			task := jstest.NewTask("job", protocol.NewID(), `{}`)
			seq := b.storeResult(t, task, protocol.Result{TaskID: task.TaskID, Content: json.RawMessage(`"stored"`), Worker: "died"})
			e := natsjs.Effect{Started: natsjs.EffectStarted{Worker: "died", At: time.Now().UTC()}}
			if finished {
				e.Finished = &natsjs.EffectFinished{Status: protocol.StatusOK, ResultSeq: seq}
			}
			b.putEffect(t, task, e)
			l := newRunLog()
			logger, answered := jstest.SignalOn("attempt answered before: acknowledged without running")
			b.worker(t, worker.Config{ID: "next", Logger: logger, Tools: []*tool.Tool{l.tool("job")}})
			b.publishTask(t, task)
			offloadtest.WaitOrTimeout(t, answered, "the delivery answered from the stored result")
			offloadtest.Eventually(t, "the acknowledgement, as the server counts it (no signal)",
				func() error { return settled(context.Background(), b.taskConsumer(t, "job")) })
			if runs := l.runs(); len(runs) != 0 {
				t.Fatalf("the tool ran: %v", runs)
			}
			s, err := b.js.Stream(context.Background(), "TOOLS_RESULTS")
			if err != nil {
				t.Fatal(err)
			}
			if n := s.CachedInfo().State.Msgs; n != 1 {
				t.Fatalf("%d results stored, want the one", n)
			}
			if got, rev := b.effectAt(t, task); (got.Finished != nil) != finished || rev != 1 || b.ledgerWrites(t) != 1 {
				t.Fatalf("ledger entry %+v at %d, %d ledger writes; want it as it was written (finished %v)", got, rev, b.ledgerWrites(t), finished)
			}
		})
	}
}

// A worker cut off after it stored an attempt's result, before it
// acknowledged the delivery: the redelivery finds the entry started and
// the result stored, and is answered from the stored result without
// running the tool again; the ledger holds the one started write.
func TestCutBetweenResultAndAckAnsweredFromTheResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := newRunLog()
	first, proxy, _ := b.cutWorker(t, worker.Config{ID: "cut", Tools: []*tool.Tool{l.tool("job")}})
	stored := make(chan struct{})
	var once sync.Once
	worker.SetAfterResultStored(first, func() { once.Do(func() { proxy.Cut(); close(stored) }) })
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, stored, "the result stored, then the worker cut off")
	if got := b.effect(t, task); got.Finished != nil || got.Started.Worker != "cut" {
		t.Fatalf("ledger entry %+v, want started by cut", got)
	}
	logger, answered := jstest.SignalOn("attempt answered before: acknowledged without running")
	b.worker(t, worker.Config{ID: "next", Logger: logger, Tools: []*tool.Tool{l.tool("job")}})
	offloadtest.WaitOrTimeout(t, answered, "the redelivery answered from the stored result")
	if runs := l.runs(); len(runs) != 1 {
		t.Fatalf("runs %v, want the one before the cut", runs)
	}
	s, err := b.js.Stream(context.Background(), "TOOLS_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("%d results stored, want the one", n)
	}
	if got, rev := b.effectAt(t, task); got.Started.Worker != "cut" || got.Finished != nil || rev != 1 || b.ledgerWrites(t) != 1 {
		t.Fatalf("ledger entry %+v at %d, %d ledger writes; want the cut worker's started, the only write", got, rev, b.ledgerWrites(t))
	}
}

// A task handed back on the worker's shutdown (its tool returned on the
// cancellation) has its ledger entry withdrawn: the next replica runs it,
// a non-idempotent tool too, as before the ledger.
func TestHandBackOnShutdownWithdrawsTheEntry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	first := b.worker(t, worker.Config{ID: "first", Tools: []*tool.Tool{g.Tool("job", "never")}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start on the first replica")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := first.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}
	l := newRunLog()
	b.worker(t, worker.Config{ID: "second", Tools: []*tool.Tool{l.tool("job")}})
	if r := resultOf(t, results, task); r.Status != protocol.StatusOK || r.Worker != "second" {
		t.Fatalf("result %+v, want ok by the second replica", r)
	}
}

// effects binds the effect ledger.
func (b *bundle) effects(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := b.js.KeyValue(context.Background(), "tools_effects")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// effect reads the ledger entry of task's attempt.
func (b *bundle) effect(t *testing.T, task protocol.Task) natsjs.Effect {
	t.Helper()
	e, _ := b.effectAt(t, task)
	return e
}

// effectAt reads the ledger entry of task's attempt and its revision.
func (b *bundle) effectAt(t *testing.T, task protocol.Task) (natsjs.Effect, uint64) {
	t.Helper()
	key := natsjs.EffectKey(task.Tool, task.TaskID, task.Attempt)
	entry, err := b.effects(t).Get(context.Background(), key)
	if err != nil {
		t.Fatalf("ledger entry %s: %v", key, err)
	}
	e, err := natsjs.ParseEffect(key, entry.Value())
	if err != nil {
		t.Fatal(err)
	}
	return e, entry.Revision()
}

// ledgerWrites returns how many writes the ledger's stream has stored
// (its last sequence).
func (b *bundle) ledgerWrites(t *testing.T) uint64 {
	t.Helper()
	s, err := b.js.Stream(context.Background(), "KV_tools_effects")
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// noEffect fails t if task's attempt has a ledger entry.
func (b *bundle) noEffect(t *testing.T, task protocol.Task) {
	t.Helper()
	key := natsjs.EffectKey(task.Tool, task.TaskID, task.Attempt)
	if _, err := b.effects(t).Get(context.Background(), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("ledger entry %s: %v, want none", key, err)
	}
}

// putEffect writes the ledger entry of task's attempt, as a worker would.
func (b *bundle) putEffect(t *testing.T, task protocol.Task, e natsjs.Effect) {
	t.Helper()
	data, _ := json.Marshal(e)
	if _, err := b.effects(t).Create(context.Background(), natsjs.EffectKey(task.Tool, task.TaskID, task.Attempt), data); err != nil {
		t.Fatal(err)
	}
}

// storeResult stores res as task's result, as a worker does, and returns
// its sequence.
func (b *bundle) storeResult(t *testing.T, task protocol.Task, res protocol.Result) uint64 {
	t.Helper()
	data, _ := json.Marshal(res)
	ack, err := b.js.Publish(context.Background(), "tools.result."+task.ConversationID+"."+task.TaskID+"."+task.Tool, data,
		jetstream.WithMsgID(protocol.ResultMsgID(task.TaskID, task.Attempt)))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// The dispatcher puts the attempt's idempotency key on every task it
// publishes, in the header Offload-Idempotency-Key (SPEC §13).
func TestDispatcherSetsIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	headers := make(chan string, 1)
	b.subscribe(t, "tools.task.job", func(m *nats.Msg) { headers <- m.Header.Get(protocol.IdempotencyKeyHeader) })
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	task.Attempt = 2
	h, err := d.Dispatch(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Detach()
	if got, want := offloadtest.WaitOrTimeout(t, headers, "the task"), task.TaskID+":2"; got != want {
		t.Fatalf("%s = %q, want %q", protocol.IdempotencyKeyHeader, got, want)
	}
}

// A worker with NoEffectLedger writes no ledger entry: a task runs with
// its idempotency key and leaves the bucket empty.
func TestNoEffectLedgerWritesNoEntry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	results := b.results(t)
	l := newRunLog()
	b.worker(t, worker.Config{ID: "bare", NoEffectLedger: true, Tools: []*tool.Tool{l.tool("job")}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	if r := resultOf(t, results, task); r.Status != protocol.StatusOK {
		t.Fatalf("result %+v", r)
	}
	if got := offloadtest.WaitOrTimeout(t, l.ran, "the run"); got != task.TaskID+":0" {
		t.Fatalf("key %q", got)
	}
	if _, err := b.effects(t).Get(context.Background(), natsjs.EffectKey("job", task.TaskID, 0)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("ledger entry: %v, want none", err)
	}
}

// Two deliveries of one attempt held by one worker at once (the task
// stored twice, as a forged or repeated publish outside the duplicate
// window leaves it): the first runs the tool, the second finds the entry
// started by this worker while its tool runs here and is handed back;
// delivered again after the result is stored, it is answered from it. The
// tool runs once. Under -race this also checks that the second delivery
// reads the first's ledger hold safely (it is set under the cancel
// index's lock, which the second reads it under).
func TestTwoDeliveriesOfOneAttemptOnOneWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	results := b.results(t)
	g := jstest.NewGate()
	var runs sync.Map
	gated := tool.Func("job", "Wait for the gate.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		if _, again := runs.LoadOrStore(rc.IdempotencyKey, true); again {
			t.Errorf("attempt %s run twice", rc.IdempotencyKey)
		}
		g.Started <- rc.ToolCallID
		select {
		case <-g.Release:
			return "ran", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	data, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"first", "again"} { // two messages of one attempt
		if _, err := b.js.Publish(context.Background(), "tools.task.job", data, jetstream.WithMsgID(task.TaskID+id)); err != nil {
			t.Fatal(err)
		}
	}
	logger, busy := jstest.SignalOn("attempt running here on another delivery; handed back")
	answered := make(chan struct{}, 4)
	logger = slog.New(jstest.LogSignal{Handler: logger.Handler(), Msg: "attempt answered before: acknowledged without running", Ch: answered})
	b.worker(t, worker.Config{ID: "one", Concurrency: 2, Logger: logger, Tools: []*tool.Tool{gated}})
	offloadtest.WaitOrTimeout(t, g.Started, "the first delivery's run")
	offloadtest.WaitOrTimeout(t, busy, "the second delivery handed back while the first runs")
	g.Open()
	if r := resultOf(t, results, task); r.Status != protocol.StatusOK || r.Worker != "one" {
		t.Fatalf("result %+v, want ok by one", r)
	}
	offloadtest.WaitOrTimeout(t, answered, "the second delivery, again, answered from the stored result")
}

// A worker's started entry is what json.Marshal writes for the
// natsjs.Effect it stands for, whatever the worker's ID holds.
func TestStartedEntryIsTheEffect(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 18, 3, 56, 120_000_000, time.UTC)
	for _, id := range []string{"w", "host-4242", `a "quoted" id`, "<tags> & ü\u2028", ""} {
		for _, when := range []time.Time{at, at.Truncate(time.Second), at.Add(7)} {
			got, err := worker.StartedEntry(id, when)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(natsjs.Effect{Started: natsjs.EffectStarted{Worker: id, At: when}})
			if string(got) != string(want) {
				t.Errorf("started entry of %q at %v:\n got %s\nwant %s", id, when, got, want)
			}
		}
	}
}

package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// overlaps is a tool's record of its runs: how many ran at once, per key,
// checked at every start.
type overlaps struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	starts  []time.Time
}

func newOverlaps() *overlaps {
	return &overlaps{running: map[string]int{}, most: map[string]int{}}
}

func (o *overlaps) start(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running[key]++
	o.most[key] = max(o.most[key], o.running[key])
	o.starts = append(o.starts, time.Now())
}

func (o *overlaps) end(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running[key]--
}

// keyedTool is a tool of the given limits that records its overlaps by the
// tenant of its arguments and takes d.
func keyedTool(o *overlaps, l *limits.Limits, d time.Duration) *tool.Tool {
	type args struct {
		Tenant string `json:"tenant"`
	}
	t := tool.Func("job", "Records its overlaps.", func(ctx context.Context, _ *tool.RunContext, a args) (string, error) {
		o.start(a.Tenant)
		defer o.end(a.Tenant)
		select { // the work of a call
		case <-time.After(d):
		case <-ctx.Done():
		}
		return "done", nil
	})
	t.Limits = l
	return t
}

// max_in_flight per tenant holds across three replicas: no tenant ever
// has more than its two calls running at once, while 40 calls of two
// tenants (the tasks' tenant) run, each answered once.
func TestMaxInFlightPerKeyAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	o := newOverlaps()
	for i := range 3 {
		b.worker(t, worker.Config{ID: fmt.Sprint("r", i), Tools: []*tool.Tool{keyedTool(o, &limits.Limits{MaxInFlight: 2, Key: "tenant"}, 20*time.Millisecond)}})
	}
	conv := protocol.NewID()
	var tasks []protocol.Task
	for i := range 40 {
		task := jstest.NewTask("job", conv, fmt.Sprintf(`{"tenant":"t%d"}`, i%2)) // the tool records overlaps by it
		task.Tenant = fmt.Sprint("t", i%2)
		tasks = append(tasks, task)
		b.publishTask(t, task)
	}
	seen := map[string]int{}
	for range tasks {
		r := offloadtest.WaitOrTimeout(t, results, "a result")
		seen[r.TaskID]++
		if r.Status != protocol.StatusOK {
			t.Errorf("result %+v", r)
		}
	}
	for _, task := range tasks {
		if seen[task.TaskID] != 1 {
			t.Errorf("task %s answered %d times", task.TaskID, seen[task.TaskID])
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, n := range o.most {
		if n > 2 {
			t.Errorf("tenant %s had %d calls running at once, want at most 2", key, n)
		}
	}
}

// A rate holds across three replicas: calls offered at once start at its
// pace, one per interval (GCRA, burst 1), on whichever replica.
func TestRateAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	o := newOverlaps()
	rate := &limits.Limits{Rate: &limits.Rate{Limit: 10, Period: limits.Duration(time.Second)}}
	for i := range 3 {
		b.worker(t, worker.Config{ID: fmt.Sprint("r", i), Tools: []*tool.Tool{keyedTool(o, rate, 0)}})
	}
	conv := protocol.NewID()
	const n = 8
	for range n {
		b.publishTask(t, jstest.NewTask("job", conv, `{}`))
	}
	for range n {
		offloadtest.WaitOrTimeout(t, results, "a result")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	starts := slices.Clone(o.starts)
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// Starts are decided 100 ms apart; the tool sees them a little later
	// or sooner by how long each took to reach it.
	const slack = 40 * time.Millisecond
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 100*time.Millisecond-slack {
			t.Errorf("start %d came %v after the one before, want about 100ms (10/s)", i, gap)
		}
	}
}

// The slots of a worker killed while holding them lapse with their lease:
// the next call starts on another replica, not blocked for good.
func TestSlotOfKilledWorkerLapses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	defer g.Open()
	one := &limits.Limits{MaxInFlight: 1}
	dying := g.Tool("job", "never")
	dying.Limits, dying.Idempotent = one, true
	_, proxy, _ := b.cutWorker(t, worker.Config{ID: "dies", SlotLease: time.Second, Tools: []*tool.Tool{dying}})
	first := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, first)
	offloadtest.WaitOrTimeout(t, g.Started, "the first call on the replica that dies")
	proxy.Cut()
	killed := time.Now()
	b.worker(t, worker.Config{ID: "survivor", SlotLease: time.Second, Tools: []*tool.Tool{echoLike("job", "survived", tool.Limited(one), tool.Idempotent())}})
	second := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, second)
	r := resultOf(t, results, second)
	if jstest.Content(t, r) != "survived" {
		t.Fatalf("result %+v", r)
	}
	if since := time.Since(killed); since < 900*time.Millisecond {
		t.Errorf("the second call started %v after the holder died: before its lease lapsed", since)
	}
}

// A call that waits in its queue outlives a restart of the server: it runs
// once the slot it waits for is free.
func TestQueuedCallSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, natstest.StoreDir(t.TempDir()))
	release := make(chan struct{})
	var mu sync.Mutex
	ran := map[string]int{}
	job := tool.Func("job", "Waits for release.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		mu.Lock()
		ran[rc.TaskID]++
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "done", nil
	}, tool.Limited(&limits.Limits{MaxInFlight: 1}))
	conn := natstest.Connect(t, b.srv.URL(), natstest.Reconnecting(20*time.Millisecond)...)
	b.worker(t, worker.Config{ID: "w", Conn: conn, Tools: []*tool.Tool{job}})
	conv := protocol.NewID()
	first, second := jstest.NewTask("job", conv, `{}`), jstest.NewTask("job", conv, `{}`)
	b.publishTask(t, first)
	offloadtest.Eventually(t, "the first call to start", func() bool { // the tool's start has no signal of its own here
		mu.Lock()
		defer mu.Unlock()
		return ran[first.TaskID] == 1
	})
	b.publishTask(t, second)
	offloadtest.Eventually(t, "the second call to be queued", func() bool { // parked asynchronously: polled in the stored state
		return len(b.toolState(t, "job").Queue) == 1
	})
	b.srv.Restart(t)
	close(release)
	for _, task := range []protocol.Task{first, second} {
		if r := b.storedResult(t, task, 0); r.Status != protocol.StatusOK && r.Status != protocol.StatusApprovalRequired {
			t.Errorf("task %s: result %+v", task.TaskID, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if ran[second.TaskID] != 1 {
		t.Errorf("the queued call ran %d times, want once", ran[second.TaskID])
	}
}

// A waiting call of a higher priority starts before any of a lower one,
// whatever their order of arrival; an agent's limits may lower a call's
// priority, never raise it above the tool's.
func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	job := tool.Func("job", "Runs one per release.", func(ctx context.Context, _ *tool.RunContext, a struct {
		Name string `json:"name"`
	}) (string, error) {
		mu.Lock()
		order = append(order, a.Name)
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return a.Name, nil
	}, tool.Limited(&limits.Limits{MaxInFlight: 1, Priority: 2}))
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{job}})
	conv := protocol.NewID()
	publish := func(name string, l *limits.Limits) {
		task := jstest.NewTask("job", conv, `{"name":"`+name+`"}`)
		task.Limits = l
		b.publishTask(t, task)
	}
	publish("holder", nil)
	offloadtest.Eventually(t, "the holder to start", func() bool { // its start has no signal of its own
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 1
	})
	publish("low1", &limits.Limits{Priority: 5})
	publish("low2", &limits.Limits{Priority: 5})
	publish("high", &limits.Limits{Priority: 1})                   // raised: held to the tool's 2, still before the lowered ones
	offloadtest.Eventually(t, "three calls to wait", func() bool { // parked asynchronously: polled in the stored state
		return len(b.toolState(t, "job").Queue) == 3
	})
	for range 4 {
		release <- struct{}{}
		offloadtest.WaitOrTimeout(t, results, "a result")
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[holder high low1 low2]" {
		t.Errorf("order %v", order)
	}
}

// The cost of the limits on a tool without any: nothing is read or
// written of the tool's state.
func TestNoStateForUnlimitedTool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{echoLike("job", "x")}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	b.publishTask(t, task)
	offloadtest.WaitOrTimeout(t, results, "the result")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := b.js.Stream(ctx, "KV_tools_limits")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		data, _ := json.Marshal(info.State)
		t.Errorf("an unlimited tool's call wrote its state: %s", data)
	}
}

// A tool's retry_after holds the tool's calls on every replica: once one
// replica's call is refused for 2 s and the cool-down is in force, no
// replica starts a call of the tool until the 2 s are over; the refused call runs again after them (no
// model retry counted) and every call is answered once.
func TestCoolDownHoldsEveryReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    *limits.Limits
	}{{"limited", &limits.Limits{MaxInFlight: 8}}, {"unlimited", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			results := b.results(t)
			var mu sync.Mutex
			var refusedAt time.Time
			var starts []time.Time
			var retries []int
			job := tool.Func("job", "Refused once for 2s.", func(ctx context.Context, rc *tool.RunContext, a struct {
				N int `json:"n"`
			}) (string, error) {
				mu.Lock()
				now := time.Now()
				starts, retries = append(starts, now), append(retries, rc.Retry)
				first := refusedAt.IsZero() && a.N == 0
				if first {
					refusedAt = now
				}
				mu.Unlock()
				if first {
					return "", tool.RetryAfter(2 * time.Second)
				}
				select { // the work of a call
				case <-time.After(5 * time.Millisecond):
				case <-ctx.Done():
				}
				return "done", nil
			}, tool.Limited(tc.l))
			for i := range 3 {
				b.worker(t, worker.Config{ID: fmt.Sprint("r", i), Tools: []*tool.Tool{job}})
			}
			conv := protocol.NewID()
			first := jstest.NewTask("job", conv, `{"n":0}`)
			b.publishTask(t, first)
			// The cool-down is in force once stored and the tool's task
			// consumer paused: polled, as the server keeps them.
			offloadtest.Eventually(t, "the cool-down in force", func() bool {
				info, err := b.taskConsumer(t, "job").Info(context.Background())
				cool, _ := b.toolState(t, "job").CoolUntil(time.Now())
				return err == nil && info.Paused && !cool.IsZero()
			})
			tasks := []protocol.Task{first}
			for i := 1; i <= 30; i++ {
				task := jstest.NewTask("job", conv, fmt.Sprintf(`{"n":%d}`, i))
				tasks = append(tasks, task)
				b.publishTask(t, task)
			}
			seen := map[string]int{}
			for range tasks {
				r := offloadtest.WaitOrTimeout(t, results, "a result")
				seen[r.TaskID]++
				if r.Status != protocol.StatusOK {
					t.Errorf("result %+v", r)
				}
			}
			for _, task := range tasks {
				if seen[task.TaskID] != 1 {
					t.Errorf("task %s answered %d times", task.TaskID, seen[task.TaskID])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(starts) != len(tasks)+1 {
				t.Errorf("%d starts, want %d (each call once, the refused one twice)", len(starts), len(tasks)+1)
			}
			for i, s := range starts {
				if s.After(refusedAt) && s.Before(refusedAt.Add(2*time.Second)) {
					t.Errorf("a call started %v after the refusal, within its 2s cool-down", s.Sub(refusedAt))
				}
				if retries[i] != 0 {
					t.Errorf("start %d counted retry %d of the model", i, retries[i])
				}
			}
		})
	}
}

// Fairness between tenants holds across replicas: while one tenant floods
// the tool with ten times the other's calls, the other's calls are not
// pushed behind the flood but share the tool by their weights (1:1 here):
// its k-th call starts among the first 2(k+1)+1 of the calls that waited,
// whichever replica starts it.
func TestFairnessAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	var mu sync.Mutex
	var order []string
	release := make(chan struct{})
	job := tool.Func("job", "Records the order of its starts.", func(ctx context.Context, _ *tool.RunContext, a struct {
		Tenant string `json:"tenant"`
	}) (string, error) {
		mu.Lock()
		order = append(order, a.Tenant)
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "done", nil
	}, tool.Limited(&limits.Limits{MaxInFlight: 1, Fairness: &limits.Fairness{Key: limits.KeyTenant}}))
	for i := range 3 {
		b.worker(t, worker.Config{ID: fmt.Sprint("r", i), Tools: []*tool.Tool{job}})
	}
	conv := protocol.NewID()
	publish := func(tenant string) {
		task := jstest.NewTask("job", conv, `{"tenant":"`+tenant+`"}`)
		task.Tenant = tenant
		b.publishTask(t, task)
	}
	publish("holder")                                              // holds the only slot while the others queue
	offloadtest.Eventually(t, "the holder to start", func() bool { // its start has no signal of its own
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 1
	})
	const flood, other = 40, 4
	for range flood {
		publish("flood")
	}
	for range other {
		publish("other")
	}
	offloadtest.Eventually(t, "every call queued", func() bool { // parked asynchronously: polled in the stored state
		return len(b.toolState(t, "job").Queue) == flood+other
	})
	for range 1 + flood + other {
		release <- struct{}{}
		offloadtest.WaitOrTimeout(t, results, "a result")
	}
	mu.Lock()
	defer mu.Unlock()
	k := 0
	for i, tenant := range order[1:] {
		if tenant != "other" {
			continue
		}
		if i >= 2*(k+1)+1 {
			t.Errorf("call %d of the other tenant started at %d of the queue, behind the flood: %v", k, i, order[1:])
		}
		k++
	}
	if k != other {
		t.Errorf("%d calls of the other tenant ran, want %d", k, other)
	}
}

// A write of a tool's state after which a waiting call may start wakes
// the tool's pump, from any writer: here the operator's resume, which no
// worker made, starts the call the pause held, though the pump would not
// look at its queue unwoken for an hour.
func TestStateWriteWakesPump(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	job := echoLike("job", "done", tool.Limited(&limits.Limits{MaxInFlight: 1}))
	w, err := worker.New(worker.Config{Conn: b.srv.Conn(t), ID: "w", Tools: []*tool.Tool{job}, AckWait: jstest.AckWait,
		Logger: jstest.Logger().With("test", t.Name())})
	if err != nil {
		t.Fatal(err)
	}
	worker.SetPumpLook(w, time.Hour)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := w.StopAndCancel(ctx); err != nil {
			t.Error(err)
		}
	})
	kv, err := b.js.KeyValue(ctx, "tools_limits")
	if err != nil {
		t.Fatal(err)
	}
	paused, _ := json.Marshal(limits.State{Pause: &limits.Pause{By: "op", At: time.Now()}})
	rev, err := kv.Create(ctx, natsjs.LimitsKey("job"), paused)
	if err != nil {
		t.Fatal(err)
	}
	b.publishTask(t, jstest.NewTask("job", protocol.NewID(), `{}`))
	offloadtest.Eventually(t, "the call to wait in the queue", func() bool { // parked asynchronously: polled in the stored state
		return len(b.toolState(t, "job").Queue) == 1
	})
	e, err := kv.Get(ctx, natsjs.LimitsKey("job"))
	if err != nil {
		t.Fatal(err)
	}
	var st limits.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	st.Pause = nil
	resumed, _ := json.Marshal(&st)
	if _, err := kv.Update(ctx, natsjs.LimitsKey("job"), resumed, e.Revision()); err != nil {
		t.Fatalf("resume (the state at %d, created at %d): %v", e.Revision(), rev, err)
	}
	res := offloadtest.WaitOrTimeout(t, results, "the call's result once resumed")
	if res.Status != protocol.StatusOK {
		t.Errorf("result %+v", res)
	}
}

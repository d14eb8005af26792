package toolctl_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/toolctl"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

const wait = 20 * time.Second

// fleet is a server with the default streams, a Control and what its tests
// watch.
type fleet struct {
	srv *natstest.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	ctl *toolctl.Control
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	srv := natstest.Start(t)
	nc := srv.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	jstest.MustProvision(t, js)
	ctl, err := toolctl.New(toolctl.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{srv: srv, nc: nc, js: js, ctl: ctl}
}

func (f *fleet) publish(t *testing.T, task protocol.Task) {
	t.Helper()
	data, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(protocol.Subjects{}.Task(task.Tool))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, protocol.TaskMsgID(task.TaskID, task.Attempt))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := f.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// runs is a tool's record of the calls it ran, by task.
type runs struct {
	mu  sync.Mutex
	ran map[string]int
}

func (r *runs) count(task string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ran[task]
}

func (r *runs) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.ran {
		n += v
	}
	return n
}

func countingTool(r *runs, l *limits.Limits) *tool.Tool {
	r.ran = map[string]int{}
	return tool.Func("job", "Counts its runs.", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		r.mu.Lock()
		r.ran[rc.TaskID]++
		r.mu.Unlock()
		return "done", nil
	}, tool.Limited(l))
}

func (f *fleet) toolOf(t *testing.T, name string) toolctl.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	list, err := f.ctl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range list {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("tool %s not listed: %+v", name, list)
	return toolctl.Tool{}
}

// A paused tool holds every new call on every replica, limited or not:
// each waits in its queue, reported queued ("paused"), none runs; resumed,
// each runs once and is answered once.
func TestPauseResumeAcrossReplicas(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    *limits.Limits
	}{{"limited", &limits.Limits{MaxInFlight: 4}}, {"unlimited", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t)
			results := jstest.SubscribeResults(t, f.nc)
			var r runs
			job := countingTool(&r, tc.l)
			for i := range 3 {
				jstest.StartWorker(t, f.srv, worker.Config{ID: fmt.Sprint("r", i), Tools: []*tool.Tool{job}})
			}
			ctx := context.Background()
			if err := f.ctl.Pause(ctx, "job", time.Time{}, "ops@example"); err != nil {
				t.Fatal(err)
			}
			progress := make(chan protocol.Progress, 64)
			sub, err := f.nc.Subscribe("tools.progress.>", func(m *nats.Msg) {
				if p, err := protocol.DecodeProgress(m.Data, "", nil); err == nil {
					progress <- p
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			conv := protocol.NewID()
			var tasks []protocol.Task
			for range 12 {
				task := jstest.NewTask("job", conv, `{}`)
				tasks = append(tasks, task)
				f.publish(t, task)
			}
			offloadtest.Eventually(t, "the 12 calls queued", func() bool { // parked asynchronously: polled in the listing
				tl := f.toolOf(t, "job")
				return tl.Queued == 12 && tl.Paused != nil && tl.Paused.By == "ops@example"
			})
			p := offloadtest.WaitOrTimeout(t, progress, "a queued report")
			if p.Queued == nil || p.Queued.Reason != limits.ReasonPaused || !strings.HasPrefix(p.Message, "queued: tool job paused") {
				t.Errorf("progress %+v", p)
			}
			if n := r.total(); n != 0 {
				t.Fatalf("%d calls ran while the tool was paused", n)
			}
			if err := f.ctl.Resume(ctx, "job", "ops@example"); err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for range tasks {
				res := offloadtest.WaitOrTimeout(t, results, "a result")
				seen[res.TaskID]++
				if res.Status != protocol.StatusOK {
					t.Errorf("result %+v", res)
				}
			}
			for _, task := range tasks {
				if seen[task.TaskID] != 1 || r.count(task.TaskID) != 1 {
					t.Errorf("task %s answered %d times, ran %d times; want once each", task.TaskID, seen[task.TaskID], r.count(task.TaskID))
				}
			}
			audit := f.audited(t, "job", 2)
			if audit[0].Action != "pause" || audit[1].Action != "resume" || audit[1].By != "ops@example" {
				t.Errorf("audit %+v", audit)
			}
		})
	}
}

// audited returns the first n audit records of toolName.
func (f *fleet) audited(t *testing.T, toolName string, n int) []toolctl.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := f.js.OrderedConsumer(ctx, "TOOLS_AUDIT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{natsjs.AuditSubject("", toolName)}})
	if err != nil {
		t.Fatal(err)
	}
	var out []toolctl.Record
	for len(out) < n {
		m, err := c.Next(jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatalf("audit record %d: %v", len(out), err)
		}
		var r toolctl.Record
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// deadLettersMetric is the head of offload_dead_letters's exposition.
const deadLettersMetric = `# HELP offload_dead_letters Number of calls kept as dead letters (their deliveries exhausted), by tool.
# TYPE offload_dead_letters gauge
`

// exhaust publishes tasks and hands their first deliveries back, so that
// a worker of delivery limit 1 finds their deliveries exhausted.
func (f *fleet) exhaust(t *testing.T, tasks ...protocol.Task) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := natsjs.EnsureTaskConsumer(ctx, f.js, tasks[0].Tool, natsjs.ProvisionOptions{AckWait: jstest.AckWait, MaxDeliver: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		f.publish(t, task)
	}
	batch, err := c.Fetch(len(tasks), jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	if n != len(tasks) {
		t.Fatalf("%d deliveries fetched, want %d", n, len(tasks))
	}
}

// A call whose deliveries were exhausted is kept as a dead letter, listed
// with why; replayed, it runs once as a new attempt and its letter is
// gone; another, discarded, never runs. Each action is audited.
func TestDeadLetterReplayRunsOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	results := jstest.SubscribeResults(t, f.nc)
	conv := protocol.NewID()
	replayed, discarded := jstest.NewTask("job", conv, `{}`), jstest.NewTask("job", conv, `{}`)
	f.exhaust(t, replayed, discarded)
	var r runs
	jstest.StartWorker(t, f.srv, worker.Config{ID: "w", MaxDeliver: 1, Tools: []*tool.Tool{countingTool(&r, nil)}})
	for range 2 {
		if res := offloadtest.WaitOrTimeout(t, results, "a result"); res.ErrorType != protocol.ErrorDeliveriesExhausted {
			t.Fatalf("result %+v, want DeliveriesExhausted", res)
		}
	}
	ctx := context.Background()
	letters, err := f.ctl.DeadLetters(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	byTask := map[string]toolctl.DeadLetter{} // kept in the order their deliveries ran out
	for _, l := range letters {
		byTask[l.Task] = l
	}
	replayLetter, discardLetter := byTask[replayed.TaskID], byTask[discarded.TaskID]
	if len(letters) != 2 || replayLetter.Reason != protocol.ErrorDeliveriesExhausted || replayLetter.Worker != "w" ||
		replayLetter.Conversation != conv || discardLetter.Seq == 0 {
		t.Fatalf("dead letters %+v", letters)
	}
	if tl := f.toolOf(t, "job"); tl.DeadLetters != 2 {
		t.Errorf("listed with %d dead letters, want 2", tl.DeadLetters)
	}
	dead := toolctl.NewDeadLetters(f.ctl) // offload_dead_letters{tool}
	if err := testutil.CollectAndCompare(dead, strings.NewReader(deadLettersMetric+`offload_dead_letters{tool="job"} 2
`)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(dead); err != nil || len(problems) > 0 {
		t.Errorf("offload_dead_letters lint: %v %v", problems, err)
	}
	if err := f.ctl.Discard(ctx, "job", discardLetter.Seq, "ops@example"); err != nil {
		t.Fatal(err)
	}
	task, err := f.ctl.Replay(ctx, "job", replayLetter.Seq, "ops@example")
	if err != nil {
		t.Fatal(err)
	}
	if task.TaskID != replayed.TaskID || task.Attempt != replayed.Attempt+1 {
		t.Errorf("replayed %s attempt %d", task.TaskID, task.Attempt)
	}
	res := offloadtest.WaitOrTimeout(t, results, "the replay's result")
	if res.TaskID != replayed.TaskID || res.Status != protocol.StatusOK || res.Attempt != task.Attempt {
		t.Errorf("replay's result %+v", res)
	}
	if _, err := f.ctl.Replay(ctx, "job", replayLetter.Seq, "ops@example"); !errors.Is(err, toolctl.ErrNoDeadLetter) {
		t.Errorf("a second replay: %v, want ErrNoDeadLetter", err)
	}
	if left, err := f.ctl.DeadLetters(ctx, "job"); err != nil || len(left) != 0 {
		t.Errorf("dead letters left %+v (%v)", left, err)
	}
	if n := testutil.CollectAndCount(dead); n != 0 {
		t.Errorf("offload_dead_letters has %d series once none is kept, want none", n)
	}
	// The worker's delivery limit is 1: a wait on a signal that never
	// comes for the discarded task, bounded by the replay's result above.
	if r.count(replayed.TaskID) != 1 || r.count(discarded.TaskID) != 0 {
		t.Errorf("runs: replayed %d, discarded %d; want 1 and 0", r.count(replayed.TaskID), r.count(discarded.TaskID))
	}
	audit := f.audited(t, "job", 2)
	if audit[0].Action != "discard" || audit[1].Action != "replay" || !strings.Contains(audit[1].Detail, replayed.TaskID) {
		t.Errorf("audit %+v", audit)
	}
}

// The calls held in a paused tool's queue that a filter selects are
// cancelled: answered cancelled at once without running, whatever holds
// the tool; the others keep waiting. An action without who takes it is
// refused.
func TestCancelByFilter(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	results := jstest.SubscribeResults(t, f.nc)
	var r runs
	jstest.StartWorker(t, f.srv, worker.Config{ID: "w", Tools: []*tool.Tool{countingTool(&r, &limits.Limits{MaxInFlight: 1})}})
	ctx := context.Background()
	if err := f.ctl.Pause(ctx, "job", time.Now().Add(time.Hour), "ops@example"); err != nil {
		t.Fatal(err)
	}
	conv := protocol.NewID()
	byTenant := map[string][]protocol.Task{}
	for i := range 6 {
		task := jstest.NewTask("job", conv, `{}`)
		task.Tenant = []string{"acme", "other"}[i%2]
		byTenant[task.Tenant] = append(byTenant[task.Tenant], task)
		f.publish(t, task)
	}
	offloadtest.Eventually(t, "the 6 calls queued", func() bool { // parked asynchronously: polled in the listing
		return f.toolOf(t, "job").Queued == 6
	})
	if _, err := f.ctl.Cancel(ctx, toolctl.Filter{Tool: "job", Tenant: "acme"}, ""); !errors.Is(err, toolctl.ErrNoBy) {
		t.Errorf("a cancel by nobody: %v", err)
	}
	got, err := f.ctl.Cancel(ctx, toolctl.Filter{Tool: "job", Tenant: "acme"}, "ops@example")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Errorf("cancelled %+v, want acme's 3", got)
	}
	want := map[string]bool{}
	for _, task := range byTenant["acme"] {
		want[task.TaskID] = true
	}
	for range 3 {
		res := offloadtest.WaitOrTimeout(t, results, "a cancelled result")
		if !want[res.TaskID] || res.Status != protocol.StatusCancelled {
			t.Errorf("result %+v, want one of acme's cancelled", res)
		}
	}
	offloadtest.Eventually(t, "the cancelled calls gone from the queue", func() bool { // removed after their results: no signal
		return f.toolOf(t, "job").Queued == 3
	})
	if n := r.total(); n != 0 {
		t.Errorf("%d calls ran", n)
	}
}

package convstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

func TestInboxCollect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, am := b.inbox(t)
	ctx := context.Background()
	conv := protocol.NewID()
	approval, approval2, bg, ext := protocol.NewID(), protocol.NewID(), protocol.NewID(), protocol.NewID()
	st := &conversation.State{ID: conv, Pending: &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{
		{TaskID: approval, Kind: deferred.KindApproval, Tool: "shell"},
		{TaskID: approval2, Kind: deferred.KindApproval, Tool: "shell"},
		{TaskID: bg, Kind: deferred.KindBackground, Tool: "research"},
		{TaskID: ext, Kind: deferred.KindExternal, Tool: "ask_human"},
	}}}
	s := protocol.Subjects{}
	pub := func(subject, data string) {
		t.Helper()
		if _, err := b.js.Publish(ctx, subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	pub(s.Decision(conv, approval), `{"approved":true,"by":"ann"}`)
	pub(s.Decision(conv, approval), `{"approved":false}`)             // second: duplicate
	pub(s.Decision(conv, protocol.NewID()), `{"approved":true}`)      // unknown task
	pub(s.Decision(conv, approval2), `{not json`)                     // malformed
	pub(s.Decision(conv, approval2), `{"approved":"yes"}`)            // non-boolean: malformed
	pub(s.Decision(conv, bg), `{"approved":true}`)                    // a background task: wrong kind
	pub(s.Decision(protocol.NewID(), approval2), `{"approved":true}`) // another conversation: not read
	pub(s.Answer(conv, ext), `{"status":"cancelled"}`)                // not an answer's status: malformed
	pub(s.Answer(conv, ext), `{"content":"42"}`)                      // the external call's answer
	pub(s.Answer(conv, approval2), `{"content":"forged"}`)            // an answer for an approval: wrong kind
	pub(s.Result(conv, bg, "shell"), `{"content":"forged"}`)          // another tool's worker: wrong tool
	pub(s.Result(conv, bg, "research"), `{"content":"found"}`)        // the background outcome
	pub(s.Result(conv, approval2, "shell"), `{"content":"forged"}`)   // a result for an approval: wrong kind

	n, err := in.Collect(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || len(st.Arrivals) != 3 || st.Arrivals[0].TaskID != approval || st.Arrivals[0].Kind != conversation.ArrivalDecision ||
		st.Arrivals[1].TaskID != ext || st.Arrivals[1].Kind != conversation.ArrivalAnswer ||
		st.Arrivals[2].TaskID != bg || st.Arrivals[2].Kind != conversation.ArrivalResult || string(st.Arrivals[2].Data) != `{"content":"found"}` {
		t.Fatalf("arrivals %+v", st.Arrivals)
	}
	for reason, want := range map[metrics.RefuseReason]float64{
		metrics.RefuseDuplicate: 1, metrics.RefuseUnknownTask: 1, metrics.RefuseMalformed: 3, metrics.RefuseWrongKind: 3,
		metrics.RefuseWrongTool: 1,
	} {
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(reason))); got != want {
			t.Errorf("refused{%s} = %v, want %v", reason, got, want)
		}
	}
	// From the checkpoint on: nothing is read twice; a later decision is.
	if n, err := in.Collect(ctx, st); err != nil || n != 0 {
		t.Fatalf("second collect: %d, %v", n, err)
	}
	pub(s.Decision(conv, approval2), `{"approved":false,"message":"no"}`)
	if n, err := in.Collect(ctx, st); err != nil || n != 1 || st.Arrivals[3].TaskID != approval2 {
		t.Fatalf("third collect: %d, %v, %+v", n, err, st.Arrivals)
	}
	if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseDuplicate))); got != 1 {
		t.Errorf("a re-read counted again: duplicate = %v", got)
	}
}

// Only an answer settles an external call (issue 30, finding 4): a
// result on the results subject for a pending external call, as a worker
// that knows the task's ID could publish it, is refused as wrong_kind and
// counted; the person's answer then settles the call.
func TestInboxRefusesResultForExternalCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, am := b.inbox(t)
	ctx := context.Background()
	conv, ext := protocol.NewID(), protocol.NewID()
	st := &conversation.State{ID: conv, Pending: &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{
		{TaskID: ext, Kind: deferred.KindExternal, Tool: "ask_human"},
	}}}
	s := protocol.Subjects{}
	pub := func(subject, data string) {
		t.Helper()
		if _, err := b.js.Publish(ctx, subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	pub(s.Result(conv, ext, "ask_human"), `{"content":"forged by a worker","worker":"rogue"}`)
	if n, err := in.Collect(ctx, st); err != nil || n != 0 || len(st.Arrivals) != 0 {
		t.Fatalf("collect: %d, %v, %+v: want the result refused", n, err, st.Arrivals)
	}
	if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseWrongKind))); got != 1 {
		t.Errorf("refused{wrong_kind} = %v, want 1", got)
	}
	pub(s.Answer(conv, ext), `{"content":"42"}`)
	if n, err := in.Collect(ctx, st); err != nil || n != 1 || st.Arrivals[0].Kind != conversation.ArrivalAnswer || string(st.Arrivals[0].Data) != `{"content":"42"}` {
		t.Fatalf("collect: %d, %v, %+v: want the answer", n, err, st.Arrivals)
	}
}

// The results stream also carries the results of inline calls, consumed
// live by the run that made them, and the deferrals by which calls became
// pending: neither is an arrival, and neither is counted as refused.
func TestInboxSkipsResultsNotForIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, am := b.inbox(t)
	ctx := context.Background()
	conv, approval, bg := protocol.NewID(), protocol.NewID(), protocol.NewID()
	st := &conversation.State{ID: conv, Settled: []string{bg}, Pending: &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{
		{TaskID: approval, Kind: deferred.KindApproval, Tool: "shell"},
	}}}
	s := protocol.Subjects{}
	for _, m := range []struct{ subject, data string }{
		{s.Result(conv, protocol.NewID(), "research"), `{"content":"an inline call's"}`},
		{s.Result(conv, approval, "shell"), `{"status":"approval_required"}`},
		{s.Result(conv, bg, "research"), `{"content":"again"}`}, // settled: a duplicate
	} {
		if _, err := b.js.Publish(ctx, m.subject, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := in.Collect(ctx, st); err != nil || n != 0 {
		t.Fatalf("collect: %d, %v", n, err)
	}
	for _, r := range metrics.RefuseReasons() {
		want := 0.0
		if r == metrics.RefuseDuplicate {
			want = 1
		}
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(r))); got != want {
			t.Errorf("refused{%s} = %v, want %v", r, got, want)
		}
	}
}

// A read that no server answered is tried again from the last message
// read: every arrival is collected once, and the run goes on.
func TestInboxRetriesNoResponders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	ctx := context.Background()
	st, tasks := b.withResults(t, 3, "found")
	var logs offloadtest.Output
	in, err := convstore.NewInbox(convstore.InboxConfig{JetStream: b.js, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// A message per read. Decisions and answers take one read each
	// (nothing stored); the results' first read fails, the next reads the
	// first, the one after fails, the next two read the others (the last
	// batch saying none is left).
	convstore.SetBatchSize(in, 1)
	calls := convstore.FailGets(in, natsjs.NamesFor("").Results, map[int]error{1: nats.ErrNoResponders, 3: nats.ErrNoResponders})
	n, err := in.Collect(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(tasks) || len(st.Arrivals) != len(tasks) {
		t.Fatalf("collected %d arrivals %+v, want %d", n, st.Arrivals, len(tasks))
	}
	for i, a := range st.Arrivals {
		if a.TaskID != tasks[i] || a.Kind != conversation.ArrivalResult {
			t.Errorf("arrival %d = %+v, want the result of %s", i, a, tasks[i])
		}
	}
	if got := calls(); got != 7 {
		t.Errorf("%d reads, want 7", got)
	}
	if got := strings.Count(logs.String(), "inbox: no stream answered; retrying"); got != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", got, logs.String())
	}
	if st.Checkpoint.Results == 0 {
		t.Error("the results checkpoint did not move")
	}
}

// withResults returns the state of a new conversation waiting for n
// background calls of research, each with its result (content as given)
// stored, and their task IDs in order.
func (b *bundle) withResults(t *testing.T, n int, content string) (*conversation.State, []string) {
	t.Helper()
	conv := protocol.NewID()
	st := &conversation.State{ID: conv, Pending: &deferred.PendingRecord{ConversationID: conv}}
	s := protocol.Subjects{}
	var tasks []string
	for range n {
		task := protocol.NewID()
		tasks = append(tasks, task)
		st.Pending.Tasks = append(st.Pending.Tasks, deferred.PendingTask{TaskID: task, Kind: deferred.KindBackground, Tool: "research"})
		if _, err := b.js.Publish(t.Context(), s.Result(conv, task, "research"), []byte(`{"content":"`+content+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	return st, tasks
}

// Collect reads a stream by batches of messages: 150 small results in
// three reads (64 a batch), 50 results of 100 KiB in two (a batch stops
// past 4 MiB), each collected once, in order.
func TestInboxCollectsByBatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n, size, reads int
	}{{150, 16, 3}, {50, 100 << 10, 2}} {
		b := setup(t)
		in, _ := b.inbox(t)
		ctx := context.Background()
		st, tasks := b.withResults(t, c.n, strings.Repeat("x", c.size))
		results := natsjs.NamesFor("").Results
		var mu sync.Mutex
		reads := 0
		convstore.OnRead(in, func(stream string) {
			if stream == results {
				mu.Lock()
				reads++
				mu.Unlock()
			}
		})
		n, err := in.Collect(ctx, st)
		if err != nil || n != c.n {
			t.Fatalf("%d results of %d B: collected %d (%v)", c.n, c.size, n, err)
		}
		for i, a := range st.Arrivals {
			if a.TaskID != tasks[i] {
				t.Fatalf("arrival %d is %s, want %s", i, a.TaskID, tasks[i])
			}
		}
		if reads != c.reads {
			t.Errorf("%d results of %d B read in %d requests, want %d", c.n, c.size, reads, c.reads)
		}
	}
}

// Collect reads the three streams at once: when the decisions cannot be
// read, it fails, having moved no checkpoint, and leaves no read of the
// other streams behind (the package's leak check), however far ahead they
// read.
func TestInboxCollectFailsWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, _ := b.inbox(t)
	ctx := context.Background()
	st, _ := b.withResults(t, 5, "found")
	// A message per read; the decisions fail once the results' read has
	// read two messages, one handed over, one waiting to be.
	convstore.SetBatchSize(in, 1)
	broken := errors.New("the decisions cannot be read")
	convstore.FailFirstGetAfter(in, natsjs.NamesFor("").Decisions, broken, natsjs.NamesFor("").Results, 2)
	if _, err := in.Collect(ctx, st); !errors.Is(err, broken) {
		t.Fatalf("Collect: %v, want %v", err, broken)
	}
	if st.Checkpoint != (conversation.Checkpoint{}) || len(st.Arrivals) != 0 {
		t.Fatalf("checkpoint %+v, arrivals %+v after a failed collect, want none moved", st.Checkpoint, st.Arrivals)
	}
}

// CollectDecisions reads the decisions alone: answers and results are
// neither read nor refused, and their checkpoints stay.
func TestInboxCollectDecisions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, am := b.inbox(t)
	ctx := context.Background()
	conv, approval, other := protocol.NewID(), protocol.NewID(), protocol.NewID()
	st := &conversation.State{ID: conv, Pending: &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{
		{TaskID: approval, Kind: deferred.KindApproval, Tool: "shell"},
	}}}
	s := protocol.Subjects{}
	for _, m := range []struct{ subject, data string }{
		{s.Answer(conv, other), `{"content":"for another step"}`},
		{s.Result(conv, approval, "shell"), `{"content":"forged"}`},
		{s.Decision(conv, approval), `{"approved":true}`},
	} {
		if _, err := b.js.Publish(ctx, m.subject, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := in.CollectDecisions(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if len(st.Arrivals) != 1 || st.Arrivals[0].Kind != conversation.ArrivalDecision || st.Arrivals[0].TaskID != approval {
		t.Fatalf("arrivals %+v, want the decision alone", st.Arrivals)
	}
	if st.Checkpoint.Decisions == 0 || st.Checkpoint.Answers != 0 || st.Checkpoint.Results != 0 {
		t.Errorf("checkpoint %+v, want the decisions' alone moved", st.Checkpoint)
	}
	for _, r := range metrics.RefuseReasons() {
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(r))); got != 0 {
			t.Errorf("refused{%s} = %v, want 0", r, got)
		}
	}
}

// The first result of a task settled live is the one its run consumed:
// skipped quietly, once; a second is a duplicate.
func TestInboxSkipsResultConsumedLive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, am := b.inbox(t)
	ctx := context.Background()
	conv, live := protocol.NewID(), protocol.NewID()
	st := &conversation.State{ID: conv, Settled: []string{live}, SettledLive: []string{live}}
	s := protocol.Subjects{}
	pub := func(data string) {
		t.Helper()
		if _, err := b.js.Publish(ctx, s.Result(conv, live, "research"), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	pub(`{"status":"approval_required"}`) // how it became pending
	pub(`{"content":"consumed live"}`)
	if n, err := in.Collect(ctx, st); err != nil || n != 0 {
		t.Fatalf("collect: %d, %v", n, err)
	}
	duplicates := func() float64 {
		return testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseDuplicate)))
	}
	if got := duplicates(); got != 0 || len(st.SettledLive) != 0 {
		t.Fatalf("duplicates %v, settled live %v: the consumed result was refused or not taken", got, st.SettledLive)
	}
	pub(`{"content":"again"}`)
	if n, err := in.Collect(ctx, st); err != nil || n != 0 || duplicates() != 1 {
		t.Fatalf("second result: %d, %v, duplicates %v", n, err, duplicates())
	}
}

// Watch signals when a message of a watched kind is stored for the
// conversation, so that a waiting run reads it at once.
func TestInboxWatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, _ := b.inbox(t)
	ctx := context.Background()
	if _, _, err := in.Watch(ctx, protocol.NewID(), "verdict"); err == nil {
		t.Error("watching an unknown kind")
	}
	conv := protocol.NewID()
	signal, stop, err := in.Watch(ctx, conv, conversation.ArrivalDecision, conversation.ArrivalAnswer)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := protocol.Subjects{}
	for _, subject := range []string{s.Decision(conv, protocol.NewID()), s.Answer(conv, protocol.NewID())} {
		if _, err := b.js.Publish(ctx, subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitOrTimeout(t, signal, "a signal for "+subject)
	}
	stop()
	stop() // twice is harmless
}

package serve_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// A run started on one replica pauses on an approval; the decision,
// published as nats pub would, wakes the conversation: it is continued on
// one replica, with one continuation model request and the tool run once.
func TestWakeOnDecision(t *testing.T) {
	b := servetest.Setup(t)
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	if c, err := r2.Svc.Get(context.Background(), f.ConversationID); err != nil || c.Status != "paused" || c.Agent != "ops" || len(c.Pending) != 1 {
		t.Fatalf("paused conversation: %+v, %v", c, err)
	}
	b.Decide(t, r2.JS, f.ConversationID, task)
	if got := offloadtest.WaitOrTimeout(t, b.Finished, "the continuation's model request"); got != "prod" {
		t.Fatalf("continued %s", got)
	}
	servetest.Finished(t, r1, f.ConversationID, "done deployed prod")
	if c, d := b.Counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}
	if n := r1.Wakes(t) + r2.Wakes(t); n != 1 {
		t.Errorf("offload_wake_seconds observed %d wakes, want 1", n)
	}
	// A raw publish's decision is recorded with the channel nats (SPEC §12).
	st, err := r1.Convs.Load(context.Background(), f.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(st.History); !strings.Contains(string(raw), `"channel":"nats"`) {
		t.Errorf("the history's decision has no channel nats: %s", raw)
	}
}

// A decision published while no replica runs is applied when one starts.
func TestWakeAfterNoReplicaRan(t *testing.T) {
	b := servetest.Setup(t)
	r1 := b.Replica(t, "r1")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	r1.Close(t)
	b.Decide(t, r1.JS, f.ConversationID, task)
	r2 := b.Replica(t, "r2")
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation's model request")
	servetest.Finished(t, r2, f.ConversationID, "done deployed prod")
	if c, d := b.Counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}
}

// A replica that lacks the conversation's agent does not continue it and
// says so; one that has it does.
func TestWakeMissingAgent(t *testing.T) {
	b := servetest.Setup(t)
	r1 := b.Replica(t, "r1")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	r1.Close(t)
	other := b.Replica(t, "other", "billing")
	c, err := other.Svc.Get(context.Background(), f.ConversationID)
	if err != nil || c.Note == "" {
		t.Fatalf("view on a replica without the agent: %+v, %v", c, err)
	}
	b.Decide(t, other.JS, f.ConversationID, task)
	b.Replica(t, "r2")
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation's model request")
	servetest.Finished(t, other, f.ConversationID, "done deployed prod")
}

// Close suspends a live run at its next safe point and hands the
// conversation over: another replica continues it although nothing is
// pending, once.
func TestCloseHandsOver(t *testing.T) {
	b := servetest.Setup(t)
	log, suspending := jstest.SignalOn("closing: live runs asked to suspend")
	r1, r2 := b.ReplicaLog(t, "r1", log), b.Replica(t, "r2")
	ctx := context.Background()
	run, err := r1.Svc.StartConversation(ctx, "ops", "slow job", "")
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, b.SlowStarted, "the slow tool")
	closed := make(chan error, 1)
	go func() { closed <- r1.Svc.Stop(ctx) }()
	// Close waits for the run, which waits for the tool: the run suspends
	// before its next model request.
	offloadtest.WaitOrTimeout(t, suspending, "r1 asking its runs to suspend")
	close(b.SlowGate)
	if err := offloadtest.WaitOrTimeout(t, closed, "r1 closed"); err != nil {
		t.Fatal(err)
	}
	if f := run.Final(); f.Status != "paused" {
		t.Fatalf("r1's run: %+v, want suspended", f)
	}
	if got := offloadtest.WaitOrTimeout(t, b.Finished, "the continuation on r2"); got != "job" {
		t.Fatalf("continued %s", got)
	}
	servetest.Finished(t, r2, run.ConversationID, "done slowed job")
	if c, _ := b.Counts("job"); c != 1 {
		t.Fatalf("%d continuation requests, want 1", c)
	}
}

// Exactly once under concurrent arrivals and replicas started and
// stopped at random: n conversations paused on approvals, decided all at
// once (each twice, and woken by a marker too) while replicas come and go; each is continued exactly once (one
// continuation model request, one deploy), all finish.
func TestWakeExactlyOnce(t *testing.T) {
	const n, rounds = 30, 6
	b := servetest.Setup(t)
	// Replicas leave by Close, which hands their runs over: nothing here
	// waits for a lease to lapse, and a lease long enough that a starved
	// CPU cannot let it lapse keeps a holder's run its own (a lapse would
	// rightly let another replica continue it too).
	replica := func(holder string) *servetest.Replica {
		return b.ReplicaWith(t, holder, servetest.ReplicaOpts{LeaseTTL: time.Minute})
	}
	seed := rand.Uint64() //nolint:gosec // G404: a logged seed of the test's choices, not a secret
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1)) //nolint:gosec // G404: a repeatable choice of replicas, not a secret
	first := replica("first")
	type paused struct{ conv, task, target string }
	var all []paused
	for i := range n {
		target := "t" + strconv.Itoa(i)
		f := first.Start(t, "deploy "+target)
		if f.Status != "paused" || len(f.Pending) != 1 {
			t.Fatalf("%+v", f)
		}
		all = append(all, paused{f.ConversationID, f.Pending[0].TaskID, target})
	}
	first.Close(t)
	live := []*servetest.Replica{replica("r0")}
	var wg sync.WaitGroup
	for _, p := range all {
		// The decision, and two more wake messages for the same
		// conversation: concurrent wakes of one conversation on several
		// replicas.
		wg.Go(func() { b.Decide(t, live[0].JS, p.conv, p.task) })
		wg.Go(func() { b.Decide(t, live[0].JS, p.conv, p.task) })
		wg.Go(func() { b.Marker(t, live[0].JS, p.conv) })
	}
	for i := range rounds {
		if len(live) > 1 && rng.IntN(2) == 0 {
			k := rng.IntN(len(live))
			live[k].Close(t)
			live = append(live[:k], live[k+1:]...)
		} else {
			live = append(live, replica("r"+strconv.Itoa(i+1)))
		}
	}
	wg.Wait()
	for range n {
		offloadtest.WaitOrTimeout(t, b.Finished, "a continuation")
	}
	for _, p := range all {
		servetest.Finished(t, live[0], p.conv, "done deployed "+p.target)
		if c, d := b.Counts(p.target); c != 1 || d != 1 {
			t.Errorf("%s: %d continuation requests, %d deploys; want 1 and 1", p.target, c, d)
		}
	}
}

package serve_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// heldMsg is the log of a wake that found its conversation held.
const heldMsg = "wake: the conversation is held; delivered again later"

// A decision stored while the run that paused on it ends, after its last
// read and before its lease's release (the release gated in the test),
// is continued at once: the holder's re-check after the release wakes
// the conversation, although the wake that found the lease held is
// delivered again only in 30 s (RetryDelay, and the lease's lapse),
// beyond the test's wait.
func TestArrivalWhileRunEnds(t *testing.T) {
	b := servetest.Setup(t)
	log, held := jstest.SignalOn(heldMsg)
	ending, release := make(chan string, 4), make(chan struct{})
	gated := make(chan struct{}, 1)
	gated <- struct{}{} // the first run's end only
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{Log: log, LeaseTTL: 30 * time.Second, Config: func(c *serve.Config) {
		c.RetryDelay = 30 * time.Second // the held wake's redelivery: beyond the test's wait
		c.Unfollow = func(conv string) {
			select {
			case <-gated:
				ending <- conv
				<-release
			default:
			}
		}
	}})
	ctx := context.Background()
	run, err := r.Svc.StartConversation(ctx, "ops", "deploy prod", "")
	if err != nil {
		t.Fatal(err)
	}
	conv := offloadtest.WaitOrTimeout(t, ending, "the run's end, its lease still held")
	// The run has saved its pause; it reads nothing more.
	view, err := r.Svc.Get(ctx, conv)
	if err != nil || len(view.Pending) != 1 {
		t.Fatalf("the paused conversation: %+v %v", view, err)
	}
	b.Decide(t, r.JS, conv, view.Pending[0].TaskID)
	offloadtest.WaitOrTimeout(t, held, "the decision's wake finding the lease held")
	close(release)
	<-run.Done()
	if got := offloadtest.WaitOrTimeout(t, b.Finished, "the continuation"); got != "prod" {
		t.Fatalf("continued %s", got)
	}
	servetest.Finished(t, r, conv, "done deployed prod")
	if c, d := b.Counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuations, %d deploys; want 1, 1", c, d)
	}
}

// The cost that the re-check removes: a wake message of a conversation a
// live run holds is delivered again at growing delays (RetryDelay
// doubled each time, at most until the lease would lapse), not every
// RetryDelay. k messages for a conversation whose run is live for about
// 2 s (servetest.LeaseTTL) are redelivered at most 5 times each by its end (100
// ms, 200, 400, 800, then the lease's lapse); every RetryDelay they were
// redelivered about 20 times each.
func TestHeldWakeRedeliveries(t *testing.T) {
	const k = 10
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	ctx := context.Background()
	run, err := r.Svc.StartConversation(ctx, "ops", "slow job", "")
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, b.SlowStarted, "the slow tool")
	for range k { // decisions of no pending call: woken, found held
		if _, err := r.JS.Publish(ctx, fmt.Sprintf("tools.decision.%s.%s", run.ConversationID, protocol.NewID()), []byte(`{"approved":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	hold := time.NewTimer(servetest.LeaseTTL) // the measurement's span: a live run's
	<-hold.C
	c, err := r.JS.Consumer(ctx, natsjs.NamesFor("").Decisions, natsjs.WakeConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	close(b.SlowGate)
	<-run.Done()
	offloadtest.WaitOrTimeout(t, b.Finished, "the run's end")
	deliveries := ci.Delivered.Consumer // every delivery, redeliveries included
	t.Logf("%d wake messages of a run live for %s: %d deliveries", k, servetest.LeaseTTL, deliveries)
	if deliveries > 6*k {
		t.Errorf("%d deliveries of %d messages (%d redeliveries), want at most %d", deliveries, k, deliveries-k, 6*k)
	}
}

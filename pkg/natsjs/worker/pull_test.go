package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// pullTestWait bounds every wait of pull requests test.
const pullTestWait = 15 * time.Second

// TestPullerCountsSeveralRequests checks the puller's count of the slots
// its outstanding requests hold: a task takes one, each request's expiry
// gives back what it did not get (its Nats-Pending-Messages), and what it
// cannot count is an error that makes the fetcher abandon them all.
func TestPullerCountsSeveralRequests(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := srv.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pullTestWait)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	p := newPullRequests(nc, "P", "c", 4)
	defer p.abandon()
	if err := p.request(2, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := p.request(1, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := p.request(2, time.Second); err == nil {
		t.Fatal("a request beyond the pullRequests's slots was made")
	}
	if p.held != 3 {
		t.Fatalf("held %d after requests for 2 and 1", p.held)
	}
	if _, err := js.Publish(ctx, "p.x", []byte("task")); err != nil {
		t.Fatal(err)
	}
	next := func() *nats.Msg {
		t.Helper()
		return offloadtest.WaitOrTimeoutWithin(t, p.msgs, pullTestWait, "a message from the requests")
	}
	freed, tasks := 0, 0
	for freed+tasks < 3 {
		task, n, err := p.receive(next())
		if err != nil {
			t.Fatal(err)
		}
		if task != nil {
			tasks++
			if string(task.Data()) != "task" {
				t.Fatalf("task %q", task.Data())
			}
			if err := task.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		freed += n
	}
	if tasks != 1 || freed != 2 || p.held != 0 {
		t.Fatalf("%d tasks, %d slots freed, %d held; want 1, 2, 0", tasks, freed, p.held)
	}

	// What cannot be counted is an error: a task beyond the slots asked
	// for, and an expiry without its count.
	if task, _, err := p.receive(&nats.Msg{Subject: "p.x", Reply: "$JS.ACK.P.c.1.2.2.0.0", Data: []byte("extra")}); !errors.Is(err, errUncounted) || task == nil {
		t.Fatalf("a task beyond the slots: %v, %v", task, err)
	}
	status := &nats.Msg{Subject: p.base + "9", Header: nats.Header{"Status": []string{statusTimeout}}}
	if _, _, err := p.receive(status); !errors.Is(err, errUncounted) {
		t.Fatalf("an expiry without its count: %v", err)
	}
	// A status for another subscription's request is not this one's.
	status.Subject = "_INBOX.other.1"
	if _, n, err := p.receive(status); err != nil || n != 0 {
		t.Fatalf("a foreign status: %d freed, %v", n, err)
	}
}

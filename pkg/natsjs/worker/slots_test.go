package worker

import (
	"context"
	"testing"
	"time"
)

// TestSlotPoolTryAcquire checks that a batch takes only free slots, and
// that a slot released while a fetcher waits goes to that fetcher.
func TestSlotPoolTryAcquire(t *testing.T) {
	p := newSlotPool(4)
	ctx := context.Background()
	if err := p.acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if n := p.tryAcquire(10); n != 3 {
		t.Fatalf("tryAcquire took %d slots, want the 3 free", n)
	}
	if n := p.tryAcquire(1); n != 0 {
		t.Fatalf("tryAcquire took %d slots of none free", n)
	}
	granted := make(chan error, 1)
	go func() { granted <- p.acquire(ctx, "b") }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		waiting := len(p.waiters)
		p.mu.Unlock()
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second fetcher never waited")
		}
		time.Sleep(time.Millisecond)
	}
	p.release() // to the waiter
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted the released slot")
	}
	p.release()
	p.release()
	if n := p.tryAcquire(4); n != 2 {
		t.Fatalf("tryAcquire took %d slots, want the 2 released", n)
	}
}

// TestSlotPoolWatchAndLong checks that watchers learn of a freed slot
// (not of one granted to a waiter), that pulls are long only while no
// fetcher of another tool waits, and that such a waiter preempts the long
// pulls of another tool, not of its own.
func TestSlotPoolWatchAndLong(t *testing.T) {
	p := newSlotPool(1)
	ctx := context.Background()
	w := p.watch()
	defer p.unwatch(w)
	if err := p.acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if !p.canPullLong("a") {
		t.Fatal("pull not long while nobody waits")
	}
	own := make(chan struct{})
	p.startLongPulls(func() { close(own) }, "a")
	granted := make(chan error, 1)
	go func() { granted <- p.acquire(ctx, "a") }() // same tool: no preemption
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.waiters) == 1 })
	select {
	case <-own:
		t.Fatal("a fetcher preempted its own tool's pull")
	default:
	}
	if !p.canPullLong("a") || p.canPullLong("b") {
		t.Fatal("a waiter of tool a must make b's pulls short, not a's")
	}
	p.release() // to the waiter, not to the watchers
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	select {
	case <-w:
		t.Fatal("watchers told of a slot granted to a waiter")
	default:
	}
	go func() { granted <- p.acquire(ctx, "b") }() // another tool: preempts a's
	select {
	case <-own:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter of another tool did not preempt the long pull")
	}
	p.release()
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	p.release()
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("watchers not told of a freed slot")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

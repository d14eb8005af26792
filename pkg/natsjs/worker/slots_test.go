package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// The slot pool's tests run in a synctest bubble: synctest.Wait returns
// once every goroutine of the test is blocked, so that "the second
// fetcher waits" and "nothing was told" are facts, not polls or windows.

// TestSlotPoolTryAcquire checks that a batch takes only free slots, and
// that a slot released while a fetcher waits goes to that fetcher.
func TestSlotPoolTryAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSlotPool(4)
		ctx := t.Context()
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
		synctest.Wait()
		if n := waiters(p); n != 1 {
			t.Fatalf("%d fetchers wait, want the second", n)
		}
		p.release() // to the waiter
		synctest.Wait()
		select {
		case err := <-granted:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("the waiter was not granted the released slot")
		}
		p.release()
		p.release()
		if n := p.tryAcquire(4); n != 2 {
			t.Fatalf("tryAcquire took %d slots, want the 2 released", n)
		}
	})
}

// TestSlotPoolWatchAndLong checks that watchers learn of a freed slot
// (not of one granted to a waiter), that pulls are long only while no
// fetcher of another tool waits, and that such a waiter preempts the long
// pulls of another tool, not of its own.
func TestSlotPoolWatchAndLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSlotPool(1)
		ctx := t.Context()
		w := p.watch()
		defer p.unwatch(w)
		if err := p.acquire(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if !p.canPullLong("a") {
			t.Fatal("pull not long while nobody waits")
		}
		own := make(chan struct{})
		p.startLongPulls(func() { close(own) }, "a", quietPulls(true))
		granted := make(chan error, 1)
		go func() { granted <- p.acquire(ctx, "a") }() // same tool: no preemption
		synctest.Wait()
		if n := waiters(p); n != 1 {
			t.Fatalf("%d fetchers wait, want one", n)
		}
		if closed(own) {
			t.Fatal("a fetcher preempted its own tool's pull")
		}
		if !p.canPullLong("a") || p.canPullLong("b") {
			t.Fatal("a waiter of tool a must make b's pulls short, not a's")
		}
		p.release() // to the waiter, not to the watchers
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
		if closed(w) {
			t.Fatal("watchers told of a slot granted to a waiter")
		}
		go func() { granted <- p.acquire(ctx, "b") }() // another tool: preempts a's
		synctest.Wait()
		if !closed(own) {
			t.Fatal("the waiter of another tool did not preempt the long pull")
		}
		p.release()
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
		p.release()
		if !closed(w) {
			t.Fatal("watchers not told of a freed slot")
		}
	})
}

// TestSlotPoolQueueWaiter checks that a tool's pump waiting for a slot
// does not preempt its own tool's long pull while tasks wait in the
// consumer (a cut pull may drop a task on its way, which then waits out
// its ack wait: the pump once did, and a flood's calls waited ten
// seconds), that the tool's pulls are short while it waits, so that it
// waits at most a short pull, and that it preempts a quiet one (the
// consumer drained) rather than wait for its end.
func TestSlotPoolQueueWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSlotPool(1)
		ctx := t.Context()
		if err := p.acquire(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		own := make(chan struct{})
		quiet := quietPulls(false)
		p.startLongPulls(func() { close(own) }, "a", quiet)
		granted := make(chan error, 1)
		go func() { granted <- p.acquireQueued(ctx, "a") }()
		synctest.Wait()
		if n := waiters(p); n != 1 {
			t.Fatalf("%d wait, want the pump", n)
		}
		if closed(own) {
			t.Fatal("the pump preempted its own tool's pull while tasks wait in its consumer")
		}
		if p.canPullLong("a") {
			t.Fatal("the tool's pulls are long while its pump waits for a slot")
		}
		p.release()
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
		if !p.canPullLong("a") {
			t.Fatal("the tool's pulls are short with nobody waiting")
		}
		quiet.Store(true)
		go func() { granted <- p.acquireQueued(ctx, "a") }()
		synctest.Wait()
		if !closed(own) {
			t.Fatal("the pump did not preempt its tool's quiet long pull")
		}
		p.release()
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
		p.release()
	})
}

func quietPulls(v bool) *atomic.Bool {
	var b atomic.Bool
	b.Store(v)
	return &b
}

// TestSlotPoolAcquireCancelled checks that a fetcher whose context ends
// while it waits leaves the queue, and that a slot granted to it just
// then is given back.
func TestSlotPoolAcquireCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSlotPool(1)
		if err := p.acquire(t.Context(), "a"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		granted := make(chan error, 1)
		go func() { granted <- p.acquire(ctx, "b") }()
		synctest.Wait()
		cancel()
		if err := <-granted; !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire = %v, want context.Canceled", err)
		}
		if n := waiters(p); n != 0 {
			t.Fatalf("%d fetchers wait after the cancelled one left", n)
		}
		p.release()
		if n := p.tryAcquire(1); n != 1 {
			t.Fatalf("tryAcquire took %d slots, want the one released", n)
		}
	})
}

// waiters returns how many fetchers wait for a slot.
func waiters(p *slotPool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters)
}

// closed reports whether ch is closed or holds a value (without
// blocking).
func closed[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

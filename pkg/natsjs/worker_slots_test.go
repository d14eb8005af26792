package natsjs

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

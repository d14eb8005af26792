package conversation_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/conversation/storetest"
)

// TestMemoryConformance runs the store suite against the in-memory store
// (natsjs/convstore runs it against the JetStream one).
func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		Name: "Memory",
		New: func(_ *testing.T, claimWait time.Duration) func(*testing.T) conversation.Store {
			m := conversation.NewMemory()
			m.ClaimWait = claimWait
			return func(*testing.T) conversation.Store { return m } // one process's memory
		},
	})
}

// A claim of a held conversation gives up after ClaimWait exactly
// (LeaseTTL by default), and its error says until when the lease holds
// (on synctest's clock).
func TestMemoryClaimWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		for _, c := range []struct {
			set, want time.Duration
		}{{0, conversation.LeaseTTL}, {50 * time.Millisecond, 50 * time.Millisecond}} {
			m := conversation.NewMemory()
			m.ClaimWait = c.set
			l, err := m.Claim(ctx, "c1", "a")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = m.Claim(ctx, "c1", "b")
			var ce *conversation.ClaimedError
			if !errors.As(err, &ce) || ce.Holder != "a" {
				t.Fatalf("ClaimWait %v: claim of a held conversation: %v", c.set, err)
			}
			if waited := time.Since(start); waited != c.want {
				t.Errorf("ClaimWait %v: gave up after %v, want %v", c.set, waited, c.want)
			}
			if !ce.Until.Equal(time.Now().Add(conversation.LeaseTTL)) {
				t.Errorf("ClaimWait %v: held until %v, want %v", c.set, ce.Until, time.Now().Add(conversation.LeaseTTL))
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A release wakes the waiting claim at once: no time passes between the
// release and the claim (on synctest's clock), so the wake is the
// release's, not the claim's timer.
func TestMemoryReleaseWakesClaimAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := conversation.NewMemory()
		l, err := m.Claim(ctx, "c1", "a")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			if _, err := m.Claim(ctx, "c1", "b"); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		synctest.Wait() // the claim waits
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if at := <-got; !at.Equal(released) {
			t.Fatalf("claimed %v after the release", at.Sub(released))
		}
	})
}

package convstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// ClaimLoad claims and loads from the lease a reader saw: a released
// lease is taken at the revision seen, with the state read meanwhile; a
// lease taken since is refused, and the process keeps nothing of it; a
// lease seen held is refused at once; a conversation the store lacks is
// ErrNotFound, its lease released; a lease seen lapsed is claimed, then
// loaded.
func TestClaimLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = 500 * time.Millisecond
	s := b.store(t, convstore.Config{LeaseTTL: ttl})
	other := b.store(t, convstore.Config{LeaseTTL: ttl})
	ctx := context.Background()
	id := protocol.NewID()
	if _, err := s.Save(ctx, sampleState(id, 3), 0); err != nil {
		t.Fatal(err)
	}
	// A run that paused: claimed, saved, released.
	l, err := other.TryClaim(ctx, id, "earlier run")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	seen, err := s.ReadLease(ctx, id)
	if err != nil || !seen.Released || seen.Held || seen.Seq == 0 {
		t.Fatalf("a released lease read as %+v (%v)", seen, err)
	}
	l, st, _, err := s.ClaimLoad(ctx, id, "wake", seen)
	if err != nil || len(st.History) != 3 {
		t.Fatalf("ClaimLoad of a released lease: %v, state %+v", err, st)
	}
	if held, _ := s.Held(ctx, id); !held {
		t.Fatal("the lease is not held after ClaimLoad")
	}
	var ce *conversation.ClaimedError
	if _, _, _, err := other.ClaimLoad(ctx, id, "second wake", seen); !errors.As(err, &ce) {
		t.Fatalf("ClaimLoad from a lease read before another claim: %v, want a ClaimedError", err)
	}
	if held, _ := convstore.Holdings(other); held != 0 {
		t.Fatalf("the refused claimant keeps %d conversations", held)
	}
	now, err := other.ReadLease(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := other.ClaimLoad(ctx, id, "second wake", now); !errors.As(err, &ce) || ce.Holder != "wake" {
		t.Fatalf("ClaimLoad from a lease seen held: %v, want a ClaimedError naming wake", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A conversation the store does not have.
	unknown := protocol.NewID()
	seen, err = s.ReadLease(ctx, unknown)
	if err != nil || !seen.Released || seen.Seq != 0 {
		t.Fatalf("no lease read as %+v (%v)", seen, err)
	}
	if _, _, _, err := s.ClaimLoad(ctx, unknown, "wake", seen); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("ClaimLoad of an unknown conversation: %v, want ErrNotFound", err)
	}
	if held, _ := s.Held(ctx, unknown); held {
		t.Fatal("the unknown conversation's lease was kept")
	}
	if held, _ := convstore.Holdings(s); held != 0 {
		t.Fatalf("%d conversations kept after a failed load", held)
	}

	// A lease that lapsed: its holder died without a release (its
	// connection gone).
	nc := b.srv.Conn(t)
	djs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := newConvStore(t, djs, convstore.Config{LeaseTTL: ttl}).TryClaim(ctx, id, "dead")
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	offloadtest.WaitOrTimeout(t, dead.Lost(), "the dead holder's lease to lapse")
	if seen, err = s.ReadLease(ctx, id); err != nil || seen.Held {
		t.Fatalf("a lapsed lease read as %+v (%v)", seen, err)
	}
	if seen.Released {
		t.Fatalf("a lapsed lease read as released: %+v", seen)
	}
	l, st, _, err = s.ClaimLoad(ctx, id, "wake", seen)
	if err != nil || len(st.History) != 3 {
		t.Fatalf("ClaimLoad of a lapsed lease: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

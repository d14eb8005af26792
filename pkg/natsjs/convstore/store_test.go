package convstore_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/conversation/storetest"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestConversationStoreConformance runs the store suite against the
// JetStream store (pkg/conversation runs it against the in-memory one):
// each open is another process's store over one server, and histories
// beyond 4 KiB go to the object store.
func TestConversationStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		Name: "convstore",
		New: func(t *testing.T, claimWait time.Duration) func(*testing.T) conversation.Store {
			b := setup(t)
			return func(t *testing.T) conversation.Store {
				return b.store(t, convstore.Config{MaxInline: 4 << 10, LeaseTTL: claimWait})
			}
		},
	})
}

// Only the latest large history of a conversation is kept: one object's
// chunks remain after it was saved again.
func TestConversationStoreKeepsLatestHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{MaxInline: 4 << 10}) // 200 messages go to the object store
	ctx := context.Background()
	st := sampleState(protocol.NewID(), 200)
	rev, err := s.Save(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	st.History = append(st.History, message.NewRequest(message.UserText("more")))
	if _, err := s.Save(ctx, st, rev); err != nil {
		t.Fatal(err)
	}
	names := natsjs.NamesFor("")
	stream, err := b.js.Stream(ctx, names.HistoriesStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$O."+names.HistoriesBucket+".C.>"))
	if err != nil || len(info.State.Subjects) != 1 {
		t.Fatalf("chunks of %d history objects (%v), want 1", len(info.State.Subjects), err)
	}
}

// A history larger than the server's max payload pauses and resumes: the
// store keeps it whole.
func TestConversationStoreBeyondMaxPayload(t *testing.T) {
	t.Parallel()
	b := setup(t, natstest.MaxPayload(64<<10))
	s := b.store(t, convstore.Config{})
	ctx := context.Background()
	id := protocol.NewID()
	st := sampleState(id, 2000) // about 200 KiB
	if _, err := s.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Load(ctx, id)
	if err != nil || len(got.History) != 2000 {
		t.Fatalf("%d messages, %v", len(got.History), err)
	}
}

// A holder that dies (its connection gone, no release) loses the
// conversation within one TTL; the next claimant takes it over, and the
// dead holder's lease reports the loss.
func TestConversationLeaseLapses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = 600 * time.Millisecond
	nc := b.srv.Conn(t) // closed when the holder dies
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dead := newConvStore(t, js, convstore.Config{LeaseTTL: ttl})
	next := b.store(t, convstore.Config{LeaseTTL: ttl})
	ctx := context.Background()
	id := protocol.NewID()
	ld, err := dead.Claim(ctx, id, "agent-dead")
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	lb, err := next.Claim(ctx, id, "agent-b")
	if err != nil {
		t.Fatalf("claim after the holder died: %v", err)
	}
	defer func() { _ = lb.Release(ctx) }()
	offloadtest.WaitOrTimeout(t, ld.Lost(), "the dead holder's lease to be lost")
	if err := ld.Release(ctx); err != nil {
		t.Errorf("release of a lost lease: %v", err)
	}
}

// A save made while the bucket's stream does not answer (a cluster
// electing a leader; here the stream is missing for a moment) is retried
// until it lands, within a bound.
func TestConversationStoreRetriesWhenNoStreamAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	retrying := make(chan struct{}, 1)
	s := newConvStore(t, b.js, convstore.Config{Logger: slog.New(jstest.LogSignal{Handler: slog.DiscardHandler, Msg: "conversation store: no stream answered; retrying", Ch: retrying})})
	ctx := context.Background()
	names := natsjs.NamesFor("")
	if err := b.js.DeleteStream(ctx, names.ConversationsStream); err != nil {
		t.Fatal(err)
	}
	st := sampleState(protocol.NewID(), 3)
	saved := make(chan error, 1)
	go func() {
		_, err := s.Save(ctx, st, 0)
		saved <- err
	}()
	offloadtest.WaitOrTimeout(t, retrying, "the store to retry")
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{}); err != nil { // the stream is back
		t.Fatal(err)
	}
	if err := offloadtest.WaitOrTimeout(t, saved, "the save"); err != nil {
		t.Fatalf("save: %v", err)
	}
	got, _, err := s.Load(ctx, st.ID)
	if err != nil || len(got.History) != 3 {
		t.Fatalf("load: %v", err)
	}
}

// TryClaim takes a free lease, and refuses a held one at once with the
// holder named; once released, the conversation is claimed again.
func TestTryClaim(t *testing.T) {
	b := setup(t)
	st := b.store(t, convstore.Config{})
	ctx := context.Background()
	id := protocol.NewID()
	l, err := st.TryClaim(ctx, id, "first")
	if err != nil {
		t.Fatal(err)
	}
	var ce *conversation.ClaimedError
	if _, err := st.TryClaim(ctx, id, "second"); !errors.As(err, &ce) || ce.Holder != "first" {
		t.Fatalf("a held lease: %v, want a ClaimedError naming first", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = st.TryClaim(ctx, id, "second")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	_ = l.Release(ctx)
}

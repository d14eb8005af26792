package servetest

import (
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/protocol"
)

// StoreWorld is what [StoreSuite] runs against: a store and an inbox of
// one prefix, and a way to store a decision for a conversation's task as
// a person would (on its decision subject).
type StoreWorld struct {
	Store  serve.Store
	Inbox  serve.Inbox
	Decide func(t *testing.T, conv, task string)
}

// StoreSuite holds a store and an inbox to what the core of agent serve
// relies on (serve.Store, serve.Inbox): claims without waiting, claims
// from a lease read before, the lease and the pending record read without
// a load, the status index and its watch, the cancel markers, and which
// tasks have a message stored. open returns a new world for each
// subtest.
func StoreSuite(t *testing.T, open func(t *testing.T) StoreWorld) {
	t.Run("lease", func(t *testing.T) { storeLease(t, open(t)) })
	t.Run("claim from a lease read", func(t *testing.T) { storeClaimLoad(t, open(t)) })
	t.Run("pending record", func(t *testing.T) { storeSummary(t, open(t)) })
	t.Run("status index", func(t *testing.T) { storeStatuses(t, open(t)) })
	t.Run("cancel markers", func(t *testing.T) { storeCancels(t, open(t)) })
	t.Run("arrivals", func(t *testing.T) { storeArrivals(t, open(t)) })
}

// saved saves a new conversation waiting for one approval and returns it.
func saved(t *testing.T, s serve.Store) *conversation.State {
	t.Helper()
	id := protocol.NewID()
	st := &conversation.State{ID: id, Agent: &conversation.AgentRef{Name: "ops"},
		History: message.History{message.NewRequest(message.UserText("deploy prod"))},
		Pending: &deferred.PendingRecord{ConversationID: id, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{
			{TaskID: protocol.NewID(), Kind: deferred.KindApproval, Tool: "deploy", ToolCallID: "call_1", Args: []byte(`{"target":"prod"}`)},
		}}}
	if _, err := s.Save(t.Context(), st, 0); err != nil {
		t.Fatal(err)
	}
	return st
}

func storeLease(t *testing.T, w StoreWorld) {
	ctx := t.Context()
	st := saved(t, w.Store)
	if held, err := w.Store.Held(ctx, st.ID); err != nil || held {
		t.Fatalf("Held of a free conversation = %v, %v", held, err)
	}
	if until, err := w.Store.LeaseExpiry(ctx, st.ID); err != nil || !until.IsZero() {
		t.Fatalf("LeaseExpiry of a free conversation = %v, %v; want zero", until, err)
	}
	l, err := w.Store.TryClaim(ctx, st.ID, "one")
	if err != nil {
		t.Fatal(err)
	}
	if held, err := w.Store.Held(ctx, st.ID); err != nil || !held {
		t.Fatalf("Held of a claimed conversation = %v, %v", held, err)
	}
	if until, err := w.Store.LeaseExpiry(ctx, st.ID); err != nil || !until.After(time.Now()) {
		t.Fatalf("LeaseExpiry of a claimed conversation = %v, %v; want in the future", until, err)
	}
	seen, err := w.Store.ReadLease(ctx, st.ID)
	if err != nil || !seen.Held || seen.Holder != "one" {
		t.Fatalf("ReadLease of a claimed conversation = %+v, %v", seen, err)
	}
	began := time.Now()
	_, err = w.Store.TryClaim(ctx, st.ID, "two")
	if !errors.Is(err, conversation.ErrClaimed) {
		t.Fatalf("TryClaim of a held conversation = %v, want ErrClaimed", err)
	}
	if d := time.Since(began); d > conversation.LeaseTTL/2 {
		t.Fatalf("TryClaim of a held conversation waited %s", d)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if seen, err := w.Store.ReadLease(ctx, st.ID); err != nil || seen.Held {
		t.Fatalf("ReadLease after the release = %+v, %v", seen, err)
	}
}

func storeClaimLoad(t *testing.T, w StoreWorld) {
	ctx := t.Context()
	st := saved(t, w.Store)
	seen, err := w.Store.ReadLease(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	l, got, _, err := w.Store.ClaimLoad(ctx, st.ID, "one", seen)
	if err != nil || got == nil || got.ID != st.ID || len(got.Pending.Tasks) != 1 {
		t.Fatalf("ClaimLoad from a free lease = %+v, %v", got, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// seen is stale now: the lease was taken (and released) since.
	if _, _, _, err := w.Store.ClaimLoad(ctx, st.ID, "two", seen); !errors.Is(err, conversation.ErrClaimed) {
		t.Fatalf("ClaimLoad from a lease read before it was taken = %v, want ErrClaimed", err)
	}
	unknown := protocol.NewID()
	if seen, err = w.Store.ReadLease(ctx, unknown); err != nil || seen.Held {
		t.Fatalf("ReadLease of an unknown conversation = %+v, %v", seen, err)
	}
	if _, _, _, err := w.Store.ClaimLoad(ctx, unknown, "two", seen); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("ClaimLoad of an unknown conversation = %v, want ErrNotFound", err)
	}
}

func storeSummary(t *testing.T, w StoreWorld) {
	ctx := t.Context()
	st := saved(t, w.Store)
	sum, err := w.Store.Summary(ctx, st.ID)
	if err != nil || sum == nil || sum.Agent != "ops" || len(sum.Tasks) != 1 || sum.Tasks[0].TaskID != st.Pending.Tasks[0].TaskID {
		t.Fatalf("Summary of a paused conversation = %+v, %v", sum, err)
	}
	if sum, err := w.Store.Summary(ctx, protocol.NewID()); err != nil || sum != nil {
		t.Fatalf("Summary of an unknown conversation = %+v, %v; want none", sum, err)
	}
}

func storeStatuses(t *testing.T, w StoreWorld) {
	ctx := t.Context()
	watched := make(chan conversation.Status, 16)
	stop, err := w.Store.WatchStatuses(ctx, func(st conversation.Status, _ uint64) { watched <- st })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a, b := protocol.NewID(), protocol.NewID()
	if err := w.Store.RecordStatus(ctx, a, "ops", conversation.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if err := w.Store.RecordFailure(ctx, b, "ops", "the model is down"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{a, b} {
		if got := offloadtest.WaitOrTimeout(t, watched, "a status watched"); got.ConversationID != want {
			t.Fatalf("watched %+v, want %s", got, want)
		}
	}
	if st, err := w.Store.GetStatus(ctx, b); err != nil || st == nil || st.Status != conversation.StatusFailed || st.Error != "the model is down" {
		t.Fatalf("GetStatus of a failed run = %+v, %v", st, err)
	}
	if st, err := w.Store.GetStatus(ctx, protocol.NewID()); err != nil || st != nil {
		t.Fatalf("GetStatus of an unknown conversation = %+v, %v; want none", st, err)
	}
	all := map[string]string{}
	if err := w.Store.Statuses(ctx, func(st conversation.Status) error {
		all[st.ConversationID] = st.Status
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if all[a] != conversation.StatusRunning || all[b] != conversation.StatusFailed {
		t.Fatalf("Statuses = %v", all)
	}
}

func storeCancels(t *testing.T, w StoreWorld) {
	ctx := t.Context()
	got := make(chan string, 4)
	stop, err := w.Store.WatchCancels(ctx, func(id string) { got <- id })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	id := protocol.NewID()
	if err := w.Store.RequestCancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if c := offloadtest.WaitOrTimeout(t, got, "the cancel marker"); c != id {
		t.Fatalf("cancel of %s watched, want %s", c, id)
	}
}

func storeArrivals(t *testing.T, w StoreWorld) {
	ctx := t.Context()
	st := saved(t, w.Store)
	sum := conversation.Summarize(st, 0)
	task := st.Pending.Tasks[0].TaskID
	arrived, err := w.Inbox.Arrived(ctx, sum)
	if err != nil || arrived[task] {
		t.Fatalf("Arrived before the decision = %v, %v", arrived, err)
	}
	w.Decide(t, st.ID, task)
	arrived, err = w.Inbox.Arrived(ctx, sum)
	if err != nil || !arrived[task] {
		t.Fatalf("Arrived after the decision = %v, %v", arrived, err)
	}
	if later, err := w.Inbox.ArrivedAfter(ctx, sum, st.Checkpoint); err != nil || !later[task] {
		t.Fatalf("ArrivedAfter the checkpoint saved before the decision = %v, %v", later, err)
	}
	n, err := w.Inbox.Collect(ctx, st)
	if err != nil || n != 1 || !st.Arrived(task) {
		t.Fatalf("Collect = %d, %v; arrived %v", n, err, st.Arrived(task))
	}
	if later, err := w.Inbox.ArrivedAfter(ctx, sum, st.Checkpoint); err != nil || later[task] {
		t.Fatalf("ArrivedAfter the checkpoint past the decision = %v, %v", later, err)
	}
}

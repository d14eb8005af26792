package session_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/session"
)

// countingStore counts the saves of a memory store.
type countingStore struct {
	*conversation.Memory
	saves atomic.Int32
}

func (c *countingStore) Save(ctx context.Context, st *conversation.State, rev conversation.Revision) (conversation.Revision, error) {
	c.saves.Add(1)
	return c.Memory.Save(ctx, st, rev)
}

// givenInbox is an inbox whose Collect admits the given arrivals, as
// convstore's records what it reads past the checkpoint.
type givenInbox struct {
	arrivals []session.Given
}

func (g givenInbox) Collect(_ context.Context, st *conversation.State) (int, error) {
	for i, a := range g.arrivals {
		if err := st.Admit(a.Kind, a.TaskID, a.Data, uint64(i+1), time.Now(), 0); err != nil {
			return i, err
		}
	}
	return len(g.arrivals), nil
}

func (g givenInbox) CollectDecisions(ctx context.Context, st *conversation.State) (int, error) {
	return g.Collect(ctx, st)
}

func (givenInbox) Watch(context.Context, string, ...conversation.ArrivalKind) (<-chan struct{}, func(), error) {
	return nil, func() {}, nil
}

// A continuation of what arrived on the wire (a wake: nothing given by
// hand) saves once before its run, what Collect read; not a second time
// for the answers given by hand, of which there are none.
func TestContinueSavesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &countingStore{Memory: conversation.NewMemory()}
	id, pending := pausedConversation(t, store, &recorder{})
	appr, ext := taskOf(t, pending, deferred.KindApproval), taskOf(t, pending, deferred.KindExternal)
	inbox := givenInbox{arrivals: []session.Given{
		{Kind: conversation.ArrivalDecision, TaskID: appr.TaskID, Data: []byte(`{"approved":true}`)},
		{Kind: conversation.ArrivalAnswer, TaskID: ext.TaskID, Data: []byte(`{"content":"42"}`)},
	}}
	s, err := session.Open(ctx, session.Config{Store: store, Inbox: inbox}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := store.saves.Load()
	opts, err := s.Continue(ctx, session.ContinueOptions{})
	if err != nil || opts.DeferredResults == nil {
		t.Fatalf("continue: %+v, %v", opts, err)
	}
	if n := store.saves.Load() - before; n != 1 {
		t.Errorf("%d saves before the run, want 1", n)
	}
	st, _, err := store.Load(ctx, id)
	if err != nil || len(st.Arrivals) != 2 {
		t.Fatalf("stored arrivals %+v, %v", st, err)
	}
}

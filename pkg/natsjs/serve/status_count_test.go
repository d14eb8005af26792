package serve_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// listingStore counts the reads of every status entry (Statuses).
type listingStore struct {
	serve.Store
	listed atomic.Int32
}

func (s *listingStore) Statuses(ctx context.Context, fn func(conversation.Status) error) error {
	s.listed.Add(1)
	return s.Store.Statuses(ctx, fn)
}

// offload_conversations{status} counts the index of statuses (the
// server's counts by subject) without reading every status entry; a
// running entry is counted running only while a process holds its lease,
// else paused, as List says.
func TestConversationsCountedFromTheIndex(t *testing.T) {
	b := servetest.Setup(t)
	var store *listingStore
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{Config: func(c *serve.Config) {
		store = &listingStore{Store: c.Store}
		c.Store, c.SweepInterval = store, time.Hour // no sweep continues the lapsed entry
	}})
	ctx := t.Context()
	s := r.Convs.Store
	for status, n := range map[string]int{conversation.StatusPaused: 12, conversation.StatusFinished: 3, conversation.StatusFailed: 2} {
		for range n {
			id := protocol.NewID()
			// Each run's entries as a run writes them: running, then its end.
			for _, st := range []string{conversation.StatusRunning, status} {
				if err := s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: "ops", Status: st}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	held, lapsed := protocol.NewID(), protocol.NewID()
	lease, err := s.TryClaim(ctx, held, "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	for _, id := range []string{held, lapsed} {
		if err := s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: "ops", Status: conversation.StatusRunning}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil { // the former statuses' messages removed
		t.Fatal(err)
	}
	want := `# HELP offload_conversations Stored conversations, by status (running, paused, finished, failed), from the store.
# TYPE offload_conversations gauge
offload_conversations{status="failed"} 2
offload_conversations{status="finished"} 3
offload_conversations{status="paused"} 13
offload_conversations{status="running"} 1
`
	if err := testutil.CollectAndCompare(r.Svc.ConversationsCollector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := store.listed.Load(); n != 0 {
		t.Errorf("a scrape read every status entry %d times, want none", n)
	}
}

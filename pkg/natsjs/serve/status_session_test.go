package serve_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// The status index is true for every stored conversation: one run by a
// session outside agent serve (as agent run and agent resume run it) is
// listed and counted by a replica that never ran it; an entry that says
// running reads as running while its lease is held, and as paused once
// no process holds it (a killed holder's lease lapsed).
func TestStatusOfSessionsAndLapsedLeases(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	js := b.Srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
	defer cancel()
	prov := natsjs.ProvisionOptions{AckWait: 2 * time.Second}
	convs, err := convstore.Open(ctx, convstore.OpenConfig{JetStream: js, Provision: prov, Logger: servetest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	store, err := convstore.New(ctx, convstore.Config{JetStream: js, Provision: prov, Logger: servetest.Logger(), LeaseTTL: servetest.LeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	// What agent run does: a session of its own, no agent serve.
	cli := protocol.NewID()
	sess, err := session.Open(ctx, session.Config{Store: store, Inbox: convs.Inbox, Announcer: convs.Announcer, Holder: "agent run"}, cli, true)
	if err != nil {
		t.Fatal(err)
	}
	ag, _ := b.Agent(t)
	res, err := sess.Run(ctx, ag, "deploy prod", nil)
	sess.Close()
	if err != nil || !res.Paused() {
		t.Fatalf("agent run's run: %+v %v", res, err)
	}
	statuses := func() map[string]string {
		t.Helper()
		got := map[string]string{}
		if err := r.Svc.List(ctx, "", func(st conversation.Status) error {
			got[st.ConversationID] = st.Status
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := statuses(); got[cli] != "paused" || len(got) != 1 {
		t.Fatalf("list after agent run: %v, want %s paused", got, cli)
	}
	// A holder that wrote running and holds the lease; then its lease is
	// gone (as when it was killed and the lease lapsed).
	held := protocol.NewID()
	lease, err := store.Claim(ctx, held, "killed")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.RecordStatus(ctx, held, "ops", "running"); err != nil {
		t.Fatal(err)
	}
	// Its history waits for the model: the run was killed mid-turn.
	if _, err := store.Save(ctx, &conversation.State{ID: held, History: message.History{message.NewRequest(message.UserText("deploy prod"))}}, 0); err != nil {
		t.Fatal(err)
	}
	view := func() string {
		t.Helper()
		c, err := r.Svc.Get(ctx, held)
		if err != nil {
			t.Fatal(err)
		}
		return c.Status
	}
	if got := statuses(); got[held] != "running" || view() != "running" {
		t.Fatalf("list while the lease is held: %v, view %s", got, view())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := statuses(); got[held] != "paused" || view() != "paused" {
		t.Fatalf("list once no one holds the lease: %v, view %s, want paused", got, view())
	}
	want := `# HELP offload_conversations Stored conversations, by status (running, paused, finished, failed), from the store.
# TYPE offload_conversations gauge
offload_conversations{status="failed"} 0
offload_conversations{status="finished"} 0
offload_conversations{status="paused"} 2
offload_conversations{status="running"} 0
`
	if err := testutil.CollectAndCompare(r.Svc.ConversationsCollector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// staleStore is a store whose next Load of a conversation returns a state
// saved earlier, as a load that raced with the run's last save does.
type staleStore struct {
	serve.Store
	mu    sync.Mutex
	stale map[string]*conversation.State
}

func (s *staleStore) Load(ctx context.Context, id string) (*conversation.State, conversation.Revision, error) {
	s.mu.Lock()
	st := s.stale[id]
	delete(s.stale, id)
	s.mu.Unlock()
	if st != nil {
		return st, 1, nil
	}
	return s.Store.Load(ctx, id)
}

// GET /v1/conversations/{id} reads the state, then the lease: a run that
// ended between the two (its last save, then its lease released) left a
// view of a state waiting for the model with no holder, said paused with
// nothing pending (issue 38). The view loads it again and shows it
// finished.
func TestGetBetweenSaveAndRelease(t *testing.T) {
	b := servetest.Setup(t)
	stale := &staleStore{stale: map[string]*conversation.State{}}
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{Config: func(c *serve.Config) {
		stale.Store = c.Store
		c.Store = stale
	}})
	first := r.Start(t, "deploy prod")
	conv, task := first.ConversationID, servetest.Paused(t, first)
	paused, err := r.Svc.State(t.Context(), conv)
	if err != nil {
		t.Fatal(err)
	}
	b.Decide(t, r.JS, conv, task)
	servetest.Finished(t, r, conv, "done deployed prod")
	// The state as the continuation's collect saved it: the decision
	// arrived, the history waits for the tool's run.
	mid := *paused
	mid.Arrivals = append(mid.Arrivals, conversation.Arrival{TaskID: task, Kind: conversation.ArrivalDecision, Data: []byte(`{"approved":true}`), At: time.Now()})
	stale.mu.Lock()
	stale.stale[conv] = &mid
	stale.mu.Unlock()
	c, err := r.Svc.Get(t.Context(), conv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != "finished" || c.Output != "done deployed prod" {
		t.Fatalf("view %+v, want the finished conversation", c)
	}
}

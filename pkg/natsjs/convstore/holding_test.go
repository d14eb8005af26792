package convstore_test

import (
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// While a process holds a conversation's lease, its saves write the
// pending record without reading it first (holding.go): one message for
// the state and one for the record, and the index of pending calls kept
// with it (pindex.go: one read of the conversation's entries, one message
// per entry added or removed, the removals after the save returned), none for the record nor the index when
// neither the state nor the store had one; a record another writer changed meanwhile
// is read and written again, and is the holder's in the end; releasing
// the lease forgets what was known.
func TestHolderProjectsWithoutReading(t *testing.T) {
	t.Parallel()
	b := setup(t)
	js := b.srv.JetStream(t)
	s := newConvStore(t, js, convstore.Config{})
	ctx := t.Context()
	conv := protocol.NewID()
	st := sampleState(conv, 2)
	if _, err := s.Save(ctx, st, 0); err != nil { // an earlier run's pause
		t.Fatal(err)
	}
	lease, err := s.TryClaim(ctx, conv, "holder")
	if err != nil {
		t.Fatal(err)
	}
	st, rev, err := s.Load(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	// save saves st and returns the messages it sent, with those of the
	// removals it left under way (Flush).
	save := func(what string) uint64 {
		t.Helper()
		before := js.Conn().Stats().OutMsgs
		if rev, err = s.Save(ctx, st, rev); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return js.Conn().Stats().OutMsgs - before
	}
	task := st.Pending.Tasks[0].TaskID
	if err := st.Admit(conversation.ArrivalDecision, task, []byte(`{"approved":true}`), 1, st.UpdatedAt, 0); err != nil {
		t.Fatal(err)
	}
	if n := save("the decision arrived"); n != 4 || b.pendingRecord(t, conv) != nil {
		t.Fatalf("the decision's save sent %d messages (want 4: the state, the record's deletion, then off its path the index read, its entry removed); record %+v", n, b.pendingRecord(t, conv))
	}
	st.Pending, st.Arrivals, st.Settled = nil, nil, append(st.Settled, task)
	if n := save("nothing pending"); n != 1 || b.pendingRecord(t, conv) != nil {
		t.Fatalf("a save with nothing pending sent %d messages (want 1: the state); record %+v", n, b.pendingRecord(t, conv))
	}
	next := protocol.NewID()
	st.Pending = &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{{TaskID: next, Kind: deferred.KindApproval, Tool: "shell", ToolCallID: "call_2", Args: []byte(`{}`)}}}
	if n := save("paused again"); n != 4 {
		t.Fatalf("the pause's save sent %d messages, want 4 (the state, the index read, its entry added, the record over its delete marker)", n)
	}
	if rec := b.pendingRecord(t, conv); rec == nil || rec.Revision != rev || len(rec.Tasks) != 1 || rec.Tasks[0].TaskID != next {
		t.Fatalf("record %+v after the pause at revision %d", rec, rev)
	}
	// A stalled former holder's late write: the holder's next save reads
	// the record and writes its own.
	b.putRecord(t, conversation.Summary{ConversationID: conv, Status: conversation.StatusWaiting, Revision: 1, Tasks: []deferred.PendingTask{{TaskID: task, Kind: deferred.KindApproval, Tool: "shell"}}})
	save("after a late write")
	if rec := b.pendingRecord(t, conv); rec == nil || rec.Revision != rev || len(rec.Tasks) != 1 || rec.Tasks[0].TaskID != next {
		t.Fatalf("record %+v after a late write and a save at revision %d", rec, rev)
	}
	if held, _ := convstore.Holdings(s); held != 1 {
		t.Fatalf("%d conversations held, want 1", held)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load(ctx, conv); err != nil { // a reader's, not a holder's
		t.Fatal(err)
	}
	if held, objects := convstore.Holdings(s); held != 0 || objects != 0 {
		t.Fatalf("after the release and a reader's load: %d conversations held and %d history objects remembered, want none", held, objects)
	}
}

package convstore_test

import (
	"slices"
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// indexed returns the task IDs the index of pending calls holds, in its
// order.
func indexed(t *testing.T, p *convstore.Pending, q pending.IndexQuery) []string {
	t.Helper()
	entries, more, err := p.Index(t.Context(), q, 0, 100)
	if err != nil || more {
		t.Fatalf("Index = %v, more %v", err, more)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.TaskID)
	}
	return out
}

// listed returns the task IDs of the first page of every call waiting.
func listed(t *testing.T, d *pending.Desk) []string {
	t.Helper()
	page, err := d.Page(t.Context(), pending.Filter{}, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range page.Calls {
		out = append(out, c.TaskID)
	}
	return out
}

// The index of pending calls follows the pending records (pindex.go): a
// save adds its calls' entries and the save that resolves them removes
// them. A process killed between an entry's add and its record's write
// leaves an entry no record holds: the pages skip it (the record is the
// truth of each entry) and RepairIndex removes it once it is older than
// its grace, not before. A record the index lacks (written before the
// index, or when its add failed) is on no page until RepairIndex adds it;
// an entry whose record expired is removed by it.
func TestIndexFollowsRecordsAndRepairs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	p, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: b.js})
	if err != nil {
		t.Fatal(err)
	}
	d, err := pending.New(pending.Config{Records: p})
	if err != nil {
		t.Fatal(err)
	}

	a := sampleState(protocol.NewID(), 1)
	a.Agent = &conversation.AgentRef{Name: "ops team"} // no subject token
	a.Pending.Tasks = append(a.Pending.Tasks, deferred.PendingTask{TaskID: protocol.NewID(), Kind: deferred.KindExternal, Tool: "ask", Args: []byte(`{}`)})
	rev, err := s.Save(ctx, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	aTasks := []string{a.Pending.Tasks[0].TaskID, a.Pending.Tasks[1].TaskID}
	if got := indexed(t, p, pending.IndexQuery{}); !slices.Equal(got, aTasks) {
		t.Fatalf("after the pause the index holds %v, want %v", got, aTasks)
	}
	for q, want := range map[*pending.IndexQuery][]string{
		{Agent: "ops team"}: aTasks,
		{Agent: "ops"}:      nil,
		{Tool: "ask"}:       aTasks[1:],
		{Kinds: []deferred.Kind{deferred.KindApproval}}:   aTasks[:1],
		{Kinds: []deferred.Kind{deferred.KindBackground}}: nil,
		{Kinds: pending.ForPeople, Conversation: a.ID}:    aTasks,
	} {
		if got := indexed(t, p, *q); !slices.Equal(got, want) {
			t.Errorf("Index(%+v) = %v, want %v", *q, got, want)
		}
	}

	// Killed after the add, before the record: an entry no record holds.
	ghost, ghostTask := protocol.NewID(), protocol.NewID()
	if _, err := b.js.Publish(ctx, "tools.pindex."+ghost+"."+ghostTask+".people.approval.ops.shell", nil); err != nil {
		t.Fatal(err)
	}
	// A record the index lacks.
	c := conversation.Summary{ConversationID: protocol.NewID(), Status: conversation.StatusWaiting, Revision: 1,
		Tasks: []deferred.PendingTask{{TaskID: protocol.NewID(), Kind: deferred.KindApproval, Tool: "shell"}}}
	b.putRecord(t, c)
	if got := listed(t, d); !slices.Equal(got, aTasks) {
		t.Fatalf("the page lists %v, want %v (no ghost)", got, aTasks)
	}
	added, removed, err := s.RepairIndex(ctx)
	if err != nil || added != 1 || removed != 0 {
		t.Fatalf("RepairIndex within the grace = %d added, %d removed, %v; want 1, 0", added, removed, err)
	}
	if got := listed(t, d); !slices.Equal(got, append(slices.Clone(aTasks), c.Tasks[0].TaskID)) {
		t.Fatalf("after the repair the page lists %v, want %v and %s", got, aTasks, c.Tasks[0].TaskID)
	}
	convstore.SetRepairGrace(s, 0)
	if added, removed, err := s.RepairIndex(ctx); err != nil || added != 0 || removed != 1 {
		t.Fatalf("RepairIndex past the grace = %d added, %d removed, %v; want 0, 1", added, removed, err)
	}
	if got := indexed(t, p, pending.IndexQuery{}); slices.Contains(got, ghostTask) || len(got) != 3 {
		t.Fatalf("after the repair the index holds %v", got)
	}

	// The save that resolves a's calls removes their entries.
	a.Pending = nil
	if _, err := s.Save(ctx, a, rev); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil { // removed off the save's path
		t.Fatal(err)
	}
	if got := indexed(t, p, pending.IndexQuery{}); !slices.Equal(got, []string{c.Tasks[0].TaskID}) {
		t.Fatalf("after a's calls were resolved the index holds %v, want only c's", got)
	}
	// c's record expires: RepairIndex removes its entry.
	kv, err := b.js.KeyValue(ctx, natsjs.NamesFor("").PendingBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, c.ConversationID); err != nil {
		t.Fatal(err)
	}
	if _, removed, err := s.RepairIndex(ctx); err != nil || removed != 1 {
		t.Fatalf("RepairIndex after c's record went = %d removed, %v", removed, err)
	}
	if got := indexed(t, p, pending.IndexQuery{}); len(got) != 0 {
		t.Fatalf("the index holds %v, want nothing", got)
	}
}

// A save's removal of the entries of the calls its record no longer
// holds runs off the save's path (the save returns while it is held),
// and the conversation's next save waits for it before it adds entries:
// a call pending again that the removal would otherwise remove after the
// add found its entry (and kept it) stays listed.
func TestIndexRemovalOffTheSavePath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	p, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: b.js})
	if err != nil {
		t.Fatal(err)
	}
	st := sampleState(protocol.NewID(), 1)
	rev, err := s.Save(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	task := st.Pending.Tasks[0].TaskID
	pend := st.Pending
	release, waits := convstore.HoldRemovals(s)
	defer release()
	st.Pending = nil
	if rev, err = s.Save(ctx, st, rev); err != nil { // returns with its removal held
		t.Fatal(err)
	}
	if got := indexed(t, p, pending.IndexQuery{}); !slices.Equal(got, []string{task}) {
		t.Fatalf("the index holds %v while the removal is held, want %v", got, []string{task})
	}
	st.Pending = pend // the same call pending again
	saved := make(chan error, 1)
	go func() {
		_, err := s.Save(ctx, st, rev)
		saved <- err
	}()
	select {
	case <-waits: // the save waits for the removal: let it go
		release()
		err = <-saved
	case err = <-saved: // saved past the removal held
		release()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := indexed(t, p, pending.IndexQuery{}); !slices.Equal(got, []string{task}) {
		t.Fatalf("the index holds %v once the removals ended, want %v", got, []string{task})
	}
}

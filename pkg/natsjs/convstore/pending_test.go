package convstore_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// pendingRecord reads the record of conv from the pending bucket as an
// admin would: nil when there is none.
func (b *bundle) pendingRecord(t *testing.T, conv string) *conversation.Summary {
	t.Helper()
	kv, err := b.js.KeyValue(t.Context(), natsjs.NamesFor("").PendingBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), conv)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var s conversation.Summary
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// putRecord writes a record of conv as it is, as a crashed or stalled
// writer left it.
func (b *bundle) putRecord(t *testing.T, s conversation.Summary) {
	t.Helper()
	kv, err := b.js.KeyValue(t.Context(), natsjs.NamesFor("").PendingBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(s)
	if _, err := kv.Put(t.Context(), s.ConversationID, data); err != nil {
		t.Fatal(err)
	}
}

// Every save writes the conversation's pending record (SPEC §5.5): its
// unresolved tasks and last user prompt, no other history, under the
// saved revision; a task with its arrival leaves it; nothing pending
// deletes it. People read it through Pending.
func TestPendingRecordFollowsSaves(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{MaxInline: 4 << 10})
	ctx := t.Context()
	conv := protocol.NewID()
	st := sampleState(conv, 60) // a history in the object store
	st.History = append(st.History, message.NewRequest(message.UserText("deploy to prod, please")))
	st.UpdatedAt = time.Now().UTC()
	rev, err := s.Save(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := b.pendingRecord(t, conv)
	if rec == nil || rec.ConversationID != conv || rec.Revision != rev || rec.Status != conversation.StatusWaiting ||
		len(rec.Tasks) != 1 || rec.Tasks[0].TaskID != st.Pending.Tasks[0].TaskID || rec.Prompt != "deploy to prod, please" || !rec.UpdatedAt.Equal(st.UpdatedAt) {
		t.Fatalf("record %+v after rev %d", rec, rev)
	}
	p, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: b.srv.JetStream(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Get(ctx, conv); err != nil || got.Revision != rev {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	if ids, err := p.List(ctx); err != nil || len(ids) != 1 || ids[0] != conv {
		t.Fatalf("List: %v, %v", ids, err)
	}
	raw, _ := json.Marshal(rec)
	if strings.Contains(string(raw), strings.Repeat("x", 100)) {
		t.Errorf("the record carries history: %s", raw)
	}

	// The approval's decision arrived: nothing is waited for.
	task := st.Pending.Tasks[0].TaskID
	if err := st.Admit(conversation.ArrivalDecision, task, []byte(`{"approved":true}`), 1, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, st, rev); err != nil {
		t.Fatal(err)
	}
	if rec := b.pendingRecord(t, conv); rec != nil {
		t.Fatalf("record %+v once nothing is waited for", rec)
	}
	if _, err := p.Get(ctx, conv); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("Get once nothing is pending: %v", err)
	}
	if ids, err := p.List(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("List once nothing is pending: %v, %v", ids, err)
	}
}

// The record is a projection: one left stale by a crash between the two
// writes (the record of an older revision, or none) is repaired by the
// next save; a record of a later revision (written by the process that
// saved after this one) is never replaced by this one's.
func TestPendingRecordRepairedByNextSave(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	conv := protocol.NewID()
	st := sampleState(conv, 1)
	rev, err := s.Save(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A crash after the state's write: the record is an older one.
	b.putRecord(t, conversation.Summary{ConversationID: conv, Status: conversation.StatusWaiting, Revision: rev - 1})
	if rev, err = s.Save(ctx, st, rev); err != nil {
		t.Fatal(err)
	}
	if rec := b.pendingRecord(t, conv); rec == nil || rec.Revision != rev || len(rec.Tasks) != 1 {
		t.Fatalf("record %+v after the repairing save of rev %d", rec, rev)
	}
	// A later save's record stays.
	later := conversation.Summary{ConversationID: conv, Status: conversation.StatusBackground, Revision: rev + 1000}
	b.putRecord(t, later)
	if _, err = s.Save(ctx, st, rev); err != nil {
		t.Fatal(err)
	}
	if rec := b.pendingRecord(t, conv); rec == nil || rec.Revision != later.Revision || rec.Status != conversation.StatusBackground {
		t.Fatalf("record %+v replaced the later one", rec)
	}
}

// A store written before the pending records existed: Reproject (what
// agent provision runs) writes the record of each paused conversation.
func TestReprojectWritesMissingRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	paused, done := sampleState(protocol.NewID(), 1), sampleState(protocol.NewID(), 1)
	done.Pending = nil
	for _, st := range []*conversation.State{paused, done} {
		if _, err := s.Save(ctx, st, 0); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := b.js.KeyValue(ctx, natsjs.NamesFor("").PendingBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, paused.ID); err != nil { // as before the upgrade
		t.Fatal(err)
	}
	if n, err := s.Reproject(ctx); err != nil || n != 2 {
		t.Fatalf("Reproject: %d, %v", n, err)
	}
	if rec := b.pendingRecord(t, paused.ID); rec == nil || len(rec.Tasks) != 1 {
		t.Errorf("paused conversation's record: %+v", rec)
	}
	if rec := b.pendingRecord(t, done.ID); rec != nil {
		t.Errorf("finished conversation's record: %+v", rec)
	}
}

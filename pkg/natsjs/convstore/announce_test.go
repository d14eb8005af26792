package convstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
)

func TestAnnouncer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	ctx := context.Background()
	conv, run, task := protocol.NewID(), protocol.NewID(), protocol.NewID()
	rec := &deferred.PendingRecord{ConversationID: conv, RunID: run, Tasks: []deferred.PendingTask{
		{TaskID: task, Kind: deferred.KindApproval, Tool: "shell", ToolCallID: "call_1", Args: json.RawMessage(`{"cmd":"ls"}`), Metadata: map[string]any{"why": "audit"}},
		{TaskID: protocol.NewID(), Kind: deferred.KindExternal, Tool: "ask_human"},
	}}
	a := convstore.NewAnnouncer(b.js, "")
	for range 2 { // announcing the pause again stores nothing twice
		if err := a.Announce(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Resolve(ctx, conv, protocol.Resolution{TaskID: task, Resolved: protocol.ResolvedApproved, By: "ann"}); err != nil {
		t.Fatal(err)
	}
	cons, err := b.js.OrderedConsumer(ctx, natsjs.NamesFor("").Approvals, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.approval." + conv + ".*"}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(10)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	for m := range batch.Messages() {
		var v map[string]any
		if err := json.Unmarshal(m.Data(), &v); err != nil {
			t.Fatal(err)
		}
		if m.Subject() != "tools.approval."+conv+"."+task {
			t.Errorf("subject %s", m.Subject())
		}
		got = append(got, v)
	}
	if len(got) != 2 {
		t.Fatalf("%d messages, want the announcement and its resolution: %v", len(got), got)
	}
	ann, res := got[0], got[1]
	lsDigest, _ := protocol.ArgsDigest(json.RawMessage(`{"cmd":"ls"}`))
	if ann["tool"] != "shell" || ann["run_id"] != run || ann["conversation_id"] != conv || ann["metadata"].(map[string]any)["why"] != "audit" ||
		ann["args"].(map[string]any)["cmd"] != "ls" || ann["requested_at"] == nil || ann["args_digest"] != lsDigest {
		t.Errorf("announcement %v", ann)
	}
	if res["task_id"] != task || res["resolved"] != "approved" || res["by"] != "ann" || res["at"] == nil {
		t.Errorf("resolution %v", res)
	}
}

// What a live run waits for (agent pending, approve with --approve wait):
// an announced approval, until a decision the run admits is stored for it
// or it is resolved (a malformed one hides nothing: issue 38); a decision
// published twice (Publisher) is stored once.
func TestAnnouncerWaitingAndPublisher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	ctx := context.Background()
	conv, task, other := protocol.NewID(), protocol.NewID(), protocol.NewID()
	a, p := convstore.NewAnnouncer(b.js, ""), convstore.NewPublisher(b.js, "")
	people, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: b.srv.JetStream(t)})
	if err != nil {
		t.Fatal(err)
	}
	rec := &deferred.PendingRecord{ConversationID: conv, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{
		{TaskID: task, Kind: deferred.KindApproval, Tool: "deploy", ToolCallID: "c1", Args: json.RawMessage(`{}`)},
		{TaskID: other, Kind: deferred.KindApproval, Tool: "shell", ToolCallID: "c2", Args: json.RawMessage(`{}`)},
	}}
	if err := a.Announce(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if w := people.LiveWaiting(ctx, conv, map[string]bool{other: true}); len(w) != 1 || w[0].TaskID != task || w[0].Tool != "deploy" || !a.Awaits(ctx, conv, task) {
		t.Fatalf("waiting %+v, awaits %v; want the announced approval", w, a.Awaits(ctx, conv, task))
	}
	for _, junk := range []string{`{approved:true}`, `{"approved":"yes"}`} {
		if _, err := b.js.Publish(ctx, "tools.decision."+conv+"."+task, []byte(junk)); err != nil {
			t.Fatal(err)
		}
		if w := people.LiveWaiting(ctx, conv, map[string]bool{other: true}); len(w) != 1 || w[0].TaskID != task {
			t.Fatalf("waiting %+v after the malformed decision %s, want the approval still", w, junk)
		}
	}
	for range 2 {
		subject, err := p.Publish(ctx, conversation.ArrivalDecision, conv, task, []byte(`{"approved":true}`))
		if err != nil || subject != "tools.decision."+conv+"."+task {
			t.Fatalf("publish on %s: %v", subject, err)
		}
	}
	if w := people.LiveWaiting(ctx, conv, nil); len(w) != 1 || w[0].TaskID != other {
		t.Fatalf("waiting %+v after a decision, want the other approval only", w)
	}
	decisions, err := b.js.Stream(ctx, natsjs.NamesFor("").Decisions)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := decisions.Info(ctx); err != nil || info.State.Msgs != 3 {
		t.Fatalf("decisions stored: %+v %v, want the 2 malformed ones and 1", info, err)
	}
	if err := a.Resolve(ctx, conv, protocol.Resolution{TaskID: task, Resolved: protocol.ResolvedApproved}); err != nil {
		t.Fatal(err)
	}
	if a.Awaits(ctx, conv, task) {
		t.Error("a resolved approval is still awaited")
	}
	if _, err := p.Publish(ctx, conversation.ArrivalResult, conv, task, nil); err == nil {
		t.Error("a result was published by hand")
	}
}

// TestAnnouncementCarriesTraceContext: an announcement made in a traced
// run carries the run's W3C trace context (SPEC §14); one made untraced
// carries none.
func TestAnnouncementCarriesTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	a := convstore.NewAnnouncer(b.js, "")
	for _, traced := range []bool{true, false} {
		ctx := context.Background()
		if traced {
			ctx = telemetry.Extract(ctx, map[string][]string{"traceparent": {tp}})
		}
		conv, task := protocol.NewID(), protocol.NewID()
		rec := &deferred.PendingRecord{ConversationID: conv, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{
			{TaskID: task, Kind: deferred.KindApproval, Tool: "shell", ToolCallID: "call_1"}}}
		if err := a.Announce(ctx, rec); err != nil {
			t.Fatal(err)
		}
		s, err := b.js.Stream(ctx, natsjs.NamesFor("").Approvals)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetLastMsgForSubject(ctx, "tools.approval."+conv+"."+task)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if traced {
			want = tp
		}
		if got := m.Header.Get(telemetry.TraceparentHeader); got != want {
			t.Errorf("traced %v: announcement's traceparent %q, want %q", traced, got, want)
		}
	}
}

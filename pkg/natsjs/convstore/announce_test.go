package convstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

func TestAnnouncer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	jstest.MustProvision(t, js)
	conv, run, task := protocol.NewID(), protocol.NewID(), protocol.NewID()
	rec := &deferred.PendingRecord{ConversationID: conv, RunID: run, Tasks: []deferred.PendingTask{
		{TaskID: task, Kind: deferred.KindApproval, Tool: "shell", ToolCallID: "call_1", Args: json.RawMessage(`{"cmd":"ls"}`), Metadata: map[string]any{"why": "audit"}},
		{TaskID: protocol.NewID(), Kind: deferred.KindExternal, Tool: "ask_human"},
	}}
	a := convstore.NewAnnouncer(js, "")
	for range 2 { // announcing the pause again stores nothing twice
		if err := a.Announce(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Resolve(ctx, conv, protocol.Resolution{TaskID: task, Resolved: protocol.ResolvedApproved, By: "ann"}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, natsjs.NamesFor("").Approvals, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.approval." + conv + ".*"}})
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
	if ann["tool"] != "shell" || ann["run_id"] != run || ann["conversation_id"] != conv || ann["metadata"].(map[string]any)["why"] != "audit" ||
		ann["args"].(map[string]any)["cmd"] != "ls" || ann["requested_at"] == nil {
		t.Errorf("announcement %v", ann)
	}
	if res["task_id"] != task || res["resolved"] != "approved" || res["by"] != "ann" || res["at"] == nil {
		t.Errorf("resolution %v", res)
	}
}

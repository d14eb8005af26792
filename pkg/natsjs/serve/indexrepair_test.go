package serve_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A replica repairs the index of pending calls now and then (SPEC §21):
// a pending record the index lacks (written before it, or its entry's
// add failed) is given its entry, and so is listed by the pages.
func TestIndexRepairedByServe(t *testing.T) {
	b := servetest.Setup(t)
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{Config: func(c *serve.Config) { c.IndexRepairInterval = 100 * time.Millisecond }})
	ctx := t.Context()
	conv, task := protocol.NewID(), protocol.NewID()
	kv, err := r.JS.KeyValue(ctx, natsjs.NamesFor("").PendingBucket)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(conversation.Summary{ConversationID: conv, Status: conversation.StatusWaiting, Revision: 1,
		Tasks: []deferred.PendingTask{{TaskID: task, Kind: deferred.KindApproval, Tool: "deploy"}}})
	if _, err := kv.Put(ctx, conv, rec); err != nil {
		t.Fatal(err)
	}
	p, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: r.JS})
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.Eventually(t, "the record's call in the index", func() error {
		entries, _, err := p.Index(ctx, pending.IndexQuery{Conversation: conv}, 0, 10)
		if err != nil {
			return err
		}
		if len(entries) != 1 || entries[0].TaskID != task {
			return fmt.Errorf("the index holds %+v", entries)
		}
		return nil
	})
}

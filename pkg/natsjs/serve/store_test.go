package serve_test

import (
	"context"
	"testing"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// The JetStream store and inbox (convstore) behave as the core relies on
// (serve.Store, serve.Inbox).
func TestStoreConformance(t *testing.T) {
	servetest.StoreSuite(t, func(t *testing.T) servetest.StoreWorld {
		srv := natstest.Start(t)
		p, err := agentproc.Open(t.Context(), agentproc.Options{Conn: srv.Conn(t), Conversations: true})
		if err != nil {
			t.Fatal(err)
		}
		return servetest.StoreWorld{Store: p.Conversations.Store, Inbox: p.Conversations.Inbox, Decide: func(t *testing.T, conv, task string) {
			t.Helper()
			if _, err := p.JetStream.Publish(context.Background(), "tools.decision."+conv+"."+task, []byte(`{"approved":true,"by":"ann"}`)); err != nil {
				t.Fatal(err)
			}
		}}
	})
}

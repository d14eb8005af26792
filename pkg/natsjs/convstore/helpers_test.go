package convstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait

// bundle is what every test of the conversation store, the inbox and the
// announcer starts from (setup): an in-process server and a JetStream
// context of the test's own. Stores and inboxes the test asks the bundle
// for; streams are provisioned only where a test says so, since the store
// creates its own.
type bundle struct {
	srv *natstest.Server
	js  jetstream.JetStream
}

// setup starts a server with opts, stopped when the test ends.
func setup(t *testing.T, opts ...natstest.Option) *bundle {
	t.Helper()
	srv := natstest.Start(t, opts...)
	return &bundle{srv: srv, js: srv.JetStream(t)}
}

// provision creates the default streams, buckets and consumers (again).
func (b *bundle) provision(t *testing.T) {
	t.Helper()
	jstest.MustProvision(t, b.js)
}

// store opens a conversation store with cfg on a connection of its own,
// as another process would.
func (b *bundle) store(t *testing.T, cfg convstore.Config) *convstore.Store {
	t.Helper()
	return newConvStore(t, b.srv.JetStream(t), cfg)
}

// inbox provisions the streams and returns an inbox reading them that
// counts its refusals in am.
func (b *bundle) inbox(t *testing.T) (in *convstore.Inbox, am *metrics.Agent) {
	t.Helper()
	b.provision(t)
	am = metrics.NewAgent(prometheus.NewRegistry())
	in, err := convstore.NewInbox(convstore.InboxConfig{JetStream: b.js, Metrics: am})
	if err != nil {
		t.Fatal(err)
	}
	return in, am
}

// newConvStore opens a conversation store on js with cfg.
func newConvStore(t *testing.T, js jetstream.JetStream, cfg convstore.Config) *convstore.Store {
	t.Helper()
	cfg.JetStream = js
	if cfg.Logger == nil {
		cfg.Logger = jstest.Logger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := convstore.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sampleState returns the state of conversation id with n messages and a
// pending approval.
func sampleState(id string, n int) *conversation.State {
	st := &conversation.State{ID: id, Pending: &deferred.PendingRecord{ConversationID: id, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{
		{TaskID: protocol.NewID(), Kind: "approval", Tool: "shell", ToolCallID: "call_1", Args: []byte(`{"cmd":"ls"}`)},
	}}}
	for i := range n {
		st.History = append(st.History, message.NewRequest(message.UserText(strings.Repeat("x", 100)+string(rune('a'+i%26)))))
	}
	return st
}

package serve_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// apiCounter counts the JetStream API requests of a kind made on the
// server's account, as the server receives them: a subscription of its
// own to $JS.API.<kind>.>.
type apiCounter struct {
	mu       sync.Mutex
	subjects []string
}

func (c *apiCounter) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.subjects...)
}

func countAPI(t *testing.T, b *servetest.World, kind string) *apiCounter {
	t.Helper()
	nc := b.Srv.Conn(t)
	c := &apiCounter{}
	sub, err := nc.Subscribe("$JS.API."+kind+".>", func(m *nats.Msg) {
		c.mu.Lock()
		c.subjects = append(c.subjects, m.Subject)
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

// A wake reads what its conversation waits for without creating a
// consumer (the pending record, the lease, direct gets of the task's
// subjects, and after the claim the arrivals by direct gets): 1 000
// conversations approved at once do not make 3 000 consumers.
func TestWakeCreatesNoConsumer(t *testing.T) {
	b := servetest.Setup(t)
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	creates := countAPI(t, b, "CONSUMER")
	b.Decide(t, r2.JS, f.ConversationID, task)
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation's model request")
	servetest.Finished(t, r1, f.ConversationID, "done deployed prod")
	var made []string
	for _, s := range creates.list() {
		// The server's own sourcing consumers (JS_SRC_…, the decisions
		// stream sourcing the expiries' schedules) come and go on the
		// server's timers, not the wake's.
		if tok := strings.Split(s, "."); len(tok) > 5 && strings.HasPrefix(tok[5], "JS_SRC_") {
			continue
		}
		if strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.") || strings.HasPrefix(s, "$JS.API.CONSUMER.DURABLE.CREATE.") {
			made = append(made, s)
		}
	}
	if len(made) > 0 {
		t.Errorf("the wake created %d consumers: %v", len(made), made)
	}
}

// A message that does not complete what a conversation waits for (here
// a stray result while it waits for an approval) is acknowledged from
// the pending record and a direct get alone: the conversation is neither
// claimed nor loaded.
func TestWakeIncompleteClaimsNothing(t *testing.T) {
	b := servetest.Setup(t)
	r1 := b.Replica(t, "r1")
	f := r1.Start(t, "deploy prod")
	servetest.Paused(t, f)
	gets := countAPI(t, b, "DIRECT")
	claims := countClaims(t, b, f.ConversationID)
	ctx := context.Background()
	if _, err := r1.JS.Publish(ctx, "tools.result."+f.ConversationID+"."+protocol.NewID()+".deploy", []byte(`{"content":"stray"}`)); err != nil {
		t.Fatal(err)
	}
	resultsWakesAcked(t, r1)
	if got := claims.list(); len(got) > 0 {
		t.Errorf("the conversation was claimed: %v", got)
	}
	if len(gets.list()) == 0 {
		t.Error("no direct get made: the wake did not read the task's subject")
	}
}

// countClaims counts the writes of conversation conv's lease (claims,
// renewals, releases), as the server receives them.
func countClaims(t *testing.T, b *servetest.World, conv string) *apiCounter {
	t.Helper()
	claims := &apiCounter{}
	nc := b.Srv.Conn(t)
	sub, err := nc.Subscribe("$KV.tools_conversations.lease."+conv, func(m *nats.Msg) {
		claims.mu.Lock()
		claims.subjects = append(claims.subjects, m.Subject)
		claims.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return claims
}

// resultsWakesAcked waits until the results' wake consumer has delivered
// and acknowledged every message: a wake's acknowledgement has no signal
// outside the server, so the consumer is polled.
func resultsWakesAcked(t *testing.T, r *servetest.Replica) {
	t.Helper()
	ctx := context.Background()
	offloadtest.Eventually(t, "the results' wakes acknowledged", func() error {
		c, err := r.JS.Consumer(ctx, "TOOLS_RESULTS", "wake")
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.Delivered.Stream == 0 || info.NumAckPending > 0 || info.NumPending > 0 {
			return fmt.Errorf("delivered %d, ack pending %d, pending %d", info.Delivered.Stream, info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

// A late message for a conversation whose run ended by itself (here a
// result after it finished, as a call its run consumed live leaves one)
// is acknowledged from the pending record and the status index alone:
// the conversation is neither claimed nor loaded.
func TestWakeEndedClaimsNothing(t *testing.T) {
	b := servetest.Setup(t)
	r1 := b.Replica(t, "r1")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	b.Decide(t, r1.JS, f.ConversationID, task)
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation's model request")
	servetest.Finished(t, r1, f.ConversationID, "done deployed prod")
	claims := countClaims(t, b, f.ConversationID)
	gets := countAPI(t, b, "DIRECT")
	if _, err := r1.JS.Publish(context.Background(), "tools.result."+f.ConversationID+"."+protocol.NewID()+".deploy", []byte(`{"content":"late"}`)); err != nil {
		t.Fatal(err)
	}
	resultsWakesAcked(t, r1)
	if got := claims.list(); len(got) > 0 {
		t.Errorf("the finished conversation was claimed: %v", got)
	}
	for _, s := range gets.list() {
		if strings.Contains(s, ".conv."+f.ConversationID) {
			t.Errorf("the finished conversation was loaded: %s", s)
		}
	}
}

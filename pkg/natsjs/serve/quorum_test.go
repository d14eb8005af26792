package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/session"
)

// publishDecision publishes data on conversation conv's task's decision
// subject, as nats pub does, and returns its stream sequence.
func publishDecision(t *testing.T, js jetstream.JetStream, conv, task, data string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ack, err := js.Publish(ctx, fmt.Sprintf("tools.decision.%s.%s", conv, task), []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// storedFinal is the part of a stored final event (SPEC §6.3) the
// tests read.
type storedFinal struct {
	Type    string                 `json:"type"`
	Pending []deferred.PendingTask `json:"pending"`
}

// lastEvent returns the last event stored for conversation conv.
func lastEvent(t *testing.T, r *replica, conv string) storedFinal {
	t.Helper()
	ctx := context.Background()
	stream, err := r.js.Stream(ctx, "TOOLS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, "tools.event."+conv)
	if err != nil {
		t.Fatal(err)
	}
	var ev storedFinal
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// readPast waits until the stored conversation conv has read the
// decisions stream up to seq (the wake that reads them has no signal
// outside the replica: the stored state is polled) and returns it.
func readPast(t *testing.T, r *replica, conv string, seq uint64) *conversation.State {
	t.Helper()
	var st *conversation.State
	offloadtest.Eventually(t, fmt.Sprintf("decisions read up to %d", seq), func() error {
		var err error
		if st, _, err = r.convs.Store.Load(context.Background(), conv); err != nil {
			return err
		}
		if st.Checkpoint.Decisions < seq {
			return fmt.Errorf("checkpoint %d", st.Checkpoint.Decisions)
		}
		return nil
	})
	return st
}

// stillPending asserts that conversation conv's task is still pending,
// unresolved, with the approvals of want counted, and that deploy never
// ran.
func stillPending(t *testing.T, b *bundle, st *conversation.State, task string, want ...string) {
	t.Helper()
	if st.Arrived(task) || len(st.Unresolved()) != 1 {
		t.Fatalf("task %s resolved: arrivals %+v, pending %+v", task, st.Arrivals, st.Pending)
	}
	var by []string
	for _, v := range st.VotesFor(task) {
		by = append(by, v.By)
	}
	if !slices.Equal(by, want) {
		t.Fatalf("votes by %v, want %v", by, want)
	}
	if _, d := b.counts("prod"); d != 0 {
		t.Fatalf("deploy ran %d times before the quorum", d)
	}
}

// Quorum 2 (SPEC §12) with the deployment trusting by: one approval keeps
// the call pending (the conversation paused), the same identity again
// too; a second identity's approval runs it, once.
func TestQuorumTwoApprovers(t *testing.T) {
	b := setup(t)
	b.trust = true
	b.approval = &session.ApprovalPolicy{Required: 2}
	r := b.replica(t, "r1")
	f := r.start(t, "deploy prod")
	task := paused(t, f)
	if c, err := r.svc.Get(context.Background(), f.ConversationID); err != nil || len(c.Pending) != 1 || c.Pending[0].Required != 2 {
		t.Errorf("paused conversation %+v, %v; want its call pending with required 2", c, err)
	}
	// The run's end says so too: its Final and its stored final event.
	if f.Pending[0].Required != 2 {
		t.Errorf("the paused run's Final lists %+v, want required 2", f.Pending)
	}
	if ev := lastEvent(t, r, f.ConversationID); ev.Type != string(agent.EventFinal) || len(ev.Pending) != 1 || ev.Pending[0].Required != 2 {
		t.Errorf("the paused run's final event %+v, want its call pending with required 2", ev)
	}
	seq := publishDecision(t, r.js, f.ConversationID, task, `{"approved":true,"by":"ann"}`)
	stillPending(t, b, readPast(t, r, f.ConversationID, seq), task, "ann")
	seq = publishDecision(t, r.js, f.ConversationID, task, `{"approved":true,"by":"ann"}`)
	stillPending(t, b, readPast(t, r, f.ConversationID, seq), task, "ann")
	if c, err := r.svc.Get(context.Background(), f.ConversationID); err != nil || c.Status != "paused" {
		t.Fatalf("conversation after one approver: %+v, %v", c, err)
	}
	publishDecision(t, r.js, f.ConversationID, task, `{"approved":true,"by":"bob"}`)
	offloadtest.WaitOrTimeout(t, b.finished, "the continuation")
	finished(t, r, f.ConversationID, "done deployed prod")
	if c, d := b.counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}
}

// Without --trust-nats-by, raw approvals of a call that needs a quorum
// are not counted (by is only claimed); a denial denies at once, whoever
// sent it, and its text reaches the model.
func TestQuorumUntrustedAndDenial(t *testing.T) {
	b := setup(t)
	b.approval = &session.ApprovalPolicy{Required: 2}
	r := b.replica(t, "r1")
	f := r.start(t, "deploy prod")
	task := paused(t, f)
	publishDecision(t, r.js, f.ConversationID, task, `{"approved":true,"by":"ann"}`)
	seq := publishDecision(t, r.js, f.ConversationID, task, `{"approved":true,"by":"bob"}`)
	stillPending(t, b, readPast(t, r, f.ConversationID, seq), task)
	publishDecision(t, r.js, f.ConversationID, task, `{"approved":false,"by":"cy","message":"not today"}`)
	offloadtest.WaitOrTimeout(t, b.finished, "the continuation")
	finished(t, r, f.ConversationID, "done not today")
	if _, d := b.counts("prod"); d != 0 {
		t.Fatalf("the denied call ran %d times", d)
	}
}

// quorumAPI serves r's HTTP API with two approvers, ann and bob, the
// decisions it publishes authenticated by ids (nil: none, as agent
// approve's).
func quorumAPI(t *testing.T, r *replica, ids *convstore.Identities) *httptest.Server {
	t.Helper()
	tokens, err := serve.ParseTokens(strings.NewReader(opToken + " operator ops\nann-token-0123456789 approver ann\nbob-token-0123456789 approver bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := convstore.OpenPending(context.Background(), convstore.OpenConfig{JetStream: r.js})
	if err != nil {
		t.Fatal(err)
	}
	pending.Identities = ids
	srv := httptest.NewServer(serve.Handler(serve.HandlerConfig{Service: r.svc, Tokens: tokens, Publisher: serve.PendingPublisher{Pending: pending}, Pending: pending, Inbox: pending}))
	t.Cleanup(srv.Close)
	return srv
}

// Over the API (SPEC §12), without --trust-nats-by: the API signs its
// decisions with the service's key, so a first approval of a call that
// needs two is counted, 200, and leaves it in GET /v1/pending with
// required 2; the same approver again is 409 duplicate_identity; the
// second approver's runs the call once. Unsigned (a publisher without
// the key, as agent approve), an approval is 422 unauthenticated.
func TestQuorumOverAPI(t *testing.T) {
	b := setup(t)
	b.approval = &session.ApprovalPolicy{Required: 2}
	r := b.replica(t, "r1")
	srv := quorumAPI(t, r, b.identities())
	f := r.start(t, "deploy prod")
	task := paused(t, f)
	decision := "/v1/conversations/" + f.ConversationID + "/calls/" + task + "/decision"
	if code, m := call(t, srv, "POST", decision, "ann-token-0123456789", `{"approved":true}`); code != 200 {
		t.Fatalf("ann's approval: %d %v", code, m)
	}
	// Counted once the replica woken by it has read it (no signal outside
	// the replica: the pending record is polled).
	offloadtest.Eventually(t, "ann's approval counted in GET /v1/pending", func() error {
		code, list := call(t, srv, "GET", "/v1/pending", opToken, "")
		calls, _ := list["pending"].([]any)
		if code != 200 || len(calls) != 1 {
			return fmt.Errorf("%d %v", code, list)
		}
		c := calls[0].(map[string]any)
		approvals, _ := c["approvals"].([]any)
		if c["required"] != 2.0 || len(approvals) != 1 || approvals[0].(map[string]any)["by"] != "ann" {
			return fmt.Errorf("%v", c)
		}
		return nil
	})
	if resp, page := send(t, clientWith(t, srv, "ann-token-0123456789"), "GET", srv.URL+"/", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "1 of 2 approved by <strong>ann</strong>") {
		t.Errorf("the inbox after ann's approval: %d, no \"1 of 2 approved by ann\": %s", resp.StatusCode, page)
	}
	if code, m := call(t, srv, "POST", decision, "ann-token-0123456789", `{"approved":true}`); code != 409 || errCode(m) != conversation.ReasonDuplicateIdentity {
		t.Fatalf("ann again: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", decision, "bob-token-0123456789", `{"approved":true}`); code != 200 {
		t.Fatalf("bob's approval: %d %v", code, m)
	}
	offloadtest.WaitOrTimeout(t, b.finished, "the continuation")
	finished(t, r, f.ConversationID, "done deployed prod")
	if c, d := b.counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}

	untrusted := quorumAPI(t, r, nil)
	f = r.start(t, "deploy staging")
	task = paused(t, f)
	decision = "/v1/conversations/" + f.ConversationID + "/calls/" + task + "/decision"
	if code, m := call(t, untrusted, "POST", decision, "ann-token-0123456789", `{"approved":true}`); code != 422 || errCode(m) != conversation.ReasonUnauthenticated {
		t.Fatalf("an unsigned approval: %d %v", code, m)
	}
}

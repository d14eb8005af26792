package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// publishDecision publishes data on conversation conv's task's decision
// subject, as nats pub does, and returns its stream sequence.
func publishDecision(t *testing.T, js jetstream.JetStream, conv, task, data string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
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
func lastEvent(t *testing.T, r *servetest.Replica, conv string) storedFinal {
	t.Helper()
	ctx := context.Background()
	stream, err := r.JS.Stream(ctx, "TOOLS_EVENTS")
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
func readPast(t *testing.T, r *servetest.Replica, conv string, seq uint64) *conversation.State {
	t.Helper()
	var st *conversation.State
	offloadtest.Eventually(t, fmt.Sprintf("decisions read up to %d", seq), func() error {
		var err error
		if st, _, err = r.Convs.Store.Load(context.Background(), conv); err != nil {
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
func stillPending(t *testing.T, b *servetest.World, st *conversation.State, task string, want ...string) {
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
	if _, d := b.Counts("prod"); d != 0 {
		t.Fatalf("deploy ran %d times before the quorum", d)
	}
}

// Quorum 2 (SPEC §12) with the deployment trusting by: one approval keeps
// the call pending (the conversation paused), the same identity again
// too; a second identity's approval runs it, once.
func TestQuorumTwoApprovers(t *testing.T) {
	b := servetest.Setup(t)
	b.Trust = true
	b.Approval = &session.ApprovalPolicy{Required: 2}
	r := b.Replica(t, "r1")
	f := r.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	if c, err := r.Svc.Get(context.Background(), f.ConversationID); err != nil || len(c.Pending) != 1 || c.Pending[0].Required != 2 {
		t.Errorf("paused conversation %+v, %v; want its call pending with required 2", c, err)
	}
	// The run's end says so too: its Final and its stored final event.
	if f.Pending[0].Required != 2 {
		t.Errorf("the paused run's Final lists %+v, want required 2", f.Pending)
	}
	if ev := lastEvent(t, r, f.ConversationID); ev.Type != string(agent.EventFinal) || len(ev.Pending) != 1 || ev.Pending[0].Required != 2 {
		t.Errorf("the paused run's final event %+v, want its call pending with required 2", ev)
	}
	seq := publishDecision(t, r.JS, f.ConversationID, task, `{"approved":true,"by":"ann"}`)
	stillPending(t, b, readPast(t, r, f.ConversationID, seq), task, "ann")
	seq = publishDecision(t, r.JS, f.ConversationID, task, `{"approved":true,"by":"ann"}`)
	stillPending(t, b, readPast(t, r, f.ConversationID, seq), task, "ann")
	if c, err := r.Svc.Get(context.Background(), f.ConversationID); err != nil || c.Status != "paused" {
		t.Fatalf("conversation after one approver: %+v, %v", c, err)
	}
	publishDecision(t, r.JS, f.ConversationID, task, `{"approved":true,"by":"bob"}`)
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r, f.ConversationID, "done deployed prod")
	if c, d := b.Counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}
}

// Without --trust-nats-by, raw approvals of a call that needs a quorum
// are not counted (by is only claimed); a denial denies at once, whoever
// sent it, and its text reaches the model.
func TestQuorumUntrustedAndDenial(t *testing.T) {
	b := servetest.Setup(t)
	b.Approval = &session.ApprovalPolicy{Required: 2}
	r := b.Replica(t, "r1")
	f := r.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	publishDecision(t, r.JS, f.ConversationID, task, `{"approved":true,"by":"ann"}`)
	seq := publishDecision(t, r.JS, f.ConversationID, task, `{"approved":true,"by":"bob"}`)
	stillPending(t, b, readPast(t, r, f.ConversationID, seq), task)
	publishDecision(t, r.JS, f.ConversationID, task, `{"approved":false,"by":"cy","message":"not today"}`)
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r, f.ConversationID, "done not today")
	if _, d := b.Counts("prod"); d != 0 {
		t.Fatalf("the denied call ran %d times", d)
	}
}

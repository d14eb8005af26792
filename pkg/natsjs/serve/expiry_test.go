package serve_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// An approval with a timeout expires while no agent or replica runs: the
// server writes the decision by "timeout" on the decision subject at the
// timeout, and the replica that starts later continues the conversation
// with the expiry's text for the model (never a person's denial), the
// history saying by timeout.
func TestExpiryWithNoReplicaRunning(t *testing.T) {
	b := servetest.Setup(t)
	b.Approval = &session.ApprovalPolicy{Timeout: time.Second, OnTimeout: session.OnTimeoutDeny, Message: "nobody was around"}
	r1 := b.Replica(t, "r1")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	announced := time.Now()
	r1.Close(t)
	decided := servetest.DecisionsOf(t, r1.JS, f.ConversationID, task)
	m := offloadtest.WaitOrTimeout(t, decided, "the timeout's decision")
	d, err := protocol.DecodeDecision(m.Data(), nil)
	if err != nil || d.Approved || d.By != "timeout" || d.Reason != "expired" || d.Message != "nobody was around" {
		t.Fatalf("the timeout's decision: %s, %v", m.Data(), err)
	}
	meta, _ := m.Metadata()
	if at := meta.Timestamp; at.Before(announced.Add(time.Second - 50*time.Millisecond)) {
		t.Errorf("stored at %v, before the timeout (announced %v)", at, announced)
	}
	r2 := b.Replica(t, "r2")
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	want := "done Tool 'deploy' (task " + task + ") was not approved in time: nobody was around"
	servetest.Finished(t, r2, f.ConversationID, want)
	if _, deploys := b.Counts("prod"); deploys != 0 {
		t.Errorf("the expired call ran %d times", deploys)
	}
	st, err := r2.Convs.Load(context.Background(), f.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(st.History); !strings.Contains(string(raw), `"by":"timeout"`) {
		t.Errorf("the history's decision is not by timeout: %s", raw)
	}
}

// On a server without schedules the replicas write the timeouts
// themselves (the fallback): two replicas sweep, one timeout's decision
// is stored, and the conversation continues with the expiry's text.
func TestExpiryByReplicaTimers(t *testing.T) {
	b := servetest.Setup(t)
	b.Timers = true
	b.Approval = &session.ApprovalPolicy{Timeout: time.Second, OnTimeout: session.OnTimeoutDeny, Message: "too late"}
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	decided := servetest.DecisionsOf(t, r2.JS, f.ConversationID, task)
	if m := offloadtest.WaitOrTimeout(t, decided, "the timeout's decision"); !strings.Contains(string(m.Data()), `"by":"timeout"`) {
		t.Fatalf("decision %s", m.Data())
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r1, f.ConversationID, "done Tool 'deploy' (task "+task+") was not approved in time: too late")
	s, err := r1.JS.Stream(t.Context(), "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("tools.decision."+f.ConversationID+"."+task))
	if err != nil || info.State.Subjects["tools.decision."+f.ConversationID+"."+task] != 1 {
		t.Errorf("decisions stored for the task: %v, %v; want 1", info.State.Subjects, err)
	}
}

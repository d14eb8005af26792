package serve_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// decisionsOf returns the decisions stored on task's decision subject
// from now on, each once stored (an ordered consumer: the signal of the
// server's own write at a timeout).
func decisionsOf(t *testing.T, js jetstream.JetStream, conv, task string) <-chan jetstream.Msg {
	t.Helper()
	c, err := js.OrderedConsumer(t.Context(), "TOOLS_DECISIONS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.decision." + conv + "." + task}})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan jetstream.Msg, 8)
	cc, err := c.Consume(func(m jetstream.Msg) { out <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return out
}

// An approval with a timeout expires while no agent or replica runs: the
// server writes the decision by "timeout" on the decision subject at the
// timeout, and the replica that starts later continues the conversation
// with the expiry's text for the model (never a person's denial), the
// history saying by timeout.
func TestExpiryWithNoReplicaRunning(t *testing.T) {
	b := setup(t)
	b.approval = &session.ApprovalPolicy{Timeout: time.Second, OnTimeout: session.OnTimeoutDeny, Message: "nobody was around"}
	r1 := b.replica(t, "r1")
	f := r1.start(t, "deploy prod")
	task := paused(t, f)
	announced := time.Now()
	r1.close(t)
	decided := decisionsOf(t, r1.js, f.ConversationID, task)
	m := offloadtest.WaitOrTimeout(t, decided, "the timeout's decision")
	d, err := protocol.DecodeDecision(m.Data(), nil)
	if err != nil || d.Approved || d.By != "timeout" || d.Reason != "expired" || d.Message != "nobody was around" {
		t.Fatalf("the timeout's decision: %s, %v", m.Data(), err)
	}
	meta, _ := m.Metadata()
	if at := meta.Timestamp; at.Before(announced.Add(time.Second - 50*time.Millisecond)) {
		t.Errorf("stored at %v, before the timeout (announced %v)", at, announced)
	}
	r2 := b.replica(t, "r2")
	offloadtest.WaitOrTimeout(t, b.finished, "the continuation")
	want := "done Tool 'deploy' (task " + task + ") was not approved in time: nobody was around"
	finished(t, r2, f.ConversationID, want)
	if _, deploys := b.counts("prod"); deploys != 0 {
		t.Errorf("the expired call ran %d times", deploys)
	}
	st, err := r2.convs.Load(context.Background(), f.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(st.History); !strings.Contains(string(raw), `"by":"timeout"`) {
		t.Errorf("the history's decision is not by timeout: %s", raw)
	}
}

// A person's decision before the timeout wins: the call runs, and the
// timeout's decision, written later all the same, is refused (the
// conversation is continued once, the tool run once). The timeout is the
// tool's metadata's here, over the agent's.
func TestExpiryAfterAPersonDecided(t *testing.T) {
	b := setup(t)
	b.approval = &session.ApprovalPolicy{Timeout: time.Hour, OnTimeout: session.OnTimeoutApprove}
	b.deployMeta = map[string]any{"approval": map[string]any{"timeout": "1s", "on_timeout": "deny"}}
	r := b.replica(t, "r1")
	f := r.start(t, "deploy prod")
	task := paused(t, f)
	// The inbox says when and how the call expires.
	srv := inboxServer(t, r)
	if _, page := send(t, clientWith(t, srv, approverToken), "GET", srv.URL+"/", nil, nil); !strings.Contains(page, `<span class="expires">deny at `) {
		t.Errorf("the inbox does not say when the call expires:\n%s", page)
	}
	decided := decisionsOf(t, r.js, f.ConversationID, task)
	b.decide(t, r.js, f.ConversationID, task)
	if m := offloadtest.WaitOrTimeout(t, decided, "the person's decision"); !strings.Contains(string(m.Data()), `"by":"ann"`) {
		t.Fatalf("first decision %s", m.Data())
	}
	offloadtest.WaitOrTimeout(t, b.finished, "the continuation")
	finished(t, r, f.ConversationID, "done deployed prod")
	if m := offloadtest.WaitOrTimeout(t, decided, "the timeout's decision, later"); !strings.Contains(string(m.Data()), `"by":"timeout"`) {
		t.Fatalf("second decision %s", m.Data())
	}
	// The timeout's decision wakes the conversation to no effect: it stays
	// finished as the person's decision left it.
	r.close(t)
	r2 := b.replica(t, "r2")
	finished(t, r2, f.ConversationID, "done deployed prod")
	if c, d := b.counts("prod"); c != 1 || d != 1 {
		t.Errorf("%d continuations, %d deploys; want 1 and 1", c, d)
	}
}

// On a server without schedules the replicas write the timeouts
// themselves (the fallback): two replicas sweep, one timeout's decision
// is stored, and the conversation continues with the expiry's text.
func TestExpiryByReplicaTimers(t *testing.T) {
	b := setup(t)
	b.timers = true
	b.approval = &session.ApprovalPolicy{Timeout: time.Second, OnTimeout: session.OnTimeoutDeny, Message: "too late"}
	r1, r2 := b.replica(t, "r1"), b.replica(t, "r2")
	f := r1.start(t, "deploy prod")
	task := paused(t, f)
	decided := decisionsOf(t, r2.js, f.ConversationID, task)
	if m := offloadtest.WaitOrTimeout(t, decided, "the timeout's decision"); !strings.Contains(string(m.Data()), `"by":"timeout"`) {
		t.Fatalf("decision %s", m.Data())
	}
	offloadtest.WaitOrTimeout(t, b.finished, "the continuation")
	finished(t, r1, f.ConversationID, "done Tool 'deploy' (task "+task+") was not approved in time: too late")
	s, err := r1.js.Stream(t.Context(), "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("tools.decision."+f.ConversationID+"."+task))
	if err != nil || info.State.Subjects["tools.decision."+f.ConversationID+"."+task] != 1 {
		t.Errorf("decisions stored for the task: %v, %v; want 1", info.State.Subjects, err)
	}
}

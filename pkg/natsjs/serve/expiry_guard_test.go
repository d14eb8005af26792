package serve_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// An agent credential may publish on the expiries stream (agent run
// schedules its approvals' timeouts there) and the stream must allow
// roll-ups (the server's schedules need them): one message with
// Nats-Rollup: all wipes every scheduled timeout. The replicas see the
// roll-up and schedule the timeouts of the calls that wait again, from
// their pending records: the call whose schedule was wiped (here by a
// roll-up published on its own schedule's subject, in place of it) still
// expires at its time, and one past its time by then is decided at once.
func TestExpiryScheduleRolledUp(t *testing.T) {
	b := servetest.Setup(t)
	b.Approval = &session.ApprovalPolicy{Timeout: 2 * time.Second, OnTimeout: session.OnTimeoutDeny, Message: "too late"}
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	decided := servetest.DecisionsOf(t, r2.JS, f.ConversationID, task)

	// The attack: a plain message, no schedule, that rolls the stream up.
	m := nats.NewMsg("tools.expiry." + f.ConversationID + "." + task + ".at")
	m.Header.Set("Nats-Rollup", "all")
	m.Data = []byte("{}")
	if _, err := r1.JS.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	s, err := r1.JS.Stream(t.Context(), "TOOLS_EXPIRIES")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(t.Context()); err != nil || info.State.Msgs != 1 {
		t.Fatalf("the roll-up left %v messages (%v); want 1", info.State.Msgs, err)
	}
	offloadtest.WaitOrTimeout(t, decided, "the timeout's decision, scheduled again")
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r1, f.ConversationID, "done Tool 'deploy' (task "+task+") was not approved in time: too late")
	if _, deploys := b.Counts("prod"); deploys != 0 {
		t.Errorf("the expired call ran %d times", deploys)
	}
}

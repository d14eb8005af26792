package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// A person's decision before the timeout wins: the call runs, and the
// timeout's decision, written later all the same, is refused (the
// conversation is continued once, the tool run once). The timeout is the
// tool's metadata's here, over the agent's.
func TestExpiryAfterAPersonDecided(t *testing.T) {
	b := servetest.Setup(t)
	b.Approval = &session.ApprovalPolicy{Timeout: time.Hour, OnTimeout: session.OnTimeoutApprove}
	b.DeployMeta = map[string]any{"approval": map[string]any{"timeout": "1s", "on_timeout": "deny"}}
	r := b.Replica(t, "r1")
	f := r.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	// The inbox says when and how the call expires.
	srv := inboxServer(t, r)
	if _, page := send(t, clientWith(t, srv, approverToken), "GET", srv.URL+"/", nil, nil); !strings.Contains(page, `<span class="expires">deny at `) {
		t.Errorf("the inbox does not say when the call expires:\n%s", page)
	}
	decided := servetest.DecisionsOf(t, r.JS, f.ConversationID, task)
	b.Decide(t, r.JS, f.ConversationID, task)
	if m := offloadtest.WaitOrTimeout(t, decided, "the person's decision"); !strings.Contains(string(m.Data()), `"by":"ann"`) {
		t.Fatalf("first decision %s", m.Data())
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r, f.ConversationID, "done deployed prod")
	if m := offloadtest.WaitOrTimeout(t, decided, "the timeout's decision, later"); !strings.Contains(string(m.Data()), `"by":"timeout"`) {
		t.Fatalf("second decision %s", m.Data())
	}
	// The timeout's decision wakes the conversation to no effect: it stays
	// finished as the person's decision left it.
	r.Close(t)
	r2 := b.Replica(t, "r2")
	servetest.Finished(t, r2, f.ConversationID, "done deployed prod")
	if c, d := b.Counts("prod"); c != 1 || d != 1 {
		t.Errorf("%d continuations, %d deploys; want 1 and 1", c, d)
	}
}

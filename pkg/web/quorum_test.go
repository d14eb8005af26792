package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// quorumAPI serves r's HTTP API with two approvers, ann and bob, the
// decisions it publishes authenticated by ids (nil: none, as agent
// approve's).
func quorumAPI(t *testing.T, r *servetest.Replica, ids *convstore.Identities) *httptest.Server {
	t.Helper()
	if ids == nil {
		ids = &convstore.Identities{} // signs nothing, trusts no by
	}
	srv, _ := r.Face(t, opToken+" operator ops\nann-token-0123456789 approver ann\nbob-token-0123456789 approver bob\n", agentproc.FaceOptions{Identities: ids})
	return srv
}

// Over the API (SPEC §12), without --trust-nats-by: the API signs its
// decisions with the service's key, so a first approval of a call that
// needs two is counted, 200, and leaves it in GET /v1/pending with
// required 2; the same approver again is 409 duplicate_identity; the
// second approver's runs the call once. Unsigned (a publisher without
// the key, as agent approve), an approval is 422 unauthenticated.
func TestQuorumOverAPI(t *testing.T) {
	b := servetest.Setup(t)
	b.Approval = &session.ApprovalPolicy{Required: 2}
	r := b.Replica(t, "r1")
	srv := quorumAPI(t, r, b.Identities())
	f := r.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
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
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r, f.ConversationID, "done deployed prod")
	if c, d := b.Counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}

	untrusted := quorumAPI(t, r, nil)
	f = r.Start(t, "deploy staging")
	task = servetest.Paused(t, f)
	decision = "/v1/conversations/" + f.ConversationID + "/calls/" + task + "/decision"
	if code, m := call(t, untrusted, "POST", decision, "ann-token-0123456789", `{"approved":true}`); code != 422 || errCode(m) != conversation.ReasonUnauthenticated {
		t.Fatalf("an unsigned approval: %d %v", code, m)
	}
}

package web_test

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// POST …/cancel interrupts a conversation's live run on whichever replica
// runs it (SIGINT's semantics: its live tool cancelled, its state saved,
// the run failed as cancelled); 409 when no run of it is live, 404 for an
// unknown conversation, 403 for a viewer.
func TestCancelOnAnotherReplica(t *testing.T) {
	b := servetest.Setup(t)
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	srv, _ := apiWithMetrics(t, r2)
	run, err := r1.Svc.StartConversation(t.Context(), "ops", "slow job", "")
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, b.SlowStarted, "the slow tool")
	path := "/v1/conversations/" + run.ConversationID + "/cancel"
	if code, m := call(t, srv, "POST", path, viewerToken, ""); code != 403 {
		t.Fatalf("a viewer cancelling: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", path, opToken, ""); code != 202 || m["cancelling"] != true {
		t.Fatalf("cancel: %d %v", code, m)
	}
	offloadtest.WaitOrTimeout(t, run.Done(), "the cancelled run's end")
	if f := run.Final(); f.Status != "failed" || !strings.Contains(f.Error, "cancelled over the API") {
		t.Fatalf("the cancelled run: %+v", f)
	}
	if code, m := call(t, srv, "POST", path, opToken, ""); code != 409 || errCode(m) != "not_running" {
		t.Fatalf("cancel of an ended run: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations/01M8SXWG4QJ775EVHYEQV8ABNF/cancel", opToken, ""); code != 404 {
		t.Fatalf("cancel of an unknown conversation: %d %v", code, m)
	}
	if code, v := call(t, srv, "GET", "/v1/conversations/"+run.ConversationID, viewerToken, ""); code != 200 || v["status"] != "failed" {
		t.Fatalf("view of the cancelled conversation: %d %v", code, v)
	}
}

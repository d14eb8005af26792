package web_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// GET /v1/conversations lists what agent serve has run, by ?status=, from
// the status index every replica writes; a run that ends in an error is
// failed; offload_conversations{status} counts the index on any replica.
func TestConversationStatuses(t *testing.T) {
	b := servetest.Setup(t)
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	srv, _ := apiWithMetrics(t, r2)
	paused := r1.Start(t, "deploy prod")
	task := paused.Pending[0].TaskID
	failed := r2.Start(t, "fail now")
	if failed.Status != "failed" {
		t.Fatalf("the failing run: %+v", failed)
	}
	type entry struct {
		ConversationID string `json:"conversation_id"`
		Agent          string `json:"agent"`
		Status         string `json:"status"`
	}
	var list struct {
		Conversations []entry `json:"conversations"`
	}
	if code := callJSON(t, srv, "GET", "/v1/conversations", viewerToken, "", &list); code != 200 || len(list.Conversations) != 2 {
		t.Fatalf("list: %d %+v", code, list)
	}
	for status, want := range map[string]string{"paused": paused.ConversationID, "failed": failed.ConversationID} {
		if code := callJSON(t, srv, "GET", "/v1/conversations?status="+status, viewerToken, "", &list); code != 200 || len(list.Conversations) != 1 ||
			list.Conversations[0] != (entry{want, "ops", status}) {
			t.Errorf("list ?status=%s: %d %+v, want %s", status, code, list, want)
		}
	}
	if code, m := call(t, srv, "GET", "/v1/conversations?status=lost", viewerToken, ""); code != 400 {
		t.Errorf("list ?status=lost: %d %v", code, m)
	}
	if code, m := call(t, srv, "GET", "/v1/conversations", "", ""); code != 401 {
		t.Errorf("list without a token: %d %v", code, m)
	}
	if code, v := call(t, srv, "GET", "/v1/conversations/"+failed.ConversationID, viewerToken, ""); code != 200 || v["status"] != "failed" {
		t.Errorf("view of the failed conversation: %d %v", code, v)
	}
	gauge := func(running, paused, finished, failed int) string {
		return `# HELP offload_conversations Stored conversations, by status (running, paused, finished, failed), from the store.
# TYPE offload_conversations gauge
offload_conversations{status="failed"} ` + strconv.Itoa(failed) + `
offload_conversations{status="finished"} ` + strconv.Itoa(finished) + `
offload_conversations{status="paused"} ` + strconv.Itoa(paused) + `
offload_conversations{status="running"} ` + strconv.Itoa(running) + "\n"
	}
	if err := testutil.CollectAndCompare(r2.Svc.ConversationsCollector(), strings.NewReader(gauge(0, 1, 0, 1))); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(r1.Svc.ConversationsCollector()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	b.Decide(t, r1.JS, paused.ConversationID, task)
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r1, paused.ConversationID, "done deployed prod")
	// The continuation's end is saved before its status: the index is
	// polled.
	offloadtest.Eventually(t, "the status index says finished", func() error {
		return testutil.CollectAndCompare(r1.Svc.ConversationsCollector(), strings.NewReader(gauge(0, 0, 1, 1)))
	})
}

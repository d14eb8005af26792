package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// callJSON makes a request with token and decodes the answer into out.
func callJSON(t *testing.T, srv *httptest.Server, method, path, token, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode
}

// history is the stored JSON form of a history (message.History).
type history struct {
	Version  int              `json:"version"`
	Messages []map[string]any `json:"messages"`
}

// The routes of SPEC §11 beyond start, view, events and decision: GET
// /v1/pending with its filters; POST …/messages refused while calls are
// pending (409) and continuing a conversation with nothing pending; POST
// …/answer (403 for a role without answers, 404 an unknown task, 422 an
// answer to an approval); GET …/history; each with its role.
func TestHTTPRoutes(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := apiWithMetrics(t, r)
	code, final := call(t, srv, "POST", "/v1/conversations?wait=1", opToken, `{"agent":"ops","prompt":"deploy prod"}`)
	if code != 200 || final["status"] != "paused" {
		t.Fatalf("start: %d %v", code, final)
	}
	conv := final["conversation_id"].(string)
	task := final["pending"].([]any)[0].(map[string]any)["task_id"].(string)
	base := "/v1/conversations/" + conv

	var list struct {
		Pending []struct {
			ConversationID string `json:"conversation_id"`
			Agent          string `json:"agent"`
			Prompt         string `json:"prompt"`
			TaskID         string `json:"task_id"`
			Kind           string `json:"kind"`
			Tool           string `json:"tool"`
		} `json:"pending"`
	}
	if code := callJSON(t, srv, "GET", "/v1/pending", viewerToken, "", &list); code != 200 || len(list.Pending) != 1 {
		t.Fatalf("pending: %d %+v", code, list)
	}
	if p := list.Pending[0]; p.ConversationID != conv || p.Agent != "ops" || p.TaskID != task || p.Kind != "approval" || p.Tool != "deploy" || p.Prompt != "deploy prod" {
		t.Fatalf("pending call: %+v", p)
	}
	for _, q := range []string{"?kind=external", "?tool=slow", "?kind=background&tool=deploy"} {
		if code := callJSON(t, srv, "GET", "/v1/pending"+q, approverToken, "", &list); code != 200 || len(list.Pending) != 0 {
			t.Errorf("pending%s: %d %+v, want none", q, code, list)
		}
	}
	if code := callJSON(t, srv, "GET", "/v1/pending?kind=approval&tool=deploy", answerToken, "", &list); code != 200 || len(list.Pending) != 1 {
		t.Errorf("pending of approvals of deploy: %d %+v, want one", code, list)
	}
	if code, m := call(t, srv, "GET", "/v1/pending?kind=bogus", viewerToken, ""); code != 400 {
		t.Errorf("pending?kind=bogus: %d %v", code, m)
	}
	// A conversation ID that is not one is 400 on every route naming one.
	for _, rt := range []struct{ method, path, token, body string }{
		{"GET", "/v1/conversations/not-an-id", viewerToken, ""},
		{"GET", "/v1/conversations/not-an-id/history", viewerToken, ""},
		{"POST", "/v1/conversations/not-an-id/messages", opToken, `{"prompt":"x"}`},
		{"POST", "/v1/conversations/not-an-id/cancel", opToken, ""},
	} {
		if code, m := call(t, srv, rt.method, rt.path, rt.token, rt.body); code != 400 || errCode(m) != "bad_request" {
			t.Errorf("%s %s: %d %v, want 400 bad_request", rt.method, rt.path, code, m)
		}
	}

	if code, m := call(t, srv, "POST", base+"/messages", opToken, `{"prompt":"deploy stage"}`); code != 409 || errCode(m) != "pending" {
		t.Fatalf("a message while a call is pending: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", base+"/messages", viewerToken, `{"prompt":"deploy stage"}`); code != 403 {
		t.Fatalf("a viewer's message: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", base+"/calls/"+task+"/answer", approverToken, `{"content":"42"}`); code != 403 {
		t.Fatalf("an approver answering: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", base+"/calls/01M8SXWG4QJ775EVHYEQV8ABNF/answer", answerToken, `{"content":"42"}`); code != 404 || errCode(m) != "unknown_task" {
		t.Fatalf("an answer to an unknown task: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", base+"/calls/"+task+"/answer", answerToken, `{"content":"42"}`); code != 422 {
		t.Fatalf("an answer to an approval: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", base+"/calls/"+task+"/answer", answerToken, `not json`); code != 400 {
		t.Fatalf("an answer that is not JSON: %d %v", code, m)
	}

	if code, m := call(t, srv, "POST", base+"/calls/"+task+"/decision", approverToken, `{"approved":true}`); code != 200 {
		t.Fatalf("decision: %d %v", code, m)
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r, conv, "done deployed prod")

	var hist history
	if code := callJSON(t, srv, "GET", base+"/history", viewerToken, "", &hist); code != 200 || hist.Version != 2 || len(hist.Messages) != 4 {
		t.Fatalf("history: %d %v", code, hist)
	}
	if code, m := call(t, srv, "GET", "/v1/conversations/01M8SXWG4QJ775EVHYEQV8ABNF/history", viewerToken, ""); code != 404 || errCode(m) != "not_found" {
		t.Fatalf("history of an unknown conversation: %d %v", code, m)
	}
	if code, m := call(t, srv, "GET", base+"/history", "", ""); code != 401 {
		t.Fatalf("history without a token: %d %v", code, m)
	}

	code, final = call(t, srv, "POST", base+"/messages?wait=1", opToken, `{"prompt":"deploy stage"}`)
	if code != 200 || final["type"] != "final" || final["status"] != "paused" || final["conversation_id"] != conv {
		t.Fatalf("a message continuing the finished conversation: %d %v", code, final)
	}
	var again history
	if code := callJSON(t, srv, "GET", base+"/history", opToken, "", &again); code != 200 || len(again.Messages) <= len(hist.Messages) {
		t.Fatalf("history after the message: %d, %d messages, want more than %d", code, len(again.Messages), len(hist.Messages))
	}
}

// /readyz looks at the wake consumers on the server: one deleted (an
// operator's mistake, a stream recreated) makes the replica not ready,
// naming it.
func TestReadyzChecksWakeConsumers(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := apiWithMetrics(t, r)
	if code, m := call(t, srv, "GET", "/readyz", "", ""); code != 200 {
		t.Fatalf("readyz: %d %v", code, m)
	}
	if err := r.JS.DeleteConsumer(t.Context(), "TOOLS_DECISIONS", "wake"); err != nil {
		t.Fatal(err)
	}
	code, m := call(t, srv, "GET", "/readyz", "", "")
	if e, _ := m["error"].(map[string]any); code != 503 || errCode(m) != "not_ready" || !strings.Contains(fmt.Sprint(e["message"]), "TOOLS_DECISIONS") {
		t.Fatalf("readyz without the decisions' wake consumer: %d %v", code, m)
	}
}

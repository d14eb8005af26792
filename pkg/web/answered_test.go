package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// An external call's answer is attributed on the conversation's timeline
// (SPEC §21): one given over the API names the answerer's token (and
// channel api), one given in the inbox the person logged in (channel
// inbox), whatever by or channel the body claimed; one published raw
// on NATS names no one (answered on the wire, not signed), not the by
// its publisher chose. The history API carries the same note.
func TestAnswersAttributed(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, adminToken+" admin alice\n"+answerToken+" answerer bea\n"+viewerToken+" viewer val\n", agentproc.FaceOptions{})
	viewer := clientWith(t, srv, viewerToken)
	page := func(conv string) string {
		t.Helper()
		resp, body := send(t, viewer, "GET", srv.URL+"/conversations/"+conv, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("conversation page: %d %s", resp.StatusCode, body)
		}
		return body
	}

	api := r.Start(t, "ask question")
	convAPI, taskAPI := api.ConversationID, servetest.Paused(t, api)
	if code, m := call(t, srv, "POST", "/v1/conversations/"+convAPI+"/calls/"+taskAPI+"/answer", answerToken,
		`{"content":"42","by":"mallory","channel":"inbox"}`); code != 200 || m["by"] != "bea" {
		t.Fatalf("answer over the API: %d %v", code, m)
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation after the API's answer")
	servetest.Finished(t, r, convAPI, "done 42")
	if body := page(convAPI); !strings.Contains(body, `answered by <strong class="by">bea</strong> via <span class="channel">api</span>`) ||
		strings.Contains(body, "mallory") {
		t.Errorf("the timeline of the API's answer does not name bea over api alone:\n%s", body)
	}
	var hist struct {
		Messages json.RawMessage `json:"messages"`
	}
	if code := callJSON(t, srv, "GET", "/v1/conversations/"+convAPI+"/history", viewerToken, "", &hist); code != 200 {
		t.Fatalf("history: %d", code)
	}
	if raw := string(hist.Messages); !strings.Contains(raw, `"offload.answer":{`) || !strings.Contains(raw, `"by":"bea","channel":"api"`) || strings.Contains(raw, "mallory") {
		t.Errorf("the history does not record bea's answer over the API: %s", raw)
	}

	inbox := r.Start(t, "ask question")
	convInbox, taskInbox := inbox.ConversationID, servetest.Paused(t, inbox)
	alice := clientWith(t, srv, adminToken)
	_, home := send(t, alice, "GET", srv.URL+"/", nil, nil)
	csrf := csrfField.FindStringSubmatch(home)
	if csrf == nil {
		t.Fatalf("the inbox has no form:\n%s", home)
	}
	if resp, body := send(t, alice, "POST", srv.URL+"/conversations/"+convInbox+"/calls/"+taskInbox+"/answer",
		url.Values{"content": {"42"}, "csrf": {csrf[1]}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("answer in the inbox: %d %s", resp.StatusCode, body)
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation after the inbox's answer")
	servetest.Finished(t, r, convInbox, "done 42")
	if body := page(convInbox); !strings.Contains(body, `answered by <strong class="by">alice</strong> via <span class="channel">inbox</span>`) {
		t.Errorf("the timeline of the inbox's answer does not name alice:\n%s", body)
	}

	raw := r.Start(t, "ask question")
	convRaw, taskRaw := raw.ConversationID, servetest.Paused(t, raw)
	js := b.Srv.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), servetest.Wait)
	defer cancel()
	if _, err := js.Publish(ctx, "tools.answer."+convRaw+"."+taskRaw, []byte(`{"content":"42","by":"mallory","channel":"api"}`)); err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation after the raw answer")
	servetest.Finished(t, r, convRaw, "done 42")
	if body := page(convRaw); !strings.Contains(body, `answered <span class="unverified"`) || !strings.Contains(body, "on the wire, not signed") ||
		strings.Contains(body, "mallory") || strings.Contains(body, "answered by") {
		t.Errorf("the timeline of a raw answer names someone, or does not say it is not signed:\n%s", body)
	}
}

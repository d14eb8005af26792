package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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
	apiEvents := rawEvents(t, srv, convAPI)
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
	if ev := answersEvent(t, apiEvents); !strings.Contains(ev, `"by":"bea","channel":"api"`) || !strings.Contains(ev, `"verified":true`) || strings.Contains(ev, "mallory") {
		t.Errorf("the events do not say bea answered over the API: %s", ev)
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
	inboxEvents := rawEvents(t, srv, convInbox)
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
	if ev := answersEvent(t, inboxEvents); !strings.Contains(ev, `"by":"alice","channel":"inbox"`) {
		t.Errorf("the events do not say alice answered in the inbox: %s", ev)
	}

	raw := r.Start(t, "ask question")
	convRaw, taskRaw := raw.ConversationID, servetest.Paused(t, raw)
	rawEv := rawEvents(t, srv, convRaw)
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
	if ev := answersEvent(t, rawEv); !strings.Contains(ev, `"channel":"nats"`) || !strings.Contains(ev, `"verified":false`) || strings.Contains(ev, "mallory") || strings.Contains(ev, `"by"`) {
		t.Errorf("the events of a raw answer name someone: %s", ev)
	}
}

// rawEvents opens conversation conv's event stream (GET
// /v1/conversations/{id}/events, from now) and sends its whole text once
// it has ended (at the run's final event).
func rawEvents(t *testing.T, srv *httptest.Server, conv string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/conversations/"+conv+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := srv.Client().Do(req) //nolint:bodyclose // closed by the goroutine that reads it
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	out := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		out <- string(raw)
	}()
	return out
}

// answersEvent returns the data of the tool_result event of stream that
// says who answered, whose end it waits for ("" when it has none).
func answersEvent(t *testing.T, stream <-chan string) string {
	t.Helper()
	for _, line := range strings.Split(offloadtest.WaitOrTimeout(t, stream, "the events' end"), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"type":"tool_result"`) && strings.Contains(data, `"answer":{`) {
			return data
		}
	}
	return ""
}

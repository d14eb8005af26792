package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
)

const (
	opToken       = "operator-token-0123456789"
	approverToken = "approver-token-0123456789"
	viewerToken   = "viewer-token-0123456789"
	adminToken    = "admin-token-0123456789"
	answerToken   = "answerer-token-0123456789"
)

// apiWithMetrics serves the HTTP API of r with the test's tokens, and the
// request counter it keeps on /metrics.
func apiWithMetrics(t *testing.T, r *servetest.Replica) (*httptest.Server, *metrics.Serve) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.NewServe(reg)
	srv, _ := r.Face(t, opToken+" operator ops\n"+approverToken+" approver ann\n# a comment\n\n"+viewerToken+" viewer val\n"+answerToken+" answerer bea\n",
		agentproc.FaceOptions{Registry: reg, Metrics: m})
	return srv, m
}

// call makes a request with token (none when empty) and decodes the
// JSON answer.
func call(t *testing.T, srv *httptest.Server, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %s: not JSON", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func errMessage(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// The API: 401 without a token or with an unknown one, 403 for a role
// without the right; a run started with ?wait=1 answers with its final
// event; a decision's by is the token's name, and it wakes the
// conversation; a second decision is 409, an unknown task 404.
func TestHTTPAPI(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, m := apiWithMetrics(t, r)
	start := `{"agent":"ops","prompt":"deploy prod"}`
	if code, m := call(t, srv, "POST", "/v1/conversations", "", start); code != 401 || errCode(m) != "unauthorized" {
		t.Fatalf("no token: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations", "nope-nope-nope-nope", start); code != 401 || errCode(m) != "unauthorized" {
		t.Fatalf("unknown token: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations", viewerToken, start); code != 403 || errCode(m) != "forbidden" {
		t.Fatalf("viewer: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations", opToken, `{"agent":"nobody","prompt":"x"}`); code != 404 || errCode(m) != "unknown_agent" {
		t.Fatalf("unknown agent: %d %v", code, m)
	}
	code, final := call(t, srv, "POST", "/v1/conversations?wait=1", opToken, start)
	if code != 200 || final["type"] != "final" || final["status"] != "paused" {
		t.Fatalf("start: %d %v", code, final)
	}
	conv := final["conversation_id"].(string)
	task := final["pending"].([]any)[0].(map[string]any)["task_id"].(string)
	code, view := call(t, srv, "GET", "/v1/conversations/"+conv, viewerToken, "")
	if code != 200 || view["status"] != "paused" || view["agent"] != "ops" || len(view["pending"].([]any)) != 1 {
		t.Fatalf("view: %d %v", code, view)
	}
	decision := "/v1/conversations/" + conv + "/calls/" + task + "/decision"
	if code, m := call(t, srv, "POST", decision, opToken, `{"approved":true}`); code != 403 {
		t.Fatalf("operator deciding: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations/"+conv+"/calls/01M8SXWG4QJ775EVHYEQV8ABNF/decision", approverToken, `{"approved":true}`); code != 404 || errCode(m) != "unknown_task" {
		t.Fatalf("unknown task: %d %v", code, m)
	}
	// Bound to the arguments (SPEC §12): a digest of other arguments is
	// refused (stale, 422), a malformed one is 400.
	stale, _ := protocol.ArgsDigest(json.RawMessage(`{"target":"staging"}`))
	if code, m := call(t, srv, "POST", decision, approverToken, `{"approved":true,"args_digest":"`+stale+`"}`); code != 422 || errCode(m) != "stale" {
		t.Fatalf("stale decision: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", decision, approverToken, `{"approved":true,"args_digest":"ABC"}`); code != 400 {
		t.Fatalf("malformed digest: %d %v", code, m)
	}
	// Override arguments failing the tool's schema are 422 and nothing is
	// published (the decision below would be 409 otherwise).
	if code, m := call(t, srv, "POST", decision, approverToken, `{"approved":true,"override_args":{"target":5}}`); code != 422 || errCode(m) != "invalid_args" ||
		!strings.Contains(errMessage(m), "target: must be a string, not an integer (5)") {
		t.Fatalf("override arguments failing the schema: %d %v", code, m)
	}
	sse := openSSE(t, srv, conv, "")
	if code, m := call(t, srv, "POST", decision, approverToken, `{"approved":true,"by":"mallory"}`); code != 200 || m["by"] != "ann" {
		t.Fatalf("decision: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", decision, approverToken, `{"approved":false}`); code != 409 || errCode(m) != "already_resolved" {
		t.Fatalf("second decision: %d %v", code, m)
	}
	// The API sent the digest of the call's arguments as pending, though
	// the request carried none.
	stored, err := r.JS.Stream(t.Context(), "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stored.GetLastMsgForSubject(t.Context(), "tools.decision."+conv+"."+task)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := protocol.ArgsDigest(json.RawMessage(`{"target":"prod"}`))
	if d, err := protocol.DecodeDecision(msg.Data, nil); err != nil || d.ArgsDigest != want {
		t.Errorf("stored decision %s: args_digest %q, want %s", msg.Data, d.ArgsDigest, want)
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the continuation")
	servetest.Finished(t, r, conv, "done deployed prod")
	// Once the conversation went on (its pending record gone), a decision
	// of the call is still 409 (SPEC §11; issue 38: it was 404), an
	// unknown task still 404.
	if code, m := call(t, srv, "POST", decision, approverToken, `{"approved":false}`); code != 409 || errCode(m) != "already_resolved" {
		t.Fatalf("a decision once the conversation went on: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations/"+conv+"/calls/"+protocol.NewID()+"/decision", approverToken, `{"approved":true}`); code != 404 || errCode(m) != "unknown_task" {
		t.Fatalf("unknown task once the conversation went on: %d %v", code, m)
	}
	// The events of the continuation, the stream ending after its final;
	// resumed from the first one's id, the rest again.
	events := offloadtest.WaitOrTimeout(t, sse, "the event stream's end")
	if len(events) < 3 || events[len(events)-1].typ != "final" {
		t.Fatalf("events %v, want the continuation's, ending with final", events)
	}
	again := offloadtest.WaitOrTimeout(t, openSSE(t, srv, conv, events[0].id), "the resumed stream's end")
	if len(again) != len(events)-1 || again[0].id != events[1].id || again[len(again)-1].typ != "final" {
		t.Fatalf("resumed after %s: %v, want %v", events[0].id, again, events[1:])
	}
	st, err := r.Convs.Load(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(st.History); !strings.Contains(string(raw), `"by":"ann"`) || strings.Contains(string(raw), "mallory") {
		t.Errorf("the history's decision is not by the token's name: %s", raw)
	} else if !strings.Contains(string(raw), `"channel":"api"`) {
		t.Errorf("the history's decision is not by the channel api: %s", raw)
	} else if !strings.Contains(string(raw), `"at":"`+msg.Time.UTC().Format(time.RFC3339Nano)+`"`) {
		t.Errorf("the history's decision does not say when it was stored (%s): %s", msg.Time.UTC().Format(time.RFC3339Nano), raw)
	}
	if code, m := call(t, srv, "GET", "/healthz", "", ""); code != 200 {
		t.Errorf("healthz: %d %v", code, m)
	}
	if code, m := call(t, srv, "GET", "/readyz", "", ""); code != 200 {
		t.Errorf("readyz: %d %v", code, m)
	}
	// Counted by route pattern and code, and served on /metrics.
	if n := testutil.ToFloat64(m.HTTPRequestsTotal.WithLabelValues("POST /v1/conversations", "401")); n != 2 {
		t.Errorf("offload_http_requests_total{POST /v1/conversations,401} = %v, want 2", n)
	}
	if n := testutil.ToFloat64(m.HTTPRequestsTotal.WithLabelValues("POST /v1/conversations/{id}/calls/{task}/decision", "409")); n != 2 {
		t.Errorf("the later decisions' 409 counted %v times, want 2", n)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if raw, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `offload_http_requests_total{code="202",route="POST /v1/conversations"}`) &&
		!strings.Contains(string(raw), `offload_http_requests_total{code="200",route="POST /v1/conversations"}`) {
		t.Errorf("/metrics: %d\n%s", resp.StatusCode, raw)
	}
}

// sseEvent is an event of a Server-Sent Events stream.
type sseEvent struct{ id, typ string }

// openSSE opens the conversation's event stream (resuming after
// lastID when set) and sends its events once the stream has ended.
func openSSE(t *testing.T, srv *httptest.Server, conv, lastID string) <-chan []sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/conversations/"+conv+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := srv.Client().Do(req) //nolint:bodyclose // closed by the goroutine that reads it
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan []sseEvent, 1)
	go func() {
		defer resp.Body.Close()
		var evs []sseEvent
		var cur sseEvent
		raw, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(raw), "\n") {
			switch {
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				var ev struct {
					Type string `json:"type"`
				}
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev)
				cur.typ = ev.Type
				evs = append(evs, cur)
				cur = sseEvent{}
			}
		}
		out <- evs
	}()
	return out
}

// The run_id POST /v1/conversations answers is the run's: every event of
// the run, stored in the events stream, carries it (issue 38).
func TestRunIDInEvents(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := apiWithMetrics(t, r)
	code, final := call(t, srv, "POST", "/v1/conversations?wait=1", opToken, `{"agent":"ops","prompt":"deploy prod"}`)
	if code != 200 || final["run_id"] == "" {
		t.Fatalf("start: %d %v", code, final)
	}
	conv, runID := final["conversation_id"].(string), final["run_id"].(string)
	c, err := r.JS.OrderedConsumer(t.Context(), "TOOLS_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.event." + conv}})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for {
		batch, err := c.FetchNoWait(64)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev struct {
				Type  string `json:"type"`
				RunID string `json:"run_id"`
			}
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				t.Fatal(err)
			}
			types = append(types, ev.Type)
			if ev.RunID != runID {
				t.Errorf("event %s carries run_id %q, want the API's %s", ev.Type, ev.RunID, runID)
			}
		}
		if n == 0 {
			break
		}
	}
	if len(types) == 0 || types[len(types)-1] != "final" {
		t.Fatalf("events %v, want the run's, ending with final", types)
	}
}

// Who started a conversation over the API (the token's name) is recorded
// with it: GET /v1/conversations/{id} and the list of GET
// /v1/conversations show it (SPEC §21).
func TestStartedByRecorded(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := apiWithMetrics(t, r)
	code, final := call(t, srv, "POST", "/v1/conversations?wait=1", opToken, `{"agent":"ops","prompt":"deploy prod"}`)
	if code != 200 || final["status"] != "paused" {
		t.Fatalf("start: %d %v", code, final)
	}
	conv := final["conversation_id"].(string)
	if code, got := call(t, srv, "GET", "/v1/conversations/"+conv, viewerToken, ""); code != 200 || got["started_by"] != "ops" {
		t.Errorf("GET: %d started_by %v, want ops (the token's name)", code, got["started_by"])
	}
	code, list := call(t, srv, "GET", "/v1/conversations", viewerToken, "")
	convs, _ := list["conversations"].([]any)
	if code != 200 || len(convs) != 1 {
		t.Fatalf("list: %d %v", code, list)
	}
	if c, _ := convs[0].(map[string]any); c["started_by"] != "ops" || c["status"] != "paused" {
		t.Errorf("the list's entry: %v, want started_by ops", c)
	}
}

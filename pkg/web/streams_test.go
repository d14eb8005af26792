package web_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/web"
)

// stream is an open Server-Sent Events response: its lines, in order,
// until it ends.
type stream struct {
	resp  *http.Response
	lines chan string
}

// openStream GETs path with token (a bearer token, or the client's
// cookie when c is set) and returns the response, open when it is 200.
func openStream(t *testing.T, srv *httptest.Server, c *http.Client, path, token string) *stream {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		c = srv.Client()
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req) //nolint:bodyclose // closed by the stream's close
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{resp: resp, lines: make(chan string, 64)}
	t.Cleanup(s.close)
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	return s
}

// close closes the stream (idempotent) and drains its lines.
func (s *stream) close() {
	_ = s.resp.Body.Close()
	for range s.lines {
		// drained until the reader ends
	}
}

// await waits for a line containing part and returns it.
func (s *stream) await(t *testing.T, part string) string {
	t.Helper()
	for {
		line, ok := offloadtest.WaitOrTimeout(t, chanOK(s.lines), "a line with "+part)()
		if !ok {
			t.Fatalf("the stream ended before a line with %s", part)
		}
		if strings.Contains(line, part) {
			return line
		}
	}
}

// chanOK turns the next receive of ch into a value with its ok.
func chanOK(ch <-chan string) <-chan func() (string, bool) {
	out := make(chan func() (string, bool), 1)
	go func() {
		line, ok := <-ch
		out <- func() (string, bool) { return line, ok }
	}()
	return out
}

// subscriptions returns how many subscriptions to subject the server
// has, across its connections.
func subscriptions(t *testing.T, srv *server.Server, subject string) int {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{Subscriptions: true, Limit: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cz.Conns {
		for _, s := range c.Subs {
			if s == subject {
				n++
			}
		}
	}
	return n
}

// streamConsumers returns how many consumers stream has.
func streamConsumers(t *testing.T, js jetstream.JetStream, name string) int {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// The attack of issue 37 (one viewer breaks everyone's live views): a
// client opened event streams without a cap, each with a consumer of the
// events stream, until the server's limits broke every conversation's
// events, the inbox and GET /v1/pending. One token opens more streams
// than it may, each of another conversation: those past the cap are 429
// with Retry-After; the consumers stay at the cap; meanwhile another
// user's stream of a paused conversation, the inbox's stream and GET
// /v1/pending work, and a decision reaches both streams; once the
// attacker leaves, its consumers are gone and its streams may open again.
func TestEventStreamsBoundedPerToken(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := apiWithMetrics(t, r)
	f := r.Start(t, "deploy prod")
	conv, task := f.ConversationID, servetest.Paused(t, f)
	perToken := web.DefaultLimits().MaxStreamsPerToken
	var attack []*stream
	refused := 0
	for range perToken + 8 {
		s := openStream(t, srv, nil, "/v1/conversations/"+protocol.NewID()+"/events", answerToken)
		switch s.resp.StatusCode {
		case http.StatusOK:
			attack = append(attack, s)
		case http.StatusTooManyRequests:
			refused++
			if s.resp.Header.Get("Retry-After") == "" {
				t.Errorf("a 429 without Retry-After")
			}
			s.close()
		default:
			t.Fatalf("a stream: %d", s.resp.StatusCode)
		}
	}
	if len(attack) != perToken || refused != 8 {
		t.Errorf("one token opened %d streams, %d refused; want %d and 8", len(attack), refused, perToken)
	}
	if n := streamConsumers(t, r.JS, "TOOLS_EVENTS"); n > perToken {
		t.Errorf("%d consumers of the events stream, want at most %d", n, perToken)
	}
	// Others meanwhile: a viewer's stream, an approver's inbox, the
	// pending calls.
	view := openStream(t, srv, nil, "/v1/conversations/"+conv+"/events", viewerToken)
	inbox := openStream(t, srv, clientWith(t, srv, approverToken), "/inbox/events", "")
	if view.resp.StatusCode != http.StatusOK || inbox.resp.StatusCode != http.StatusOK {
		t.Fatalf("another user's streams: %d, %d", view.resp.StatusCode, inbox.resp.StatusCode)
	}
	inbox.await(t, ": watching")
	if code, m := call(t, srv, "GET", "/v1/pending", viewerToken, ""); code != 200 || len(m["pending"].([]any)) != 1 {
		t.Fatalf("GET /v1/pending: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations/"+conv+"/calls/"+task+"/decision", approverToken, `{"approved":true}`); code != 200 {
		t.Fatalf("decision: %d %v", code, m)
	}
	inbox.await(t, "event: changed")
	view.await(t, `"type":"final"`)
	// The attacker leaves: its consumers go, its token may stream again.
	for _, s := range attack {
		s.close()
	}
	offloadtest.Eventually(t, "the attacker's consumers gone", func() error {
		if n := streamConsumers(t, r.JS, "TOOLS_EVENTS"); n != 0 {
			return fmt.Errorf("%d consumers", n)
		}
		return nil
	})
	offloadtest.Eventually(t, "the attacker's streams released", func() error {
		s := openStream(t, srv, nil, "/v1/conversations/"+conv+"/events", answerToken)
		defer s.close()
		if s.resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d", s.resp.StatusCode)
		}
		return nil
	})
	if code, _ := call(t, srv, "GET", "/v1/pending", viewerToken, ""); code != 200 {
		t.Errorf("GET /v1/pending after: %d", code)
	}
}

// The streams of the replica in all are bounded too, whatever the
// tokens: past the cap, 429 saying so.
func TestEventStreamsBoundedInAll(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, viewerToken+" viewer val\n"+approverToken+" approver ann\n"+answerToken+" answerer bea\n",
		agentproc.FaceOptions{Limits: web.Limits{MaxStreams: 4, MaxStreamsPerToken: 3}})
	conv := protocol.NewID()
	for i, c := range []struct {
		token string
		code  int
		says  string
	}{
		{viewerToken, 200, ""}, {viewerToken, 200, ""}, {viewerToken, 200, ""},
		{viewerToken, 429, "This token has 3 event streams open"},
		{approverToken, 200, ""},
		{answerToken, 429, "The service serves 4 event streams"},
	} {
		s := openStream(t, srv, nil, "/v1/conversations/"+conv+"/events", c.token)
		if s.resp.StatusCode != c.code {
			t.Fatalf("stream %d: %d, want %d", i, s.resp.StatusCode, c.code)
		}
		if c.code == 429 {
			if line := s.await(t, "{"); !strings.Contains(line, c.says) || !strings.Contains(line, "too_many_requests") {
				t.Errorf("stream %d: %s, want it to say %q", i, line, c.says)
			}
		}
	}
	if n := streamConsumers(t, r.JS, "TOOLS_EVENTS"); n != 1 {
		t.Errorf("%d consumers for 4 streams of one conversation, want 1", n)
	}
}

// Open inboxes multiplied every decision message (issue 37: each watched
// the pending records and subscribed to the decisions and answers on
// the service's connection). Ten open inboxes follow one watch: one
// consumer of the pending records, one set of subscriptions; each gets
// the change; the watch stops with the last.
func TestInboxStreamsShareOneWatch(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := apiWithMetrics(t, r)
	f := r.Start(t, "deploy prod")
	conv, task := f.ConversationID, servetest.Paused(t, f)
	c := clientWith(t, srv, approverToken)
	var inboxes []*stream
	for range 10 {
		s := openStream(t, srv, c, "/inbox/events", "")
		if s.resp.StatusCode != http.StatusOK {
			t.Fatalf("inbox stream: %d", s.resp.StatusCode)
		}
		s.await(t, ": watching")
		inboxes = append(inboxes, s)
	}
	if n := streamConsumers(t, r.JS, "KV_tools_pending"); n != 1 {
		t.Errorf("%d consumers of the pending records for 10 open inboxes, want 1", n)
	}
	// Every decision and answer is delivered once to the replica, not
	// once per open inbox.
	for _, subj := range []string{"tools.decision.>", "tools.answer.>"} {
		if n := subscriptions(t, b.Srv.NATS(), subj); n != 1 {
			t.Errorf("%d subscriptions to %s for 10 open inboxes, want 1", n, subj)
		}
	}
	if code, m := call(t, srv, "POST", "/v1/conversations/"+conv+"/calls/"+task+"/decision", approverToken, `{"approved":true}`); code != 200 {
		t.Fatalf("decision: %d %v", code, m)
	}
	for _, s := range inboxes {
		s.await(t, "event: changed")
		s.close()
	}
	offloadtest.Eventually(t, "the watch stopped with the last inbox", func() error {
		if n := streamConsumers(t, r.JS, "KV_tools_pending"); n != 0 {
			return fmt.Errorf("%d consumers of the pending records", n)
		}
		return nil
	})
}

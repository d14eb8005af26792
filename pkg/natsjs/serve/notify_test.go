package serve_test

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
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
)

// receiver is an HTTP endpoint that sends each POST's body on a channel.
func receiver(t *testing.T) (*httptest.Server, <-chan []byte) {
	t.Helper()
	got := make(chan []byte, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// --notify (SPEC §12): each approval announced POSTs approval_requested
// with the call and signed approve/deny links (by the URL's host), a
// slack: URL gets a Slack message; the link, confirmed, decides the call,
// and its resolution POSTs approval_resolved.
func TestNotifications(t *testing.T) {
	b := setup(t)
	hook, got := receiver(t)
	slack, slackGot := receiver(t)
	b.notify = []string{hook.URL + "/hook", "slack:" + slack.URL + "/services/T/B/secret"}
	r := b.replica(t, "r1")
	f := r.start(t, "deploy prod")
	task := paused(t, f)
	var n serve.Notification
	if err := json.Unmarshal(offloadtest.WaitOrTimeout(t, got, "approval_requested"), &n); err != nil {
		t.Fatal(err)
	}
	if n.Event != "approval_requested" || n.ConversationID != f.ConversationID || n.TaskID != task || n.Tool != "deploy" || n.Agent != "ops" ||
		string(n.Args) != `{"target":"prod"}` || n.ExpiresAt != nil || n.Links["inbox"] != "http://inbox.example/" ||
		!strings.HasPrefix(n.Links["approve"], "http://inbox.example/links/") || !strings.HasPrefix(n.Links["deny"], "http://inbox.example/links/") {
		t.Fatalf("notification %+v", n)
	}
	var sm map[string]string
	if err := json.Unmarshal(offloadtest.WaitOrTimeout(t, slackGot, "the Slack message"), &sm); err != nil || !strings.Contains(sm["text"], "*deploy* waits for approval") ||
		!strings.Contains(sm["text"], "|approve>") {
		t.Fatalf("Slack message %v, %v", sm, err)
	}
	// The link, on the service's inbox.
	tokens, _ := serve.ParseTokens(strings.NewReader(approverToken + " approver ann\n"))
	pending, err := convstore.OpenPending(context.Background(), convstore.OpenConfig{JetStream: r.js})
	if err != nil {
		t.Fatal(err)
	}
	links, err := convstore.OpenLinks(context.Background(), convstore.OpenConfig{JetStream: r.js})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(serve.Handler(serve.HandlerConfig{Service: r.svc, Tokens: tokens, Publisher: serve.PendingPublisher{Pending: pending},
		Pending: pending, Inbox: pending, Links: links}))
	t.Cleanup(srv.Close)
	approve := strings.Replace(n.Links["approve"], "http://inbox.example", srv.URL, 1)
	hookHost := strings.TrimPrefix(hook.URL, "http://")
	if resp, page := send(t, browserless(t), "POST", approve, url.Values{}, nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Approved as notify:"+hookHost) {
		t.Fatalf("the notified link: %d\n%s", resp.StatusCode, page)
	}
	finished(t, r, f.ConversationID, "done deployed prod")
	if err := json.Unmarshal(offloadtest.WaitOrTimeout(t, got, "approval_resolved"), &n); err != nil {
		t.Fatal(err)
	}
	if n.Event != "approval_resolved" || n.TaskID != task || n.Resolved != "approved" || n.By != "notify:"+hookHost || n.Tool != "deploy" {
		t.Errorf("resolution %+v", n)
	}
}

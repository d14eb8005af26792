package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
)

var linkField = regexp.MustCompile(`id="(approve|deny)-link" readonly value="([^"]+)"`)

// Signed links (SPEC §12): an approver makes a pair in the inbox for a
// recipient; opening one shows a confirmation page and publishes
// nothing; confirming publishes the decision by the recipient's label,
// channel link; a second use is 409; a link for arguments that changed
// is refused (409, nothing published); a forged one is 404, an expired
// one 410.
func TestSignedLinks(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	ctx := context.Background()
	srv, face := r.Face(t, approverToken+" approver ann\n", agentproc.FaceOptions{})
	keys := face.Links
	f := r.Start(t, "deploy prod")
	conv, task := f.ConversationID, servetest.Paused(t, f)
	c := clientWith(t, srv, approverToken)
	_, page := send(t, c, "GET", srv.URL+"/", nil, nil)
	csrf, digest := csrfField.FindStringSubmatch(page)[1], digestField.FindStringSubmatch(page)[1]
	resp, page := send(t, c, "POST", srv.URL+"/conversations/"+conv+"/calls/"+task+"/links",
		url.Values{"csrf": {csrf}, "args_digest": {digest}, "to": {"bob@phone"}, "ttl": {"1h"}}, nil)
	found := linkField.FindAllStringSubmatch(page, -1)
	if resp.StatusCode != http.StatusOK || len(found) != 2 {
		t.Fatalf("make links: %d\n%s", resp.StatusCode, page)
	}
	approve := strings.ReplaceAll(found[0][2], "&#43;", "+")
	anon := browserless(t) // a link needs no login
	decisions, err := r.JS.Stream(t.Context(), "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	stored := func() (protocol.Decision, bool) {
		m, err := decisions.GetLastMsgForSubject(t.Context(), "tools.decision."+conv+"."+task)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return protocol.Decision{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		d, _ := protocol.DecodeDecision(m.Data, nil)
		return d, true
	}
	if resp, page := send(t, anon, "GET", approve, nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Approve deploy?") || !strings.Contains(page, "bob@phone") {
		t.Fatalf("open the link: %d\n%s", resp.StatusCode, page)
	}
	if _, ok := stored(); ok {
		t.Fatal("opening a link published a decision")
	}
	if resp, page := send(t, anon, "POST", approve, url.Values{}, nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Approved as bob@phone") {
		t.Fatalf("confirm: %d\n%s", resp.StatusCode, page)
	}
	if d, ok := stored(); !ok || !d.Approved || d.By != "bob@phone" || d.Channel != "link" || d.ArgsDigest != digest {
		t.Fatalf("the link's decision: %+v", d)
	}
	if resp, page := send(t, anon, "POST", approve, url.Values{}, nil); resp.StatusCode != http.StatusConflict || !strings.Contains(page, "used already") {
		t.Errorf("a second use: %d, want 409 (used already)\n%s", resp.StatusCode, page)
	}
	servetest.Finished(t, r, conv, "done deployed prod")

	// A link made for other arguments than the call's as pending.
	f2 := r.Start(t, "deploy staging")
	conv2, task2 := f2.ConversationID, servetest.Paused(t, f2)
	key, err := keys.Key(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := protocol.ArgsDigest([]byte(`{"target":"prod"}`))
	claims := links.Claims{ID: protocol.NewID(), Conversation: conv2, Task: task2, Digest: other, Action: "approve", Expires: time.Now().Add(time.Hour).Unix(), To: "eve"}
	stale := srv.URL + "/links/" + links.Sign(key, claims)
	if resp, page := send(t, anon, "POST", stale, url.Values{}, nil); resp.StatusCode != http.StatusConflict || !strings.Contains(page, "arguments changed") {
		t.Errorf("a link for changed arguments: %d\n%s", resp.StatusCode, page)
	}
	if _, err := decisions.GetLastMsgForSubject(t.Context(), "tools.decision."+conv2+"."+task2); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a refused link published a decision: %v", err)
	}
	claims.Digest, claims.Expires = digestOf(t, `{"target":"staging"}`), time.Now().Add(-time.Second).Unix()
	if resp, _ := send(t, anon, "GET", srv.URL+"/links/"+links.Sign(key, claims), nil, nil); resp.StatusCode != http.StatusGone {
		t.Errorf("an expired link: %d, want 410", resp.StatusCode)
	}
	if resp, _ := send(t, anon, "GET", srv.URL+"/links/"+links.Sign([]byte("another key"), claims), nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a forged link: %d, want 404", resp.StatusCode)
	}
}

func digestOf(t *testing.T, args string) string {
	t.Helper()
	d, err := protocol.ArgsDigest([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

package web_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// inboxServer serves r's API with the web inbox, with the test's tokens
// and an admin named alice.
func inboxServer(t *testing.T, r *servetest.Replica) *httptest.Server {
	t.Helper()
	srv, _ := r.Face(t, adminToken+" admin alice\n"+approverToken+" approver ann\n"+viewerToken+" viewer val\n", agentproc.FaceOptions{})
	return srv
}

// browserless is a client that keeps cookies and does not follow
// redirects.
func browserless(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// reply is a response, its body read and closed.
type reply struct {
	StatusCode int
	Header     http.Header
}

// send makes a request (a form when form is set) and returns the response
// and its body.
func send(t *testing.T, c *http.Client, method, u string, form url.Values, header http.Header) (reply, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{StatusCode: resp.StatusCode, Header: resp.Header}, string(raw)
}

var (
	csrfField   = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	digestField = regexp.MustCompile(`name="args_digest" value="([0-9a-f]+)"`)
)

// The inbox's login and its guards, without a browser: a page without
// the login cookie redirects to the login form; an unknown token is 401;
// the cookie is HttpOnly and SameSite=Strict (not Secure over plain
// HTTP); every page has a CSP with a nonce and forbids framing; a POST
// without the CSRF token, or sent from another origin, is 403 and
// publishes nothing; a viewer sees no forms and may not decide; a
// decision for arguments other than those shown is refused (stale, 409).
func TestInboxGuards(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv := inboxServer(t, r)
	f := r.Start(t, "deploy prod")
	conv, task := f.ConversationID, servetest.Paused(t, f)
	c := browserless(t)
	if resp, _ := send(t, c, "GET", srv.URL+"/", nil, nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2F" {
		t.Fatalf("inbox without login: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := send(t, c, "POST", srv.URL+"/login", url.Values{"token": {"nope-nope-nope-nope"}, "csrf": {loginCSRF(t, c, srv)}}, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "unknown") {
		t.Fatalf("unknown token: %d", resp.StatusCode)
	}
	login := func(c *http.Client, tok string) {
		t.Helper()
		resp, _ := send(t, c, "POST", srv.URL+"/login", url.Values{"token": {tok}, "next": {"/"}, "csrf": {loginCSRF(t, c, srv)}}, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
			t.Fatalf("login: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		sc := resp.Header.Get("Set-Cookie")
		for _, want := range []string{"offload_token=", "HttpOnly", "SameSite=Strict", "Path=/"} {
			if !strings.Contains(sc, want) {
				t.Errorf("cookie %q lacks %s", sc, want)
			}
		}
		if strings.Contains(sc, "Secure") {
			t.Errorf("cookie %q is Secure over plain HTTP", sc)
		}
	}
	login(c, approverToken)
	resp, page := send(t, c, "GET", srv.URL+"/", nil, nil)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "call-"+task) || !strings.Contains(csp, "script-src 'nonce-") ||
		!strings.Contains(csp, "frame-ancestors 'none'") || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("inbox: %d CSP %q\n%s", resp.StatusCode, csp, page)
	}
	if nonce := csp[strings.Index(csp, "'nonce-")+7:]; !strings.Contains(page, `<script nonce="`+nonce[:strings.Index(nonce, "'")]+`">`) {
		t.Errorf("the page's script does not carry the CSP's nonce")
	}
	csrf, digest := csrfField.FindStringSubmatch(page)[1], digestField.FindStringSubmatch(page)[1]
	decide := srv.URL + "/conversations/" + conv + "/calls/" + task + "/decide"
	for name, c := range map[string]struct {
		form   url.Values
		header http.Header
	}{
		"no CSRF token":  {url.Values{"action": {"approve"}, "args_digest": {digest}}, nil},
		"wrong CSRF":     {url.Values{"action": {"approve"}, "args_digest": {digest}, "csrf": {strings.Repeat("0", 64)}}, nil},
		"another origin": {url.Values{"action": {"approve"}, "args_digest": {digest}, "csrf": {csrf}}, http.Header{"Origin": {"https://evil.example"}}},
	} {
		resp, _ := send(t, clientWith(t, srv, approverToken), "POST", decide, c.form, c.header)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	// A viewer sees the call, no form, and may not decide.
	v := clientWith(t, srv, viewerToken)
	_, vpage := send(t, v, "GET", srv.URL+"/", nil, nil)
	if !strings.Contains(vpage, "call-"+task) || strings.Contains(vpage, "/decide") {
		t.Errorf("the viewer's inbox:\n%s", vpage)
	}
	vcsrf := csrfField.FindStringSubmatch(vpage)[1] // the logout form's
	if resp, _ := send(t, v, "POST", decide, url.Values{"action": {"approve"}, "args_digest": {digest}, "csrf": {vcsrf}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's decision: %d, want 403", resp.StatusCode)
	}
	// Arguments other than those shown: refused, nothing stored.
	other := strings.Repeat("ab", 32)
	if resp, body := send(t, c, "POST", decide, url.Values{"action": {"approve"}, "args_digest": {other}, "csrf": {csrf}}, nil); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "arguments changed") {
		t.Errorf("a stale decision: %d\n%s", resp.StatusCode, body)
	}
	decisions, err := r.JS.Stream(t.Context(), "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decisions.GetLastMsgForSubject(t.Context(), "tools.decision."+conv+"."+task); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a refused form stored a decision: %v", err)
	}
	// The form as the page has it: published, redirected to the inbox.
	if resp, _ := send(t, c, "POST", decide, url.Values{"action": {"approve"}, "args_digest": {digest}, "csrf": {csrf}}, http.Header{"Origin": {srv.URL}}); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?done=approved&task="+task+"&tool=deploy" {
		t.Fatalf("approve: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	servetest.Finished(t, r, conv, "done deployed prod")
}

// clientWith is a client logged in with tok, as a browser does: the
// login form, then its POST.
func clientWith(t *testing.T, srv *httptest.Server, tok string) *http.Client {
	t.Helper()
	c := browserless(t)
	if resp, _ := send(t, c, "POST", srv.URL+"/login", url.Values{"token": {tok}, "csrf": {loginCSRF(t, c, srv)}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	return c
}

// loginField is the login form's CSRF token.
var loginField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// loginCSRF opens the login form with c (which keeps its pre-session
// cookie) and returns the form's CSRF token ("" when it has none).
func loginCSRF(t *testing.T, c *http.Client, srv *httptest.Server) string {
	t.Helper()
	_, page := send(t, c, "GET", srv.URL+"/login", nil, nil)
	if m := loginField.FindStringSubmatch(page); m != nil {
		return m[1]
	}
	return ""
}

// The notice after a form names the call from the redirect's query only
// when its tool is a tool's name and its task a task ID, and counts
// decisions only within bounds: a crafted link shows nothing of its own
// (SPEC §21).
func TestNoticeNamesOnlyWellFormedCalls(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv := inboxServer(t, r)
	c := clientWith(t, srv, adminToken)
	task := protocol.NewID()
	for _, tc := range []struct {
		query url.Values
		want  string
	}{
		{url.Values{"done": {"approved"}, "tool": {"deploy"}, "task": {task}, "n": {"1"}, "of": {"2"}},
			"Approved deploy (task " + task + "). Decision 1 of 2 of its conversation: 1 more waits."},
		{url.Values{"done": {"denied"}, "tool": {"deploy"}, "task": {task}, "n": {"3"}, "of": {"3"}},
			"Denied deploy (task " + task + "). Decision 3 of 3 of its conversation: none waits now, it continues."},
		{url.Values{"done": {"approved"}, "tool": {"<b>rm -rf</b> now"}, "task": {task}}, "Approved."},
		{url.Values{"done": {"approved"}, "tool": {"deploy"}, "task": {"not-a-task"}}, "Approved."},
		{url.Values{"done": {"approved"}, "tool": {"deploy"}, "task": {task}, "n": {"5"}, "of": {"2"}}, "Approved deploy (task " + task + ")."},
		{url.Values{"done": {"pwned"}, "tool": {"deploy"}, "task": {task}}, ""},
	} {
		_, body := send(t, c, "GET", srv.URL+"/?"+tc.query.Encode(), nil, nil)
		got := ""
		if i := strings.Index(body, `<p class="notice" id="notice">`); i >= 0 {
			rest := body[i+len(`<p class="notice" id="notice">`):]
			got = rest[:strings.Index(rest, "</p>")]
		}
		if got != tc.want {
			t.Errorf("notice of %s: %q, want %q", tc.query.Encode(), got, tc.want)
		}
	}
}

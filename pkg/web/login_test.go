package web_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/web"
)

// clock is a test's clock, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// faceAt serves r's face with the test's tokens and the clock c (web.Handler
// over the face agentproc builds).
func faceAt(t *testing.T, r *servetest.Replica, c *clock) *httptest.Server {
	t.Helper()
	return faceWith(t, r, c, web.Limits{})
}

// faceWith is faceAt with limits.
func faceWith(t *testing.T, r *servetest.Replica, c *clock, limits web.Limits) *httptest.Server {
	t.Helper()
	_, f := r.Face(t, adminToken+" admin alice\n"+approverToken+" approver ann\n"+viewerToken+" viewer val\n", agentproc.FaceOptions{})
	tokens, err := web.ParseTokens(strings.NewReader(approverToken + " approver ann\n" + viewerToken + " viewer val\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(web.Handler(web.Config{Core: r.Svc, Desk: f.Desk, Tokens: tokens, Inbox: true, Now: c.Now, Limits: limits}))
	t.Cleanup(srv.Close)
	return srv
}

// Login CSRF (issue 37): a page of another site could post its own token
// to /login and replace the victim's session with the attacker's. The
// login form carries a CSRF token bound to a pre-session cookie (set by
// GET /login, HttpOnly, SameSite=Lax): a POST without that cookie, with
// another cookie's token, or from another origin is 403 and sets no
// session.
func TestLoginCSRF(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv := inboxServer(t, r)
	forged := url.Values{"token": {approverToken}, "next": {"/"}}
	for name, c := range map[string]struct {
		form   url.Values
		header http.Header
	}{
		"another site's form":              {forged, http.Header{"Origin": {"https://evil.example"}}},
		"no Origin, no pre-session":        {forged, nil},
		"another pre-session's CSRF":       {url.Values{"token": {approverToken}, "csrf": {loginCSRF(t, browserless(t), srv)}}, nil},
		"the right CSRF from another site": {nil, http.Header{"Origin": {"https://evil.example"}}},
	} {
		victim := browserless(t)
		form := c.form
		if form == nil {
			form = url.Values{"token": {approverToken}, "csrf": {loginCSRF(t, victim, srv)}}
		}
		resp, _ := send(t, victim, "POST", srv.URL+"/login", form, c.header)
		if resp.StatusCode != http.StatusForbidden || strings.Contains(resp.Header.Get("Set-Cookie"), "offload_token=") {
			t.Errorf("%s: %d %q, want 403 and no session", name, resp.StatusCode, resp.Header.Get("Set-Cookie"))
		}
	}
	if resp, _ := send(t, clientWith(t, srv, approverToken), "GET", srv.URL+"/", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("a login with the form's CSRF token: %d", resp.StatusCode)
	}
}

// An open redirect after the login (issue 37): next=/%09/host passed the
// check, and browsers strip tabs, CRs and LFs, so that the redirect went
// to //host. next is a path of this site, checked as sent and decoded,
// or the inbox.
func TestLoginNextIsStrict(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv := inboxServer(t, r)
	for next, want := range map[string]string{
		"/\t/evil.example":     "/",
		"/\r\n/evil.example":   "/",
		"/%09/evil.example":    "/",
		"/%2F/evil.example":    "/",
		"/%5Cevil.example":     "/",
		"//evil.example":       "/",
		"/\\evil.example":      "/",
		"https://evil.example": "/",
		"javascript:alert(1)":  "/",
		"/ /evil.example":      "/",
		"":                     "/",
		"/conversations/01M8PGBPTV086Y0N3WVFEH22H5": "/conversations/01M8PGBPTV086Y0N3WVFEH22H5",
		"/?done=approved": "/?done=approved",
	} {
		c := browserless(t)
		resp, _ := send(t, c, "POST", srv.URL+"/login", url.Values{"token": {approverToken}, "next": {next}, "csrf": {loginCSRF(t, c, srv)}}, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
			t.Errorf("next %q: %d to %q, want %q", next, resp.StatusCode, resp.Header.Get("Location"), want)
		}
		_, page := send(t, c, "GET", srv.URL+"/login?next="+url.QueryEscape(next), nil, nil)
		if !strings.Contains(page, `name="next" value="`+want+`"`) {
			t.Errorf("next %q: the login form does not carry %q", next, want)
		}
	}
}

// Guessing tokens (issue 37): logins and bearer tokens had no rate
// limit. After 10 unknown tokens from one address within 10 minutes,
// that address is locked out for 5 minutes (429 with Retry-After, even
// with a known token: the lockout stops the guessing, whatever a guess
// is); then it may log in again.
func TestLockoutAfterFailedAuthentications(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	for _, way := range []string{"login", "bearer"} {
		t.Run(way, func(t *testing.T) {
			clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
			srv := faceAt(t, r, clk)
			for i := range 10 {
				var code int
				if way == "login" {
					c := browserless(t)
					resp, _ := send(t, c, "POST", srv.URL+"/login", url.Values{"token": {"guess-" + strings.Repeat("x", 20) + string(rune('a'+i))}, "csrf": {loginCSRF(t, c, srv)}}, nil)
					code = resp.StatusCode
				} else {
					code, _ = call(t, srv, "GET", "/v1/pending", "guess-token-0123456789"+string(rune('a'+i)), "")
				}
				if code != http.StatusUnauthorized {
					t.Fatalf("guess %d: %d, want 401", i, code)
				}
			}
			c := browserless(t)
			resp, _ := send(t, c, "POST", srv.URL+"/login", url.Values{"token": {approverToken}, "csrf": {loginCSRF(t, c, srv)}}, nil)
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "300" {
				t.Errorf("a login after 10 guesses: %d, Retry-After %q; want 429, 300", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if code, m := call(t, srv, "GET", "/v1/pending", viewerToken, ""); code != http.StatusTooManyRequests || errCode(m) != "too_many_requests" {
				t.Errorf("the API after 10 guesses: %d %v, want 429", code, m)
			}
			clk.add(5 * time.Minute)
			if resp, _ := send(t, c, "POST", srv.URL+"/login", url.Values{"token": {approverToken}, "csrf": {loginCSRF(t, c, srv)}}, nil); resp.StatusCode != http.StatusSeeOther {
				t.Errorf("a login once the lockout ended: %d", resp.StatusCode)
			}
		})
	}
}

// Behind a proxy every client has the proxy's address: with the proxy
// trusted (--trusted-proxy), a request is the address it forwards
// (X-Forwarded-For), so that one client's guesses lock out that client,
// not every one behind the proxy. Without, X-Forwarded-For is ignored: a
// client naming another address in each guess is still locked out.
func TestLockoutBehindAProxy(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	guess := func(srv *httptest.Server, from, tok string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/pending", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Forwarded-For", from+", 127.0.0.1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	_, loopback, _ := net.ParseCIDR("127.0.0.0/8")
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	proxied := faceWith(t, r, clk, web.Limits{TrustedProxies: []net.IPNet{*loopback}})
	for i := range 10 {
		if code := guess(proxied, "203.0.113.5", fmt.Sprintf("guess-token-0123456789-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	if code := guess(proxied, "203.0.113.5", viewerToken); code != http.StatusTooManyRequests {
		t.Errorf("the guessing client behind the proxy: %d, want 429", code)
	}
	if code := guess(proxied, "203.0.113.6", viewerToken); code != http.StatusOK {
		t.Errorf("another client behind the proxy: %d, want 200", code)
	}
	direct := faceAt(t, r, clk)
	for i := range 10 {
		if code := guess(direct, fmt.Sprintf("198.51.100.%d", i), fmt.Sprintf("guess-token-0123456789-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	if code := guess(direct, "198.51.100.99", viewerToken); code != http.StatusTooManyRequests {
		t.Errorf("a client naming other addresses, untrusted: %d, want 429", code)
	}
}

// One token's requests are rate limited (a token bucket of
// web.Limits.TokenRate a second, TokenBurst at once): past the burst,
// 429 with Retry-After; another token is not held back.
func TestTokenRateLimit(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	srv := faceAt(t, r, clk)
	burst := web.DefaultLimits().TokenBurst
	for i := range burst {
		if code, m := call(t, srv, "GET", "/v1/conversations/not-an-id", viewerToken, ""); code != http.StatusBadRequest {
			t.Fatalf("request %d: %d %v", i, code, m)
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/conversations/not-an-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("request %d: %d, Retry-After %q; want 429, 1", burst+1, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, _ := call(t, srv, "GET", "/v1/conversations/not-an-id", approverToken, ""); code != http.StatusBadRequest {
		t.Errorf("another token: %d, want 400", code)
	}
	clk.add(time.Second)
	if code, _ := call(t, srv, "GET", "/v1/conversations/not-an-id", viewerToken, ""); code != http.StatusBadRequest {
		t.Errorf("a second later: %d, want 400", code)
	}
}

// Signed links took their host from the request's Host header (issue
// 37): an attacker's Host made the inbox hand out links to its site.
// They start with the configured public URL.
func TestLinksUsePublicURL(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, approverToken+" approver ann\n", agentproc.FaceOptions{PublicURL: "https://inbox.example.org"})
	f := r.Start(t, "deploy prod")
	conv, task := f.ConversationID, servetest.Paused(t, f)
	c := clientWith(t, srv, approverToken)
	_, page := send(t, c, "GET", srv.URL+"/", nil, nil)
	csrf, digest := csrfField.FindStringSubmatch(page)[1], digestField.FindStringSubmatch(page)[1]
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/conversations/"+conv+"/calls/"+task+"/links",
		strings.NewReader(url.Values{"csrf": {csrf}, "args_digest": {digest}, "to": {"bob"}, "ttl": {"1h"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Host = "evil.example"
	for _, ck := range c.Jar.Cookies(req.URL) { // the session's, sent to the forged Host
		req.AddCookie(ck)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	found := linkField.FindAllStringSubmatch(string(raw), -1)
	if resp.StatusCode != http.StatusOK || len(found) != 2 {
		t.Fatalf("make links: %d\n%s", resp.StatusCode, raw)
	}
	for _, l := range found {
		if !strings.HasPrefix(l[2], "https://inbox.example.org/links/") {
			t.Errorf("link %s, want it under https://inbox.example.org", l[2])
		}
	}
}

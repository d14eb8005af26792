package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Who may do what (SPEC §11): the API takes the bearer tokens of
// --tokens in Authorization; the inbox the same tokens, kept after its
// login in an HttpOnly, SameSite=Strict cookie (Secure when served over
// TLS), so that a replica needs no session state: any replica serves any
// browser. Each form carries a CSRF token derived from the cookie's
// token (HMAC), checked on every POST beside the request's Origin. Both
// faces pass through one check, [handler.authorize].

// sessionCookie is the name of the inbox's login cookie; loginCookie the
// pre-session cookie the login form's CSRF token is bound to.
const (
	sessionCookie = "offload_token"
	loginCookie   = "offload_login"
)

// ctxKey are the request context's keys.
type ctxKey int

const (
	nonceKey   ctxKey = iota // a page's CSP nonce
	sessionKey               // the caller: its identity, token and CSRF token
)

// caller is who makes a request: its identity, its token, and for a
// browser its CSRF token.
type caller struct {
	Identity
	token, csrf string
}

// callerOf returns the request's caller (set by [handler.authorize]).
func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(sessionKey).(caller)
	return c
}

// may reports whether one of the caller's roles may do what roles may
// (admin always; any role when roles is empty).
func (c caller) may(roles ...Role) bool {
	return len(roles) == 0 || slices.ContainsFunc(roles, c.Has)
}

// authorize lets a request of route rt through when its token is known
// and has one of rt's roles (an unknown one counts against the client's
// address: [lockouts]): the API's token from Authorization (401
// without, with WWW-Authenticate), a page's from the login cookie (a
// page's GET without one is redirected to the login form; anything else
// is 401), a POST from a page also with the session's CSRF token and,
// when the browser sends one, the request's own Origin. It returns the
// request with its caller.
func (h *handler) authorize(w http.ResponseWriter, r *http.Request, rt route) (*http.Request, error) {
	var tok string
	if rt.face == api {
		t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			t = ""
		}
		tok = strings.TrimSpace(t)
	} else if c, err := r.Cookie(sessionCookie); err == nil {
		tok = c.Value
	}
	id, known := h.Tokens[tok]
	if !known && tok != "" {
		h.lockouts.fail(h.clientAddr(r))
	}
	switch {
	case !known && rt.face == api:
		return r, &httpError{status: http.StatusUnauthorized, code: "unauthorized", msg: "a bearer token of --tokens is required",
			header: http.Header{"WWW-Authenticate": {`Bearer realm="offload"`}}}
	case !known && r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/events"):
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return r, errAnswered
	case !known:
		return r, errorf(http.StatusUnauthorized, "unauthorized", "Log in first.")
	}
	c := caller{Identity: id, token: tok}
	if rt.face == page {
		c.csrf = csrfToken(tok)
		if r.Method == http.MethodPost {
			if err := h.checkForm(r, c.csrf); err != nil {
				return r, err
			}
		}
	}
	if !c.may(rt.roles...) {
		return r, errorf(http.StatusForbidden, "forbidden", "role %s may not do this", id)
	}
	return r.WithContext(context.WithValue(r.Context(), sessionKey, c)), nil
}

// errAnswered is returned by a step that has answered the request itself
// (a redirect): nothing more is written.
var errAnswered = &httpError{}

// secure sets the security headers of a page and returns the request
// with its CSP nonce: a Content Security Policy allowing only the page's
// own inline script and style (by nonce) and connections to its own
// origin, no framing, no referrer to other sites, no caching.
func secure(w http.ResponseWriter, r *http.Request) *http.Request {
	var b [16]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+"'; "+
		"connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin") // "no-referrer" would make a form's Origin "null"
	hd.Set("Cache-Control", "no-store")
	return r.WithContext(context.WithValue(r.Context(), nonceKey, nonce))
}

// checkForm checks a form POSTed from a page: sent from this site (its
// Origin, when the browser sends one, the request's own or the public
// URL's) with the CSRF token want.
func (h *handler) checkForm(r *http.Request, want string) error {
	if o := r.Header.Get("Origin"); o != "" && o != origin(r) && o != h.publicOrigin {
		return errorf(http.StatusForbidden, "forbidden", "This form was sent from another site.")
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(want)) != 1 {
		return errorf(http.StatusForbidden, "forbidden", "The form's CSRF token is missing or wrong: reload the page.")
	}
	return nil
}

// csrfToken is the CSRF token of the session whose bearer token is tok.
func csrfToken(tok string) string {
	return mac(tok, "offload inbox csrf")
}

// loginCSRF is the CSRF token of the login form of the pre-session
// cookie's value v ("" for none).
func loginCSRF(v string) string {
	if len(v) != 32 {
		return ""
	}
	return mac(v, "offload login csrf")
}

// mac is the HMAC-SHA256 of msg under key, in hex.
func mac(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// origin is the request's own origin, as a browser sends it in Origin.
func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// preSession returns the value of the request's pre-session cookie,
// setting a new one (HttpOnly, SameSite=Lax, for /login only) when it has
// none: the login form's CSRF token is bound to it, so that another site
// cannot post a login (login CSRF: its token would replace the victim's
// session).
func preSession(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(loginCookie); err == nil && len(c.Value) == 32 {
		return c.Value
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	v := hex.EncodeToString(b[:])
	//nolint:gosec // Secure whenever served over TLS, as the login cookie
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: v, Path: "/login", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteLaxMode})
	return v
}

// loginPage shows the login form, with its CSRF token.
func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) error {
	h.render(w, r, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next")), "CSRF": loginCSRF(preSession(w, r))})
	return nil
}

// login checks the form (sent from this site, with the CSRF token of the
// pre-session cookie: 403 otherwise, no session set) and its token (an
// unknown one counts against the client's address: [lockouts]) and sets
// the login cookie.
func (h *handler) login(w http.ResponseWriter, r *http.Request) error {
	v := ""
	if c, err := r.Cookie(loginCookie); err == nil {
		v = c.Value
	}
	if err := h.checkForm(r, loginCSRF(v)); err != nil {
		return err
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	next := safeNext(r.PostForm.Get("next"))
	if _, known := h.Tokens[tok]; !known {
		if tok != "" {
			h.lockouts.fail(h.clientAddr(r))
		}
		h.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "This token is unknown.", "CSRF": loginCSRF(v)})
		return nil
	}
	//nolint:gosec // Secure whenever served over TLS; a loopback inbox over plain HTTP must log in too
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: tok, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther) //nolint:gosec // G710: next is safeNext's, a path of this site
	return nil
}

// logout clears the login cookie.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) error {
	//nolint:gosec // as the login's
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// safeNext is where a login sends the browser: a path of this site, else
// the inbox. The path is checked as sent and once decoded, so that no
// form a browser reads as another site's passes: it begins with one
// slash, then printable ASCII without a backslash, a space or a control
// (browsers drop tabs, CRs and LFs: /\t/host is //host to them), and
// parses as a path alone.
func safeNext(next string) string {
	dec, err := url.PathUnescape(next)
	if err != nil || !localPath(next) || !localPath(dec) {
		return "/"
	}
	return next
}

// localPath reports whether p is a path of this site as a browser reads
// it (see [safeNext]).
func localPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return false
	}
	for _, c := range []byte(p) {
		if c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == "" && u.Opaque == ""
}

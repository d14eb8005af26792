package serve

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

// The web inbox's login (SPEC §12): the same bearer tokens as the API,
// kept in an HttpOnly, SameSite=Strict cookie (Secure when served over
// TLS), so that a replica needs no session state: any replica serves any
// browser. Each form carries a CSRF token derived from the cookie's
// token (HMAC), checked on every POST beside the request's Origin.

// sessionCookie is the name of the inbox's login cookie.
const sessionCookie = "offload_token"

// nonceKey is the context key of a page's CSP nonce.
type nonceKey struct{}

// secure sets the inbox's security headers on every page: a Content
// Security Policy allowing only the page's own inline script and style
// (by nonce) and connections to its own origin, no framing, no referrer
// to other sites,
// no caching.
func secure(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b [16]byte
		_, _ = rand.Read(b[:])
		nonce := hex.EncodeToString(b[:])
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+"'; "+
			"connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin") // "no-referrer" would make a form's Origin "null"
		h.Set("Cache-Control", "no-store")
		next(w, r.WithContext(context.WithValue(r.Context(), nonceKey{}, nonce)))
	}
}

// csrfToken is the CSRF token of the session whose bearer token is tok.
func csrfToken(tok string) string {
	m := hmac.New(sha256.New, []byte(tok))
	m.Write([]byte("offload inbox csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// login is a logged-in browser: its identity, token and CSRF token.
type login struct {
	Identity
	token, csrf string
}

type sessionKey struct{}

// sessionOf returns the request's session (set by [inbox.login]).
func sessionOf(r *http.Request) login {
	s, _ := r.Context().Value(sessionKey{}).(login)
	return s
}

// loggedIn lets a request with the login cookie of a known token through
// (its identity also where the API's handlers read it); a page without
// one is redirected to the login form, anything else is 401. A POST must
// carry the session's CSRF token and, when the browser sends one, the
// request's own Origin.
func (in *inbox) loggedIn(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(sessionCookie)
		var id Identity
		known := false
		if err == nil {
			id, known = in.h.Tokens[c.Value]
		}
		if !known {
			if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/events") {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			in.fail(w, r, http.StatusUnauthorized, "Log in first.")
			return
		}
		s := login{Identity: id, token: c.Value, csrf: csrfToken(c.Value)}
		if r.Method == http.MethodPost {
			if o := r.Header.Get("Origin"); o != "" && o != origin(r) {
				in.fail(w, r, http.StatusForbidden, "This form was sent from another site.")
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
				in.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page.")
				return
			}
		}
		ctx := context.WithValue(context.WithValue(r.Context(), sessionKey{}, s), identityKey{}, id)
		next(w, r.WithContext(ctx))
	}
}

// may reports whether the session's role may do what roles may (admin
// always).
func (s login) may(roles ...Role) bool {
	return s.Role == RoleAdmin || slices.Contains(roles, s.Role)
}

// origin is the request's own origin, as a browser sends it in Origin.
func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// loginPage shows the login form.
func (in *inbox) loginPage(w http.ResponseWriter, r *http.Request) {
	in.render(w, r, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// login checks the form's token and sets the login cookie.
func (in *inbox) login(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	if _, known := in.h.Tokens[tok]; !known {
		in.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "This token is unknown."})
		return
	}
	//nolint:gosec // Secure whenever served over TLS; a loopback inbox over plain HTTP must log in too
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: tok, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout clears the login cookie.
func (in *inbox) logout(w http.ResponseWriter, r *http.Request) {
	//nolint:gosec // as the login's
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext is where a login sends the browser: a path of this site, else
// the inbox.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/"
	}
	return next
}

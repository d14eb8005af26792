// Package web is the HTTP face of `agent serve` (SPEC §11, §12): the JSON
// API under /v1, the web inbox (server-rendered pages over the pending
// calls, with forms that decide and answer them, live with a small
// script), the signed links' pages, and /healthz, /readyz and /metrics.
//
// It calls the service's core through [service.Core] and the people's
// pending work through [pending.Desk], and imports no NATS code: every
// route is one row of one table ([Handler]), authorized by one check
// (a bearer token for the API, the login cookie for pages), its errors
// answered by one mapping (JSON for the API, a page for the inbox), its
// streams written by one Server-Sent Events writer. A protocol face added
// later is a file set here calling the same core.
package web

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/service"
)

// Config configures [Handler].
type Config struct {
	// Core runs the conversations. Required.
	Core service.Core
	// Desk lists the pending calls and publishes the decisions and
	// answers given over the API and in the inbox. Required.
	Desk *pending.Desk
	// Tokens are the accepted bearer tokens. Required.
	Tokens Tokens
	// Inbox serves the web inbox (SPEC §12) at /, with its login.
	Inbox bool
	// Links, if set with Inbox, lets approvers make signed approve/deny
	// links in the inbox, served at /links/ (SPEC §12).
	Links links.Store
	// Logger receives the handler's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics, if set, counts the requests (offload_http_requests_total).
	Metrics *metrics.Serve
	// Gatherer, if set, is served on GET /metrics.
	Gatherer prometheus.Gatherer
	// Now is the clock of the pages (ages, links' expiry). Defaults to
	// time.Now.
	Now func() time.Time
}

// handler serves the routes of one Config.
type handler struct {
	Config
}

// Handler returns the HTTP face of cfg: every route of [routes] on one
// mux, each request counted by its route (offload_http_requests_total).
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &handler{Config: cfg}
	mux := http.NewServeMux()
	for _, rt := range h.routes() {
		mux.Handle(rt.pattern, h.serve(rt))
	}
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", metrics.Handler(cfg.Gatherer))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &codeWriter{ResponseWriter: w, code: http.StatusOK}
		mux.ServeHTTP(cw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		cfg.Metrics.HTTPRequest(route, cw.code)
	})
}

// face is who a route answers: a program (JSON, a bearer token) or a
// person's browser (HTML pages, the login cookie, security headers).
type face int

const (
	api face = iota
	page
)

// route is one row of the table.
type route struct {
	pattern string
	face    face
	// public routes need no token; the others a known token of one of
	// roles (any role when none is named; admin always).
	public bool
	roles  []Role
	handle func(w http.ResponseWriter, r *http.Request) error
}

// Role sets of the routes.
var (
	anyRole   []Role
	operators = []Role{RoleOperator}
	approvers = []Role{RoleApprover}
	answerers = []Role{RoleAnswerer}
)

// routes is the table of every route but /metrics: the API of SPEC §11,
// then, with Config.Inbox, the inbox's pages and forms of §12.
func (h *handler) routes() []route {
	rs := []route{
		{pattern: "GET /healthz", face: api, public: true, handle: h.healthz},
		{pattern: "GET /readyz", face: api, public: true, handle: h.readyz},
		{pattern: "POST /v1/conversations", face: api, roles: operators, handle: h.start},
		{pattern: "GET /v1/conversations", face: api, roles: anyRole, handle: h.list},
		{pattern: "GET /v1/conversations/{id}", face: api, roles: anyRole, handle: h.get},
		{pattern: "GET /v1/conversations/{id}/events", face: api, roles: anyRole, handle: h.events},
		{pattern: "POST /v1/conversations/{id}/calls/{task}/decision", face: api, roles: approvers, handle: h.decide},
		{pattern: "POST /v1/conversations/{id}/calls/{task}/answer", face: api, roles: answerers, handle: h.answer},
		{pattern: "GET /v1/conversations/{id}/history", face: api, roles: anyRole, handle: h.history},
		{pattern: "POST /v1/conversations/{id}/messages", face: api, roles: operators, handle: h.postMessage},
		{pattern: "POST /v1/conversations/{id}/cancel", face: api, roles: operators, handle: h.cancel},
		{pattern: "GET /v1/pending", face: api, roles: anyRole, handle: h.pending},
	}
	if !h.Inbox {
		return rs
	}
	rs = append(rs,
		route{pattern: "GET /login", face: page, public: true, handle: h.loginPage},
		route{pattern: "POST /login", face: page, public: true, handle: h.login},
		route{pattern: "POST /logout", face: page, roles: anyRole, handle: h.logout},
		route{pattern: "GET /{$}", face: page, roles: anyRole, handle: h.inboxPage},
		route{pattern: "GET /inbox/events", face: page, roles: anyRole, handle: h.inboxChanges},
		route{pattern: "POST /conversations/{id}/calls/{task}/decide", face: page, roles: approvers, handle: h.inboxDecide},
		route{pattern: "POST /conversations/{id}/calls/{task}/answer", face: page, roles: answerers, handle: h.inboxAnswer},
		route{pattern: "GET /conversations/{id}", face: page, roles: anyRole, handle: h.timeline},
		route{pattern: "GET /conversations/{id}/events", face: page, roles: anyRole, handle: h.events},
	)
	if h.Links != nil {
		rs = append(rs,
			route{pattern: "POST /conversations/{id}/calls/{task}/links", face: page, roles: approvers, handle: h.mintLinks},
			route{pattern: "GET /links/{token}", face: page, public: true, handle: h.linkPage},
			route{pattern: "POST /links/{token}", face: page, public: true, handle: h.useLink},
		)
	}
	return rs
}

// serve is route rt's handler: its face's headers, its body read within
// its bound (a page's form parsed, urlencoded only), the one
// authorization check, the handler, and its error answered as its face
// answers.
func (h *handler) serve(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.face == page {
			r = secure(w, r)
		}
		if err := readBody(w, r, rt.face); err != nil {
			h.fail(w, r, rt.face, err)
			return
		}
		if !rt.public {
			var err error
			if r, err = h.authorize(w, r, rt); err != nil {
				h.fail(w, r, rt.face, err)
				return
			}
		}
		if err := rt.handle(w, r); err != nil {
			h.fail(w, r, rt.face, err)
		}
	})
}

// codeWriter records the status code of a response; it flushes (SSE).
type codeWriter struct {
	http.ResponseWriter
	code int
}

// WriteHeader implements http.ResponseWriter.
func (c *codeWriter) WriteHeader(code int) {
	c.code = code
	c.ResponseWriter.WriteHeader(code)
}

// Flush implements http.Flusher.
func (c *codeWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

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
//
// Add an HTTP route (a protocol face's included) as a row of the table
// ([handler.routes]), never as a handler of its own on the mux: the row
// gets from the one route wrapper ([handler.serve], [handler.admit])
// what bounds its clients ([Limits]): its body read within 1 MiB before
// anything parses it (a page's form parsed there, urlencoded only), the
// address lockout after failed authentications, the token's request rate,
// the open streams' caps for a row marked stream (its answer a stream of
// events, written with the one SSE writer, which keeps a heartbeat), and
// a write deadline kept ahead of each write; and from the server
// ([ListenAndServe]) its timeouts, header bound and connection cap. A
// handler reads the form from r.PostForm and a body from r.Body (already
// in memory), and never parses one itself.
package web

import (
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/offload-dev/offload/pkg/a2aface"
	"github.com/offload-dev/offload/pkg/agui"
	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/mcpface"
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
	// PublicURL is the base URL people reach the service at ([PublicURL]):
	// the links made start with it, never with a request's Host. Required
	// with Links.
	PublicURL string
	// Logger receives the handler's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics, if set, counts the requests (offload_http_requests_total).
	Metrics *metrics.Serve
	// Gatherer, if set, is served on GET /metrics.
	Gatherer prometheus.Gatherer
	// Now is the clock of the pages (ages, links' expiry) and of the
	// rate limits. Defaults to time.Now.
	Now func() time.Time
	// Limits bound what clients may hold (zero fields: the defaults);
	// give [ListenAndServe] the same.
	Limits Limits
	// AGUI, if set, serves the AG-UI face at POST /agui/{agent} and GET
	// /agui/{agent}/threads/{thread}/events (SPEC §18).
	AGUI *agui.Face
	// MCP, if set, serves the MCP face at POST /mcp (SPEC §17, agent
	// serve --mcp).
	MCP *mcpface.Face
	// A2A, if set, serves the A2A face (SPEC §17): POST /a2a/{agent} (the
	// JSON-RPC binding) and the agents' cards at
	// /a2a/{agent}/.well-known/agent-card.json (and at
	// /.well-known/agent-card.json when it serves one agent).
	A2A *a2aface.Face
	// Tools, if set, serves the operator's hands on the fleet's tools at
	// /v1/tools (SPEC §19), to the roles admin and operator.
	Tools service.Tools
}

// handler serves the routes of one Config.
type handler struct {
	Config
	lockouts *lockouts   // failed authentications, by client address
	rates    *tokenRates // requests, by token
	streams  *streams    // open event streams, in all and by token
	changes  *changes    // the inbox's change signals, shared
	// publicOrigin is PublicURL's origin (scheme://host), which forms may
	// come from besides the request's own.
	publicOrigin string
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
	cfg.Limits = cfg.Limits.orDefaults()
	h := &handler{Config: cfg, lockouts: &lockouts{l: cfg.Limits, now: cfg.Now, addrs: map[string]*failures{}},
		rates: &tokenRates{l: cfg.Limits, now: cfg.Now, lims: map[string]*rate.Limiter{}}, streams: &streams{l: cfg.Limits, by: map[string]int{}}}
	if cfg.Desk != nil {
		h.changes = &changes{watch: cfg.Desk.Changes}
	}
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Scheme != "" && u.Host != "" {
		h.publicOrigin = u.Scheme + "://" + u.Host
	}
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
	// stream routes answer with a stream of events: each holds one of
	// the streams of Limits while open.
	stream bool
	// login is the public route that checks a token itself (the login
	// form): its client's address may be locked out as the others'.
	login  bool
	handle func(w http.ResponseWriter, r *http.Request) error
}

// Role sets of the routes.
var (
	anyRole   []Role
	operators = []Role{RoleOperator}
	approvers = []Role{RoleApprover}
	answerers = []Role{RoleAnswerer}
	// aguiRoles act through an AG-UI input: a turn, a resume's decisions
	// or answers (package agui checks which the input needs).
	aguiRoles = []Role{RoleOperator, RoleApprover, RoleAnswerer}
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
		{pattern: "GET /v1/conversations/{id}/events", face: api, roles: anyRole, stream: true, handle: h.events},
		{pattern: "POST /v1/conversations/{id}/calls/{task}/decision", face: api, roles: approvers, handle: h.decide},
		{pattern: "POST /v1/conversations/{id}/calls/{task}/answer", face: api, roles: answerers, handle: h.answer},
		{pattern: "GET /v1/conversations/{id}/history", face: api, roles: anyRole, handle: h.history},
		{pattern: "POST /v1/conversations/{id}/messages", face: api, roles: operators, handle: h.postMessage},
		{pattern: "POST /v1/conversations/{id}/cancel", face: api, roles: operators, handle: h.cancel},
		{pattern: "GET /v1/pending", face: api, roles: anyRole, handle: h.pending},
	}
	if h.AGUI != nil {
		rs = append(rs,
			route{pattern: "POST /agui/{agent}", face: api, roles: aguiRoles, stream: true, handle: h.aguiRun},
			route{pattern: "GET /agui/{agent}/threads/{thread}/events", face: api, roles: anyRole, stream: true, handle: h.aguiJoin})
	}
	if h.MCP != nil {
		// Any role: mcpface refuses a call to an operator's, an answer
		// to an approver's or answerer's, with the protocol's error.
		rs = append(rs, route{pattern: "POST /mcp", face: api, roles: anyRole, stream: true, handle: h.mcp})
	}
	if h.A2A != nil {
		rs = append(rs,
			route{pattern: "GET /a2a/{agent}/.well-known/agent-card.json", face: api, public: true, handle: h.a2aCard},
			route{pattern: "POST /a2a/{agent}", face: api, roles: anyRole, stream: true, handle: h.a2aRPC})
		if h.A2A.Single() != "" {
			rs = append(rs, route{pattern: "GET /.well-known/agent-card.json", face: api, public: true, handle: h.a2aCard})
		}
	}
	if h.Tools != nil {
		rs = append(rs,
			route{pattern: "GET /v1/tools", face: api, roles: operators, handle: h.tools},
			route{pattern: "POST /v1/tools/{tool}/pause", face: api, roles: operators, handle: h.pauseTool},
			route{pattern: "POST /v1/tools/{tool}/resume", face: api, roles: operators, handle: h.resumeTool},
			route{pattern: "POST /v1/tools/{tool}/cancel", face: api, roles: operators, handle: h.cancelCalls},
			route{pattern: "GET /v1/tools/{tool}/dead", face: api, roles: operators, handle: h.deadLetters},
			route{pattern: "POST /v1/tools/{tool}/dead/{seq}/replay", face: api, roles: operators, handle: h.replay},
			route{pattern: "POST /v1/tools/{tool}/dead/{seq}/discard", face: api, roles: operators, handle: h.discard},
		)
	}
	if !h.Inbox {
		return rs
	}
	rs = append(rs,
		route{pattern: "GET /login", face: page, public: true, handle: h.loginPage},
		route{pattern: "POST /login", face: page, public: true, login: true, handle: h.login},
		route{pattern: "POST /logout", face: page, roles: anyRole, handle: h.logout},
		route{pattern: "GET /{$}", face: page, roles: anyRole, handle: h.inboxPage},
		route{pattern: "GET /inbox/events", face: page, roles: anyRole, stream: true, handle: h.inboxChanges},
		route{pattern: "POST /conversations/{id}/calls/{task}/decide", face: page, roles: approvers, handle: h.inboxDecide},
		route{pattern: "POST /conversations/{id}/calls/{task}/answer", face: page, roles: answerers, handle: h.inboxAnswer},
		route{pattern: "GET /conversations", face: page, roles: anyRole, handle: h.conversationsPage},
		route{pattern: "GET /conversations/{id}", face: page, roles: anyRole, handle: h.timeline},
		route{pattern: "POST /conversations/{id}/cancel", face: page, roles: operators, handle: h.cancelPage},
		route{pattern: "GET /conversations/{id}/events", face: page, roles: anyRole, stream: true, handle: h.events},
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

// serve is route rt's handler: the limits every route gets, then the
// handler. The answer's write deadline is extended at each write, its
// face's headers set, then [handler.admit] lets the request through, or
// answers it, before the handler runs; an error is answered as its face
// answers.
func (h *handler) serve(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: h.Limits.WriteTimeout}
		if rt.face == page {
			r = secure(w, r)
		}
		r, release, err := h.admit(w, r, rt)
		if err != nil {
			h.fail(w, r, rt.face, err)
			return
		}
		defer release()
		if err := rt.handle(w, r); err != nil {
			h.fail(w, r, rt.face, err)
		}
	})
}

// admit is what every request of a route goes through, in order: an
// address locked out after failed authentications is 429 (routes that
// authenticate, the login's included); its body is read within its bound (a page's form
// parsed, urlencoded only), after which the connection's read deadline
// is lifted (the request is read: an answer that waits, or a stream, is
// bounded by its write deadline); the one authorization check; the
// token's request rate (429 beyond); a stream route's share of the open
// streams (429 beyond). It returns the request with its caller and what
// releases what it took.
func (h *handler) admit(w http.ResponseWriter, r *http.Request, rt route) (*http.Request, func(), error) {
	nothing := func() {}
	if !rt.public || rt.login {
		if wait := h.lockouts.wait(h.clientAddr(r)); wait > 0 {
			return r, nothing, tooMany(wait, "Too many failed authentications from this address: try again later.")
		}
	}
	if err := readBody(w, r, rt.face); err != nil {
		return r, nothing, err
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if rt.public {
		return r, nothing, nil
	}
	r, err := h.authorize(w, r, rt)
	if err != nil {
		return r, nothing, err
	}
	tok := callerOf(r).token
	if wait := h.rates.wait(tok); wait > 0 {
		return r, nothing, tooMany(wait, "This token makes requests faster than it may (%g a second): slow down.", h.Limits.TokenRate)
	}
	if !rt.stream {
		return r, nothing, nil
	}
	release, err := h.streams.open(tok)
	if err != nil {
		return r, nothing, err
	}
	return r, release, nil
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

// Unwrap returns the writer it wraps (http.ResponseController).
func (c *codeWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

package web

import (
	"bytes"
	"errors"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits bound what clients may hold of the HTTP face, so that no client,
// authenticated or not, starves the others (SECURITY.md, "agent serve's
// HTTP face, against a client"). Every route of the table gets them from
// the route wrapper ([handler.serve]: bodies, rate limits, lockouts,
// streams, write deadlines) and the server from [ListenAndServe]
// (timeouts, header size, connections): a route or a face added later
// inherits them by being a row of the table. A zero field takes its
// default.
type Limits struct {
	// MaxConnections bounds the open connections of the server; further
	// ones wait in the listen backlog until one closes. Default 1024.
	MaxConnections int
	// MaxStreams bounds the open event streams (Server-Sent Events) of
	// the replica, MaxStreamsPerToken those of one token: 429 beyond.
	// Defaults 256 and 32.
	MaxStreams, MaxStreamsPerToken int
	// TokenRate is the requests per second one token may make on
	// average, TokenBurst at once: 429 beyond. Defaults 50, and 4 times
	// TokenRate.
	TokenRate  float64
	TokenBurst int
	// AuthFailures failed authentications (an unknown token at the login,
	// in Authorization or in the login cookie) from one client address
	// within AuthWindow lock that address out for Lockout: every
	// authentication from it is 429 until then. Defaults 10, 10 min and
	// 5 min.
	AuthFailures int
	AuthWindow   time.Duration
	Lockout      time.Duration
	// TrustedProxies are the networks of the proxies in front of the
	// service (an ingress): a request from one is the client's it
	// forwards, the last address of X-Forwarded-For not itself a trusted
	// proxy's. Without, X-Forwarded-For is ignored (a client cannot name
	// another address for itself), and every client behind a proxy is
	// the proxy's address.
	TrustedProxies []net.IPNet
	// ReadHeaderTimeout bounds the reading of a request's headers,
	// ReadTimeout of the whole request, body included; WriteTimeout the
	// writing of an answer, from its first byte and from each event of a
	// stream; IdleTimeout how long a kept-alive connection waits for its
	// next request. Defaults 10 s, 20 s, 30 s and 20 s.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers. Default 64 KiB.
	MaxHeaderBytes int
	// Heartbeat is how often an event stream with nothing to say writes a
	// comment, so that a client gone is noticed. Default 20 s.
	Heartbeat time.Duration
}

// DefaultLimits returns the limits' defaults.
func DefaultLimits() Limits { return Limits{}.orDefaults() }

// orDefaults returns l with every zero field set to its default.
func (l Limits) orDefaults() Limits {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&l.MaxConnections, 1024)
	set(&l.MaxStreams, 256)
	set(&l.MaxStreamsPerToken, 32)
	if l.TokenRate <= 0 {
		l.TokenRate = 50
	}
	set(&l.TokenBurst, max(1, int(4*l.TokenRate)))
	set(&l.AuthFailures, 10)
	setD(&l.AuthWindow, 10*time.Minute)
	setD(&l.Lockout, 5*time.Minute)
	setD(&l.ReadHeaderTimeout, 10*time.Second)
	setD(&l.ReadTimeout, 20*time.Second)
	setD(&l.WriteTimeout, 30*time.Second)
	setD(&l.IdleTimeout, 20*time.Second)
	set(&l.MaxHeaderBytes, 64<<10)
	setD(&l.Heartbeat, 20*time.Second)
	return l
}

// maxBody bounds every request's body: the API's JSON and the pages'
// forms.
const maxBody = 1 << 20

// readBody reads r's body within maxBody before anything parses it, so
// that no handler reads a body of its own: a page's POST is a form,
// urlencoded only (415 for any other type, multipart included: nothing
// is ever written to disk), parsed once here into r.PostForm; any other
// body is read whole into memory for its handler to decode. A body over
// the bound is 413.
func readBody(w http.ResponseWriter, r *http.Request, f face) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if f == page && r.Method == http.MethodPost {
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
			return errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "A form is sent urlencoded (application/x-www-form-urlencoded).")
		}
		if err := r.ParseForm(); err != nil {
			return bodyError(err)
		}
		return nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// bodyError is the answer to err of reading a body: 413 over the bound,
// else 400.
func bodyError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return errorf(http.StatusRequestEntityTooLarge, "too_large", "The body is over %d bytes.", maxBody)
	}
	return badRequest("The body cannot be read: %s", err.Error())
}

// tooMany is a 429 saying msg, to be tried again after wait.
func tooMany(wait time.Duration, format string, args ...any) *httpError {
	e := errorf(http.StatusTooManyRequests, "too_many_requests", format, args...)
	secs := max(1, int(math.Ceil(wait.Seconds())))
	e.header = http.Header{"Retry-After": {strconv.Itoa(secs)}}
	return e
}

// clientAddr is the address a request came from: the connection's,
// unless that is a trusted proxy's (Limits.TrustedProxies), then the
// last address of X-Forwarded-For that is not.
func (h *handler) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if !h.trusted(net.ParseIP(host)) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		ip := net.ParseIP(strings.TrimSpace(hops[i]))
		if ip == nil {
			break // none, or not an address: the proxy's own
		}
		if !h.trusted(ip) {
			return ip.String()
		}
	}
	return host
}

// trusted reports whether ip is a trusted proxy's.
func (h *handler) trusted(ip net.IP) bool {
	if ip == nil {
		return false
	}
	for _, n := range h.Limits.TrustedProxies {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// maxTracked bounds the client addresses the lockouts remember.
const maxTracked = 1 << 16

// lockouts count failed authentications by client address and lock an
// address out after too many.
type lockouts struct {
	l   Limits
	now func() time.Time

	mu    sync.Mutex
	addrs map[string]*failures
}

// failures are one address's failed authentications.
type failures struct {
	n      int
	since  time.Time // the first of the window
	locked time.Time // locked out until then
}

// wait returns how long addr is still locked out (0: it is not).
func (lo *lockouts) wait(addr string) time.Duration {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if f := lo.addrs[addr]; f != nil {
		return max(0, f.locked.Sub(lo.now()))
	}
	return 0
}

// fail counts a failed authentication from addr.
func (lo *lockouts) fail(addr string) {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	now := lo.now()
	f := lo.addrs[addr]
	if f == nil {
		lo.prune(now)
		f = &failures{since: now}
		lo.addrs[addr] = f
	}
	if now.Sub(f.since) > lo.l.AuthWindow {
		f.n, f.since = 0, now
	}
	if f.n++; f.n >= lo.l.AuthFailures {
		f.n, f.since, f.locked = 0, now, now.Add(lo.l.Lockout)
	}
}

// prune forgets the addresses neither locked out nor failing within the
// window once maxTracked are remembered, then any while still full.
func (lo *lockouts) prune(now time.Time) {
	if len(lo.addrs) < maxTracked {
		return
	}
	for a, f := range lo.addrs {
		if now.After(f.locked) && now.Sub(f.since) > lo.l.AuthWindow {
			delete(lo.addrs, a)
		}
	}
	for a := range lo.addrs {
		if len(lo.addrs) < maxTracked {
			break
		}
		delete(lo.addrs, a)
	}
}

// tokenRates are the request rates of the tokens (a limiter per token of
// the tokens file: bounded).
type tokenRates struct {
	l   Limits
	now func() time.Time

	mu   sync.Mutex
	lims map[string]*rate.Limiter
}

// wait takes a request of tok from its bucket, or returns how long until
// one is free (nothing taken).
func (tr *tokenRates) wait(tok string) time.Duration {
	tr.mu.Lock()
	lim := tr.lims[tok]
	if lim == nil {
		lim = rate.NewLimiter(rate.Limit(tr.l.TokenRate), tr.l.TokenBurst)
		tr.lims[tok] = lim
	}
	tr.mu.Unlock()
	now := tr.now()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// streams count the open event streams, in all and by token.
type streams struct {
	l Limits

	mu    sync.Mutex
	total int
	by    map[string]int
}

// open takes a stream of tok, or returns the 429 of a cap reached; release
// gives it back.
func (s *streams) open(tok string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.by[tok] >= s.l.MaxStreamsPerToken:
		return nil, tooMany(5*time.Second, "This token has %d event streams open, the most it may: close one first.", s.by[tok])
	case s.total >= s.l.MaxStreams:
		return nil, tooMany(5*time.Second, "The service serves %d event streams, the most it may: try again later.", s.total)
	}
	s.total++
	s.by[tok]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.total--
			if s.by[tok]--; s.by[tok] == 0 {
				delete(s.by, tok)
			}
		})
	}, nil
}

// deadlineWriter sets the connection's write deadline WriteTimeout ahead
// of each write and flush: an answer that waits (?wait=1) or a stream is
// not cut for its length, a client that stops reading is.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (dw *deadlineWriter) extend() { _ = dw.rc.SetWriteDeadline(time.Now().Add(dw.d)) }

// WriteHeader implements http.ResponseWriter.
func (dw *deadlineWriter) WriteHeader(code int) {
	dw.extend()
	dw.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (dw *deadlineWriter) Write(b []byte) (int, error) {
	dw.extend()
	return dw.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (dw *deadlineWriter) Flush() {
	dw.extend()
	_ = dw.rc.Flush()
}

// Unwrap returns the writer it wraps (http.ResponseController).
func (dw *deadlineWriter) Unwrap() http.ResponseWriter { return dw.ResponseWriter }

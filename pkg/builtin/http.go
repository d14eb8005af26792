package builtin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// MaxHTTPRedirects is how many redirects http_fetch follows.
const MaxHTTPRedirects = 5

// HTTPFetchArgs are the arguments of http_fetch.
type HTTPFetchArgs struct {
	// URL is the http or https URL to fetch.
	URL string `json:"url" jsonschema:"The http or https URL to fetch."`
	// Method is GET (the default) or HEAD.
	Method string `json:"method,omitempty" jsonschema:"GET (the default) or HEAD."`
	// Headers are extra request headers. Hop-by-hop headers and headers
	// that look like credentials are dropped.
	Headers map[string]string `json:"headers,omitempty" jsonschema:"Extra request headers. Hop-by-hop and credential headers are dropped."`
}

// HTTPFetchResult is the result of http_fetch.
type HTTPFetchResult struct {
	// URL is the URL finally fetched, after redirects.
	URL string `json:"url"`
	// Status is the HTTP status code; 400 and above are results too.
	Status int `json:"status"`
	// Headers holds a few response headers: Content-Type, Content-Length,
	// Last-Modified, ETag and Location, when present.
	Headers map[string]string `json:"headers,omitempty"`
	// DroppedHeaders names the request headers of the arguments that were
	// not sent (hop-by-hop or credential headers).
	DroppedHeaders []string `json:"dropped_headers,omitempty"`
	// Body is the response body as text, truncated with a marker when it is
	// over the size limit (which counts the body as JSON text, so that the
	// result always fits a message).
	Body string `json:"body"`
	// Truncated is true when Body was truncated.
	Truncated bool `json:"truncated,omitempty"`
}

// resultHeaders are the response headers http_fetch returns.
var resultHeaders = []string{"Content-Type", "Content-Length", "Last-Modified", "ETag", "Location"}

// hopByHop are request headers the model may not set: connection-level
// headers, and those the client computes itself.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
	"Host", "Content-Length", "Expect", "Forwarded", "Via",
}

// credentialWords make a request header look like a credential.
var credentialWords = []string{"auth", "cookie", "token", "secret", "password", "passwd", "key", "session", "credential", "signature"}

// droppedHeader reports whether http_fetch refuses to send a header named
// name (canonical form).
func droppedHeader(name string) bool {
	if slices.Contains(hopByHop, name) || strings.HasPrefix(name, "X-Forwarded-") || strings.HasPrefix(name, "Proxy-") {
		return true
	}
	lower := strings.ToLower(name)
	for _, w := range credentialWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// fetcher is http_fetch with its client.
type fetcher struct {
	cfg    Config
	client *http.Client
}

func newFetcher(cfg Config) *fetcher {
	dialer := newGuardedDialer(cfg.HTTPAddrPolicy, cfg.DenyAddrs, cfg.HTTPLookup)
	transport := &http.Transport{
		// No proxy: a proxy would reach the addresses the policy refuses.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.HTTPTimeout,
		// Each call dials anew (and is checked anew); no idle connection
		// outlives a call.
		DisableKeepAlives: true,
	}
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > MaxHTTPRedirects {
				return errTooManyRedirects
			}
			// Refused, not stripped: the client would send them as an
			// Authorization header (to whatever host the redirect names),
			// and the final URL the model sees would carry them.
			if req.URL.User != nil {
				return errRedirectCredentials
			}
			return nil
		},
	}
	return &fetcher{cfg: cfg, client: client}
}

var errTooManyRedirects = fmt.Errorf("stopped after %d redirects", MaxHTTPRedirects)

// errRedirectCredentials refuses a redirect to a URL with user info.
var errRedirectCredentials = errors.New("redirected to a URL with credentials, which are not allowed")

func httpFetchTool(cfg Config) (*tool.Tool, error) {
	f := newFetcher(cfg)
	desc := fmt.Sprintf("Fetch an http or https URL with GET or HEAD and return the status, a few headers and the body as text (at most %s; longer bodies are truncated). Requests time out after %s. Private and local network addresses are refused.",
		size(cfg.HTTPMaxBytes), cfg.HTTPTimeout)
	if cfg.AllowPrivateNetwork {
		desc = strings.TrimSuffix(desc, " Private and local network addresses are refused.")
	}
	fetch := func(ctx context.Context, _ *tool.RunContext, a HTTPFetchArgs) (HTTPFetchResult, error) {
		return f.fetch(ctx, a)
	}
	t, err := tool.NewFunc(NameHTTPFetch, desc, fetch, tool.Timeout(cfg.HTTPTimeout))
	if err != nil {
		return nil, err
	}
	return constrain(t, func(p map[string]*jsonschema.Schema) {
		p["method"].Enum = []any{http.MethodGet, http.MethodHead}
	})
}

func (f *fetcher) fetch(ctx context.Context, a HTTPFetchArgs) (HTTPFetchResult, error) {
	cfg := f.cfg
	method := strings.ToUpper(a.Method)
	if method == "" {
		method = http.MethodGet
	}
	if method != http.MethodGet && method != http.MethodHead {
		return HTTPFetchResult{}, fail("http_fetch: method %q is not allowed; use GET or HEAD", a.Method)
	}
	u, err := url.Parse(a.URL)
	if err != nil {
		return HTTPFetchResult{}, fail("http_fetch: invalid URL %q", a.URL)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return HTTPFetchResult{}, fail("http_fetch: URL %q: only http and https URLs are allowed", a.URL)
	}
	if u.Host == "" {
		return HTTPFetchResult{}, fail("http_fetch: URL %q has no host", a.URL)
	}
	if u.User != nil {
		return HTTPFetchResult{}, fail("http_fetch: URL %q: credentials in URLs are not allowed", u.Redacted())
	}

	reqCtx, cancel := context.WithTimeout(ctx, cfg.HTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, method, u.String(), nil)
	if err != nil {
		return HTTPFetchResult{}, fail("http_fetch: invalid URL %q", a.URL)
	}
	var dropped []string
	for k, v := range a.Headers {
		name := http.CanonicalHeaderKey(strings.TrimSpace(k))
		if droppedHeader(name) {
			dropped = append(dropped, name)
			continue
		}
		req.Header.Set(name, v)
	}
	slices.Sort(dropped)
	resp, err := f.client.Do(req)
	if err != nil {
		return HTTPFetchResult{}, httpErr(ctx, reqCtx, cfg, method, a.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		// The service refused the call for now and said for how long
		// (SPEC §19): the worker cools the tool down and runs the call
		// again after it. Without Retry-After, the status is the result.
		if after, ok := limits.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return HTTPFetchResult{}, &tool.RateLimited{After: after, Message: fmt.Sprintf("%s %s: %s", method, a.URL, resp.Status)}
		}
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, cfg.HTTPMaxBytes+1))
	if err != nil {
		return HTTPFetchResult{}, httpErr(ctx, reqCtx, cfg, method, a.URL, err)
	}
	res := HTTPFetchResult{URL: resp.Request.URL.String(), Status: resp.StatusCode, DroppedHeaders: dropped}
	for _, h := range resultHeaders {
		if v := resp.Header.Get(h); v != "" {
			if res.Headers == nil {
				res.Headers = map[string]string{}
			}
			res.Headers[h] = v
		}
	}
	over := int64(len(body)) > cfg.HTTPMaxBytes
	if over {
		body = body[:cfg.HTTPMaxBytes]
	}
	text := strings.ToValidUTF8(string(body), "\uFFFD")
	marker := fmt.Sprintf("\n[truncated: the body is longer than %d bytes]", cfg.HTTPMaxBytes)
	// The result travels JSON-encoded in a message of at most
	// protocol.MaxContentBytes: the body gets what the rest of the result
	// (counted with "truncated":true and the marker, escaped) leaves.
	rest := res
	rest.Truncated = true
	budget := protocol.MaxContentBytes - encodedLen(rest) - 2*len(marker)
	text, cut := truncateEncoded(text, max(budget, 0))
	if res.Truncated = over || cut; res.Truncated {
		if cut && !over {
			marker = "\n[truncated: the body is longer than the result may be]"
		}
		text += marker
	}
	res.Body = text
	return res, nil
}

// httpErr turns a transport error into the call's outcome: the caller's
// cancellation stays an error, everything else fails with a short reason,
// never the dial error itself.
func httpErr(ctx, reqCtx context.Context, cfg Config, method, rawURL string, err error) error {
	if ctx.Err() != nil {
		return ctxErr(ctx, NameHTTPFetch)
	}
	// The request's deadline, or the transport's own timer firing a moment
	// before it: the same timeout.
	var ne net.Error
	if errors.Is(reqCtx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fail("http_fetch: %s %s: timed out after %s", method, rawURL, cfg.HTTPTimeout)
	}
	return fail("http_fetch: %s %s: %s", method, rawURL, reason(err))
}

// reason is the short text the model sees for a transport error.
func reason(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.Is(err, ErrAddrNotAllowed):
		return "address not allowed"
	case errors.Is(err, errTooManyRedirects):
		return errTooManyRedirects.Error()
	case errors.Is(err, errRedirectCredentials):
		return errRedirectCredentials.Error()
	case errors.As(err, &dnsErr):
		return "host not found"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &certErr):
		return "TLS certificate not valid"
	case errors.As(err, &recordErr):
		return "TLS handshake failed"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	default:
		return "connection failed"
	}
}

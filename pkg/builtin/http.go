package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/offload-dev/offload/pkg/tool"
)

// HTTPFetchArgs are the arguments of http_fetch.
type HTTPFetchArgs struct {
	// URL is the http or https URL to fetch.
	URL string `json:"url" jsonschema:"The http or https URL to fetch."`
	// Method is GET (the default) or HEAD.
	Method string `json:"method,omitempty" jsonschema:"GET (the default) or HEAD."`
	// Headers are extra request headers.
	Headers map[string]string `json:"headers,omitempty" jsonschema:"Extra request headers."`
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
	// Body is the response body as text, truncated with a marker when it is
	// over the size limit.
	Body string `json:"body"`
	// Truncated is true when Body was truncated.
	Truncated bool `json:"truncated,omitempty"`
}

// resultHeaders are the response headers http_fetch returns.
var resultHeaders = []string{"Content-Type", "Content-Length", "Last-Modified", "ETag", "Location"}

func httpFetchTool(cfg Config) (*tool.Tool, error) {
	desc := fmt.Sprintf("Fetch an http or https URL with GET or HEAD and return the status, a few headers and the body as text (at most %s; longer bodies are truncated). Requests time out after %s.",
		size(cfg.HTTPMaxBytes), cfg.HTTPTimeout)
	fetch := func(ctx context.Context, _ *tool.RunContext, a HTTPFetchArgs) (HTTPFetchResult, error) {
		return httpFetch(ctx, cfg, a)
	}
	t, err := tool.NewFunc(NameHTTPFetch, desc, fetch)
	if err != nil {
		return nil, err
	}
	return constrain(t, func(p map[string]*jsonschema.Schema) {
		p["method"].Enum = []any{http.MethodGet, http.MethodHead}
	})
}

func httpFetch(ctx context.Context, cfg Config, a HTTPFetchArgs) (HTTPFetchResult, error) {
	method := strings.ToUpper(a.Method)
	if method == "" {
		method = http.MethodGet
	}
	if method != http.MethodGet && method != http.MethodHead {
		return HTTPFetchResult{}, fail("http_fetch: method %q is not allowed; use GET or HEAD", a.Method)
	}
	u, err := url.Parse(a.URL)
	if err != nil {
		return HTTPFetchResult{}, fail("http_fetch: invalid URL %q: %v", a.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return HTTPFetchResult{}, fail("http_fetch: URL %q: only http and https URLs are allowed", a.URL)
	}
	if u.Host == "" {
		return HTTPFetchResult{}, fail("http_fetch: URL %q has no host", a.URL)
	}

	reqCtx, cancel := context.WithTimeout(ctx, cfg.HTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, method, u.String(), nil)
	if err != nil {
		return HTTPFetchResult{}, fail("http_fetch: %v", err)
	}
	for k, v := range a.Headers {
		req.Header.Set(k, v)
	}
	resp, err := cfg.HTTPClient.Do(req)
	if err != nil {
		return HTTPFetchResult{}, httpErr(ctx, reqCtx, cfg, method, a.URL, err)
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, cfg.HTTPMaxBytes+1))
	if err != nil {
		return HTTPFetchResult{}, httpErr(ctx, reqCtx, cfg, method, a.URL, err)
	}
	res := HTTPFetchResult{URL: resp.Request.URL.String(), Status: resp.StatusCode}
	if int64(len(body)) > cfg.HTTPMaxBytes {
		body = body[:cfg.HTTPMaxBytes]
		res.Truncated = true
	}
	res.Body = strings.ToValidUTF8(string(body), "\uFFFD")
	if res.Truncated {
		res.Body += fmt.Sprintf("\n[truncated: the body is longer than %d bytes]", cfg.HTTPMaxBytes)
	}
	for _, h := range resultHeaders {
		if v := resp.Header.Get(h); v != "" {
			if res.Headers == nil {
				res.Headers = map[string]string{}
			}
			res.Headers[h] = v
		}
	}
	return res, nil
}

// httpErr turns a transport error into the call's outcome: the caller's
// cancellation stays an error, everything else fails with a message.
func httpErr(ctx, reqCtx context.Context, cfg Config, method, rawURL string, err error) error {
	if ctx.Err() != nil {
		return ctxErr(NameHTTPFetch, ctx)
	}
	if errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
		return fail("http_fetch: %s %s: timed out after %s", method, rawURL, cfg.HTTPTimeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fail("http_fetch: %s %s: %v", method, rawURL, err)
}

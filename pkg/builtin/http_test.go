package builtin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/tool"
)

// httpBundle is an httptest server (loopback) and the http_fetch tool
// pointed at it.
type httpBundle struct {
	srv   *httptest.Server
	fetch *tool.Tool
}

func setupHTTP(t *testing.T, cfg builtin.Config, h http.Handler) httpBundle {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg.Root = t.TempDir()
	if cfg.HTTPAddrPolicy == nil {
		cfg.HTTPAddrPolicy = only(srv)
	}
	return httpBundle{srv: srv, fetch: toolsFor(t, cfg)["http_fetch"]}
}

func testMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("X-Secret-Internal", "nope")
		_, _ = io.WriteString(w, "hello, "+r.Header.Get("X-Name"))
	})
	mux.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("say") != "" {
			w.Header().Set("Retry-After", r.URL.Query().Get("say"))
		}
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("a", 100))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/hello", http.StatusFound)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	mux.HandleFunc("/slowbody", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "start")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	return mux
}

func TestHTTPFetch(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, builtin.Config{}, testMux())

	out, err := call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/hello","headers":{"X-Name":"gopher"}}`)
	if err != nil {
		t.Fatal(err)
	}
	r := out.(builtin.HTTPFetchResult)
	if r.Status != 200 || r.Body != "hello, gopher" || r.Truncated || r.URL != b.srv.URL+"/hello" {
		t.Errorf("result = %+v", r)
	}
	if r.Headers["Content-Type"] != "text/plain; charset=utf-8" || r.Headers["ETag"] != `"v1"` || r.Headers["Content-Length"] != "13" {
		t.Errorf("headers = %v", r.Headers)
	}
	if _, ok := r.Headers["X-Secret-Internal"]; ok {
		t.Errorf("unexpected header returned: %v", r.Headers)
	}

	out, err = call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/missing"}`)
	if err != nil {
		t.Fatalf("404 is an error: %v", err)
	}
	if r := out.(builtin.HTTPFetchResult); r.Status != 404 || r.Body != "no such page\n" {
		t.Errorf("404 result = %+v", r)
	}

	out, err = call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/hello","method":"HEAD"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(builtin.HTTPFetchResult); r.Status != 200 || r.Body != "" {
		t.Errorf("HEAD result = %+v", r)
	}

	out, err = call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/redirect"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(builtin.HTTPFetchResult); r.URL != b.srv.URL+"/hello" || r.Body != "hello, " {
		t.Errorf("redirect result = %+v", r)
	}
}

func TestHTTPFetchTruncates(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, builtin.Config{HTTPMaxBytes: 10}, testMux())
	out, err := call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/big"}`)
	if err != nil {
		t.Fatal(err)
	}
	r := out.(builtin.HTTPFetchResult)
	if !r.Truncated || r.Body != "aaaaaaaaaa\n[truncated: the body is longer than 10 bytes]" {
		t.Errorf("result = %+v", r)
	}
}

func TestHTTPFetchRefuses(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, builtin.Config{}, testMux())
	tests := []struct{ args, want string }{
		{`{"url":"ftp://example.com/x"}`, "only http and https"},
		{`{"url":"file:///etc/passwd"}`, "only http and https"},
		{`{"url":"http:///nohost"}`, "no host"},
		{`{"url":"://bad"}`, "invalid URL"},
	}
	for _, tc := range tests {
		_, err := call(t.Context(), t, b.fetch, tc.args)
		wantFail(t, err, tc.want)
	}
	// The schema allows only GET and HEAD; the body checks too.
	if _, err := b.fetch.ParseArgs(`{"url":"http://x","method":"POST"}`); err == nil {
		t.Error("POST accepted by the schema")
	}
	_, err := b.fetch.Run(t.Context(), nil, []byte(`{"url":"`+b.srv.URL+`/hello","method":"DELETE"}`))
	wantFail(t, err, `method "DELETE" is not allowed`)
}

func TestHTTPFetchTransportError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	fetch := toolsFor(t, builtin.Config{Root: t.TempDir(), AllowPrivateNetwork: true})["http_fetch"]
	_, err := call(t.Context(), t, fetch, `{"url":"`+url+`/x"}`)
	wantFail(t, err, "GET "+url+"/x: connection refused")
}

func TestHTTPFetchTimeout(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, builtin.Config{HTTPTimeout: 50 * time.Millisecond}, testMux())
	for _, path := range []string{"/hang", "/slowbody"} {
		start := time.Now()
		_, err := call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+path+`"}`)
		wantFail(t, err, "timed out after 50ms")
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s took %s", path, d)
		}
	}
}

func TestHTTPFetchCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	b := setupHTTP(t, builtin.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	}))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, t, b.fetch, `{"url":"`+b.srv.URL+`/"}`)
		done <- err
	}()
	offloadtest.WaitOrTimeout(t, arrived, "the request to reach the server")
	cancel()
	if err := offloadtest.WaitOrTimeout(t, done, "the fetch to return after the cancel"); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// A 429 (or 503) with Retry-After is the service refusing the call for
// now: a tool.RateLimited of that delay (SPEC §19), not a result; without
// Retry-After it is the result, status 429.
func TestHTTPFetchRetryAfter(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, builtin.Config{}, testMux())
	_, err := call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/busy?say=2"}`)
	var rl *tool.RateLimited
	if !errors.As(err, &rl) || rl.After != 2*time.Second {
		t.Fatalf("err %v, want RateLimited after 2s", err)
	}
	out, err := call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/busy"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(builtin.HTTPFetchResult); r.Status != 429 {
		t.Errorf("result %+v", r)
	}
}

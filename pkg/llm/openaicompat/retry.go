package openaicompat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Secret is a credential. It prints, formats and logs as "[REDACTED]"; use
// string(s) to read it.
type Secret string

const redacted = "[REDACTED]"

// String implements fmt.Stringer without revealing the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer without revealing the secret.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// LogValue implements slog.LogValuer without revealing the secret.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText implements encoding.TextMarshaler without revealing the
// secret, so that JSON or YAML dumps of a Config stay safe.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// redact replaces every occurrence of the secret in text.
func (s Secret) redact(text string) string {
	if len(s) < 4 { // too short to be a key; avoid mangling messages
		return text
	}
	return strings.ReplaceAll(text, string(s), redacted)
}

// callInfo is shared, through the request context, between a model call and
// the retrying doer: it records what the HTTP layer saw and go-openai's
// errors do not carry (the Retry-After header).
type callInfo struct {
	mu         sync.Mutex
	attempts   int
	retryAfter time.Duration
}

func (c *callInfo) record(retryAfter time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts++
	c.retryAfter = retryAfter
}

func (c *callInfo) lastRetryAfter() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retryAfter
}

type callInfoKey struct{}

func withCallInfo(ctx context.Context) (context.Context, *callInfo) {
	ci := &callInfo{}
	return context.WithValue(ctx, callInfoKey{}, ci), ci
}

// HTTPDoer sends an HTTP request; *http.Client implements it.
type HTTPDoer interface {
	Do(req *http.Request) (*http.Response, error)
}

// retryDoer wraps an HTTPDoer with bounded retries (429, 5xx, transport
// errors) and the provider quirks that need the raw request body.
type retryDoer struct {
	next              HTTPDoer
	maxRetries        int
	initialBackoff    time.Duration
	maxBackoff        time.Duration
	alwaysSendContent bool
	log               *slog.Logger
	model             string
}

// Do implements HTTPDoer.
func (d *retryDoer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	if d.alwaysSendContent && len(body) > 0 {
		if b, err := addMissingContent(body); err == nil {
			body = b
		} else {
			d.log.Warn("openaicompat: cannot add missing content", "error", err)
		}
	}
	info, _ := ctx.Value(callInfoKey{}).(*callInfo)
	for attempt := 0; ; attempt++ {
		r := req.Clone(ctx)
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			r.ContentLength = int64(len(body))
		}
		resp, err := d.next.Do(r)
		if ctx.Err() != nil {
			if resp != nil && err == nil {
				resp.Body.Close()
			}
			return nil, ctx.Err()
		}
		var retryAfter time.Duration
		retryable := false
		switch {
		case err != nil:
			retryable = true
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			retryable = true
			retryAfter = parseRetryAfter(resp.Header, time.Now())
		}
		if info != nil {
			info.record(retryAfter)
		}
		if !retryable || attempt >= d.maxRetries {
			return resp, err
		}
		wait := d.backoff(attempt)
		if retryAfter > 0 {
			wait = min(retryAfter, d.maxBackoff)
		}
		attrs := []any{"model", d.model, "attempt", attempt + 1, "wait", wait}
		if err != nil {
			attrs = append(attrs, "error", err)
		} else {
			attrs = append(attrs, "status", resp.StatusCode)
			// Drain a little so the connection can be reused.
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			resp.Body.Close()
		}
		d.log.Warn("openaicompat: retrying request", attrs...)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// backoff returns the wait before retry attempt+1: exponential from
// initialBackoff, capped at maxBackoff, with jitter in [d/2, d].
func (d *retryDoer) backoff(attempt int) time.Duration {
	w := d.initialBackoff
	for i := 0; i < attempt && w < d.maxBackoff; i++ {
		w *= 2
	}
	w = min(w, d.maxBackoff)
	if half := w / 2; half > 0 {
		w = half + rand.N(half+1)
	}
	return w
}

func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("openaicompat: read request body: %w", err)
	}
	return b, nil
}

// parseRetryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds or
// an HTTP date). It returns 0 when neither is usable.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// addMissingContent adds "content":"" to every message of a chat request
// that has no content key (go-openai omits empty content; DeepSeek and
// others answer 422 to that).
func addMissingContent(body []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	raw, ok := top["messages"]
	if !ok {
		return body, nil
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, err
	}
	changed := false
	for _, m := range msgs {
		if _, ok := m["content"]; !ok {
			m["content"] = json.RawMessage(`""`)
			changed = true
		}
	}
	if !changed {
		return body, nil
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		return nil, err
	}
	top["messages"] = b
	return json.Marshal(top)
}

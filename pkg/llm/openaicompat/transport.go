package openaicompat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/llm"
)

// HTTPDoer sends an HTTP request; *http.Client implements it.
type HTTPDoer interface {
	Do(req *http.Request) (*http.Response, error)
}

// retryableError is an attempt's failure that a new attempt may cure: a
// transport error, a 429 or 5xx answer, a response cut or silent for the
// idle timeout before it was complete.
type retryableError struct {
	reason     string        // for logs and the retry event
	retryAfter time.Duration // asked for by the provider, if any
	err        error         // returned when the retries are spent
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// errIdle is the cause of an attempt cancelled by its idle watchdog.
var errIdle = errors.New("idle timeout")

// attempt is one HTTP exchange, watched for silence: Body cancels the
// request when nothing arrives for the idle timeout.
type attempt struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
	once   sync.Once
}

func (m *Model) newAttempt(ctx context.Context) *attempt {
	a := &attempt{idle: m.cfg.IdleTimeout}
	a.ctx, a.cancel = context.WithCancelCause(ctx)
	if a.idle > 0 {
		a.timer = time.AfterFunc(a.idle, func() { a.cancel(errIdle) })
	}
	return a
}

// touch resets the idle watchdog: bytes arrived.
func (a *attempt) touch() {
	if a.timer != nil {
		a.timer.Reset(a.idle)
	}
}

// idled reports whether the watchdog cancelled the attempt.
func (a *attempt) idled() bool { return errors.Is(context.Cause(a.ctx), errIdle) }

func (a *attempt) close() {
	a.once.Do(func() {
		if a.timer != nil {
			a.timer.Stop()
		}
		a.cancel(nil)
	})
}

// idleError returns the error of an attempt that went silent.
func (a *attempt) idleError(what string) error {
	return &retryableError{
		reason: fmt.Sprintf("%s silent for %s", what, a.idle),
		err:    fmt.Errorf("openaicompat: %s silent for %s (idle timeout): %w", what, a.idle, llm.ErrIncomplete),
	}
}

// watchedBody resets the watchdog on every read that returns bytes.
type watchedBody struct {
	io.ReadCloser
	a *attempt
}

func (b watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.a.touch()
	}
	return n, err
}

// send posts body to the chat completions endpoint. A 2xx answer is
// returned with its body watched for silence; anything else is an error,
// retryable or not.
func (m *Model) send(a *attempt, body []byte, stream bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, m.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("openaicompat: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Cache-Control", "no-cache")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if m.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+string(m.cfg.APIKey))
	}
	resp, err := m.http.Do(req)
	if err != nil {
		switch {
		case a.idled():
			return nil, a.idleError("response")
		case a.ctx.Err() != nil:
			return nil, fmt.Errorf("openaicompat: %w", a.ctx.Err())
		}
		return nil, &retryableError{
			reason: "transport error: " + m.cfg.APIKey.redact(err.Error()),
			err:    fmt.Errorf("openaicompat: %s", m.cfg.APIKey.redact(err.Error())),
		}
	}
	a.touch()
	if resp.StatusCode/100 == 2 {
		resp.Body = watchedBody{resp.Body, a}
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(watchedBody{resp.Body, a}, 64<<10))
	apiErr := httpError(resp.StatusCode, raw, m.cfg.APIKey)
	apiErr.RetryAfter = parseRetryAfter(resp.Header, time.Now())
	if !apiErr.retryable() {
		return nil, apiErr
	}
	return nil, &retryableError{reason: apiErr.short(), retryAfter: apiErr.RetryAfter, err: apiErr}
}

// do runs attempts until one succeeds, fails for good, or the retries are
// spent, telling req.OnRetry about each new attempt.
func (m *Model) do(ctx context.Context, req *llm.Request, try func(*attempt) (*llm.Response, error)) (*llm.Response, error) {
	for n := 1; ; n++ {
		a := m.newAttempt(ctx)
		resp, err := try(a)
		a.close()
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("openaicompat: %w", ctx.Err())
		}
		var re *retryableError
		if !errors.As(err, &re) {
			return nil, err
		}
		if n > m.cfg.MaxRetries {
			if m.cfg.MaxRetries > 0 {
				return nil, fmt.Errorf("%w (after %d attempts)", re.err, n)
			}
			return nil, re.err
		}
		wait := m.backoff(n - 1)
		if re.retryAfter > 0 {
			if re.retryAfter > m.cfg.MaxBackoff {
				// Retrying sooner than asked would only be refused again.
				return nil, fmt.Errorf("%w (retry asked after %s, more than the %s allowed)", re.err, re.retryAfter, m.cfg.MaxBackoff)
			}
			wait = re.retryAfter
		}
		m.log.Warn("openaicompat: retrying request", "model", m.cfg.Model, "attempt", n+1, "reason", re.reason, "wait", wait)
		if req.OnRetry != nil {
			req.OnRetry(llm.Retry{Attempt: n + 1, Reason: re.reason})
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("openaicompat: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// backoff returns the wait before retry n+1: exponential from
// InitialBackoff, capped at MaxBackoff, with jitter in [d/2, d].
func (m *Model) backoff(n int) time.Duration {
	w := m.cfg.InitialBackoff
	for i := 0; i < n && w < m.cfg.MaxBackoff; i++ {
		w *= 2
	}
	w = min(w, m.cfg.MaxBackoff)
	if half := w / 2; half > 0 {
		w = half + rand.N(half+1) //nolint:gosec // G404: jitter of a backoff, not a secret
	}
	return w
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

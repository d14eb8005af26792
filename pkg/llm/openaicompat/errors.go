package openaicompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ErrUnauthorized matches an [*APIError] with HTTP status 401 or 403: the API
// key is missing, wrong or not allowed to use the model. Retrying is useless.
var ErrUnauthorized = errors.New("openaicompat: unauthorized")

// ErrRateLimited matches an [*APIError] with HTTP status 429 (or the code
// "rate_limit_exceeded" in an in-band error) once the retries are spent.
var ErrRateLimited = errors.New("openaicompat: rate limited")

// ErrQuota matches an [*APIError] saying the account has no quota or credit
// left (OpenAI's 429 insufficient_quota, OpenRouter's 402). It is never
// retried.
var ErrQuota = errors.New("openaicompat: quota exceeded")

// APIError is an error answered by the provider: a non-2xx HTTP status, or
// an in-band error (an error object in a stream chunk or in a 200 body, or
// finish_reason "error").
type APIError struct {
	// StatusCode is the HTTP status of the response (200 for an in-band
	// error).
	StatusCode int
	// InBand is true for an error sent inside a 200 response.
	InBand bool
	// Code is the provider's error code, e.g. "rate_limit_exceeded" or
	// "502"; empty when the provider sent none (or null).
	Code string
	// Type is the provider's error type, e.g. "invalid_request_error".
	Type string
	// Message is the provider's message (or the start of a non-JSON body),
	// with the API key, should it appear, redacted.
	Message string
	// RetryAfter is the wait the provider asked for, if it said one.
	RetryAfter time.Duration
}

// Error implements error: the provider's status, code and message, and
// nothing it did not say.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("openaicompat: ")
	b.WriteString(e.short())
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// short is the status and code, without the message.
func (e *APIError) short() string {
	s := fmt.Sprintf("status %d", e.StatusCode)
	if e.InBand {
		s += ", error in the response"
	}
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	return s
}

// Is reports whether e matches [ErrUnauthorized], [ErrRateLimited] or
// [ErrQuota].
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrRateLimited:
		return !e.quota() && (e.StatusCode == http.StatusTooManyRequests || e.Code == "rate_limit_exceeded")
	case ErrQuota:
		return e.quota()
	}
	return false
}

func (e *APIError) quota() bool {
	return e.Code == "insufficient_quota" || e.StatusCode == http.StatusPaymentRequired
}

// retryable reports whether a new attempt may succeed: 429 (but not a
// quota error) and 5xx.
func (e *APIError) retryable() bool {
	if e.InBand || e.quota() {
		return false
	}
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// maxMessageLen caps the body text copied into an APIError.
const maxMessageLen = 512

// httpError builds the error of a non-2xx answer from its body.
func httpError(status int, body []byte, key Secret) *APIError {
	out := &APIError{StatusCode: status}
	var doc struct {
		Error json.RawMessage `json:"error"`
	}
	var we wireError
	switch {
	case json.Unmarshal(body, &doc) == nil && len(doc.Error) > 0 && doc.Error[0] == '{' && json.Unmarshal(doc.Error, &we) == nil:
		out.Code, out.Type, out.Message = we.code(), we.Type, we.Message
	case json.Unmarshal(body, &doc) == nil && len(doc.Error) > 0 && doc.Error[0] == '"':
		_ = json.Unmarshal(doc.Error, &out.Message) // {"error":"model not found"} (Ollama)
	default:
		out.Message = strings.TrimSpace(string(body))
		if out.Message == "" {
			out.Message = http.StatusText(status)
		}
	}
	out.Message = clipMessage(key.redact(out.Message))
	return out
}

// inBandError builds the error of an error object in a 200 response.
func inBandError(we *wireError, key Secret) *APIError {
	return &APIError{
		StatusCode: http.StatusOK, InBand: true,
		Code: we.code(), Type: we.Type, Message: clipMessage(key.redact(we.Message)),
	}
}

func clipMessage(s string) string {
	if len(s) > maxMessageLen {
		return s[:maxMessageLen] + "…"
	}
	return s
}

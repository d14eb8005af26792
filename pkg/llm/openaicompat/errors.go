package openaicompat

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// ErrUnauthorized matches an [*APIError] with HTTP status 401 or 403: the API
// key is missing, wrong or not allowed to use the model. Retrying is useless.
var ErrUnauthorized = errors.New("openaicompat: unauthorized")

// ErrRateLimited matches an [*APIError] with HTTP status 429 (or the code
// "rate_limit_exceeded" in a streamed error) once the retries are spent.
var ErrRateLimited = errors.New("openaicompat: rate limited")

// APIError is an error answered by the provider: a non-2xx HTTP status, or an
// error event in the middle of a stream (StatusCode 0).
type APIError struct {
	// StatusCode is the HTTP status, 0 for an error sent inside a stream.
	StatusCode int
	// Code is the provider's error code, e.g. "rate_limit_exceeded".
	Code string
	// Type is the provider's error type, e.g. "invalid_request_error".
	Type string
	// Message is the provider's message (or the start of a non-JSON body),
	// with the API key, should it appear, redacted.
	Message string
	// RetryAfter is the wait the provider asked for, if it said one.
	RetryAfter time.Duration

	err error // the go-openai error
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("openaicompat: ")
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, "status %d", e.StatusCode)
	} else {
		b.WriteString("stream error")
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether e matches [ErrUnauthorized] or [ErrRateLimited].
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests || e.Code == "rate_limit_exceeded"
	}
	return false
}

// Unwrap returns the underlying go-openai error.
func (e *APIError) Unwrap() error { return e.err }

// maxMessageLen caps the body text copied into an APIError.
const maxMessageLen = 512

// toAPIError converts a go-openai error into an *APIError, or returns nil
// when err is not an API error.
func toAPIError(err error, key Secret, info *callInfo) *APIError {
	var out *APIError
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		out = &APIError{
			StatusCode: apiErr.HTTPStatusCode,
			Code:       codeString(apiErr.Code),
			Type:       apiErr.Type,
			Message:    apiErr.Message,
			err:        apiErr,
		}
	case errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0:
		msg := strings.TrimSpace(string(reqErr.Body))
		if msg == "" {
			msg = http.StatusText(reqErr.HTTPStatusCode)
		}
		out = &APIError{StatusCode: reqErr.HTTPStatusCode, Message: msg, err: reqErr}
	default:
		return nil
	}
	if len(out.Message) > maxMessageLen {
		out.Message = out.Message[:maxMessageLen] + "…"
	}
	out.Message = key.redact(out.Message)
	if info != nil && out.StatusCode != 0 {
		out.RetryAfter = info.lastRetryAfter()
	}
	return out
}

func codeString(code any) string {
	switch c := code.(type) {
	case nil:
		return ""
	case string:
		return c
	default:
		return fmt.Sprint(c)
	}
}

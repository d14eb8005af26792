package limits

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter bounds a cool-down an upstream asks for: a longer one is
// held to it, so that a wrong header cannot stop a tool for days.
const MaxRetryAfter = time.Hour

// ParseRetryAfter reads an HTTP Retry-After value (RFC 9110 §10.2.3):
// delay-seconds, or an HTTP date, counted from now. It reports false for
// a value that is neither, and holds the delay to [0, MaxRetryAfter].
// MCP tools whose transport carries the header use it too.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return Seconds(n)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampRetry(t.Sub(now)), true
}

// Seconds returns n seconds as a retry-after delay, held to [0,
// MaxRetryAfter]; false for a value that is not a number of seconds (NaN).
func Seconds(n float64) (time.Duration, bool) {
	if n != n { //nolint:gocritic // NaN
		return 0, false
	}
	if n > MaxRetryAfter.Seconds() {
		return MaxRetryAfter, true
	}
	return clampRetry(time.Duration(n * float64(time.Second))), true
}

func clampRetry(d time.Duration) time.Duration {
	return min(max(d, 0), MaxRetryAfter)
}

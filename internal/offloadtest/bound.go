package offloadtest

import (
	"testing"
	"time"
)

// Bound checks a wall-clock upper bound: took, what a step took, must not
// exceed limit. On a machine shared with other work such a bound is luck,
// not a property of the code, so it is asserted only under the soak build
// tag; the ordinary suite logs the figure and relies on a signal that
// proves the same behaviour (a log line, an advisory, an error naming its
// cause). what names the step. To assert the bounds without the long
// fault soak of cmd/toolworker (make soak):
//
//	go test -race -tags soak -skip '^TestSoak$' ./...
func Bound(tb testing.TB, took, limit time.Duration, what string) {
	tb.Helper()
	if Soak && took > limit {
		tb.Errorf("%s took %v, want at most %v", what, took, limit)
		return
	}
	tb.Logf("%s took %v (bound %v, asserted under -tags soak)", what, took.Round(time.Millisecond), limit)
}

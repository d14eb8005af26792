package builtin_test

import (
	"testing"
	"time"
)

// awaitTimeout bounds every wait of these tests: a wait that times out
// fails the test instead of hanging it.
const awaitTimeout = 10 * time.Second

// await receives from ch, failing the test when nothing arrives within
// awaitTimeout.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(awaitTimeout):
		t.Fatalf("timed out after %s waiting for %s", awaitTimeout, what)
		var zero T
		return zero
	}
}

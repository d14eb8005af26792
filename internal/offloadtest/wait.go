package offloadtest

import (
	"testing"
	"time"
)

// Wait bounds every wait on a signal (and every poll) of the tests: a
// wait that times out fails its test instead of hanging it. It is a
// liveness bound, far above what anything takes on a loaded machine, not
// an assertion on speed.
const Wait = 20 * time.Second

// WaitOrTimeout returns the next value received from ch, failing the test
// after [Wait]; what names the value in the failure ("the task to
// start"). A closed channel returns its zero value at once.
func WaitOrTimeout[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	return WaitOrTimeoutWithin(tb, ch, Wait, what)
}

// WaitOrTimeoutWithin is [WaitOrTimeout] with its own bound, for a wait
// that may take longer than [Wait] (a cluster's failover) or must not
// (a bound the test asserts).
func WaitOrTimeoutWithin[T any](tb testing.TB, ch <-chan T, within time.Duration, what string) T {
	tb.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		tb.Fatalf("timed out after %v waiting for %s", within, what)
		var zero T
		return zero
	}
}

// Cond is what [Eventually] polls: a func() bool, which holds when it
// returns true, or a func() error, which holds when it returns nil (and
// whose last error the failure reports).
type Cond interface {
	func() bool | func() error
}

// Eventually polls cond until it holds, failing the test after [Wait].
// It is for a state that has no signal; where a signal exists (a
// channel, a log line, an advisory), wait on it with [WaitOrTimeout]
// instead. Every caller says beside the call why there is no signal.
func Eventually[C Cond](tb testing.TB, what string, cond C) {
	tb.Helper()
	EventuallyWithin(tb, Wait, what, cond)
}

// EventuallyWithin is [Eventually] with its own bound.
func EventuallyWithin[C Cond](tb testing.TB, within time.Duration, what string, cond C) {
	tb.Helper()
	ok, last := poll(within, cond)
	switch {
	case ok:
	case last != nil:
		tb.Fatalf("timed out after %v waiting for %s: %v", within, what, last)
	default:
		tb.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// poll polls cond, from every millisecond up to every 100 ms, until it
// holds or within has passed; last is a func() error's last error.
func poll[C Cond](within time.Duration, cond C) (ok bool, last error) {
	check := func() (bool, error) {
		switch c := any(cond).(type) {
		case func() bool:
			return c(), nil
		case func() error:
			err := c()
			return err == nil, err
		}
		panic("offloadtest: a Cond is a func() bool or a func() error")
	}
	deadline := time.Now().Add(within)
	for interval := time.Millisecond; ; interval = min(2*interval, 100*time.Millisecond) {
		if ok, last = check(); ok || !time.Now().Before(deadline) {
			return ok, last
		}
		time.Sleep(min(interval, time.Until(deadline)))
	}
}

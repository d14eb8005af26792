package offloadtest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Output is an io.Writer that a writer on another goroutine (a logger, a
// command's output) and the test share: the test reads what was written
// so far ([Output.String]) or waits, on a signal sent by every write,
// until it contains a string ([Output.WaitFor]). The zero value is ready
// to use.
type Output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced by each write; nil until a wait
}

// Write appends p and wakes the waits.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
	return o.buf.Write(p)
}

// String returns what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// WaitFor waits until what was written contains substr, failing the test
// after [Wait] with what was written.
func (o *Output) WaitFor(tb testing.TB, substr string) {
	tb.Helper()
	timer := time.NewTimer(Wait)
	defer timer.Stop()
	for {
		o.mu.Lock()
		if strings.Contains(o.buf.String(), substr) {
			o.mu.Unlock()
			return
		}
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			tb.Fatalf("timed out after %v waiting for %q in:\n%s", Wait, substr, o.String())
		}
	}
}

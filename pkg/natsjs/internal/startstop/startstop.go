// Package startstop is the one lifecycle of natsjs's long-lived components
// (the worker, the dispatcher, the toolset, the client), after River's
// rivershared/startstop: started once, by a Start that does not block;
// stopped by a Stop that is idempotent, waits for the stop to end (also
// when another caller started it) and returns its error; and a Stopped
// channel closed once the component has stopped. A component never
// started is stopped at once, and a stopped one cannot start again.
package startstop

import (
	"errors"
	"sync"
)

// ErrStarted is returned by [Base.StartInit] for a component that was
// started (or stopped) before. Components return their package's own
// sentinel instead (natsjs.ErrStarted).
var ErrStarted = errors.New("startstop: already started")

type state int

const (
	stateNew state = iota
	stateStarted
	stateStopping
	stateStopped
)

// Base holds a component's lifecycle. The zero value is a component not
// started yet. Its methods are safe for concurrent use; they take a lock of
// their own, which a component may call them under its own lock (they call
// nothing back).
type Base struct {
	mu      sync.Mutex
	state   state
	stopped chan struct{}
	closed  bool // stopped is closed
	err     error
}

func (b *Base) stoppedLocked() chan struct{} {
	if b.stopped == nil {
		b.stopped = make(chan struct{})
	}
	return b.stopped
}

// markStoppedLocked moves to stopped and closes the channel, once.
func (b *Base) markStoppedLocked() {
	b.state = stateStopped
	if !b.closed {
		b.closed = true
		close(b.stoppedLocked())
	}
}

// StartInit begins a start: it returns ErrStarted unless the component is
// new. The component then starts, and calls [Base.StartFailed] if it
// cannot.
func (b *Base) StartInit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != stateNew {
		return ErrStarted
	}
	b.state = stateStarted
	return nil
}

// StartFailed ends a start that failed: the component is stopped (with no
// error), nothing of it running. A stop begun meanwhile (the component's
// stop must then cope with a start that did not finish) ends with it.
func (b *Base) StartFailed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.markStoppedLocked()
}

// Running reports whether the component is started and not stopping.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == stateStarted
}

// StopInit begins a stop: it reports whether the caller is the one to
// stop the component (it was running), and must then call [Base.Stopped]
// when done. A component never started is marked stopped at once; one
// stopping or stopped already is left to the stop under way (wait for
// [Base.Done]).
func (b *Base) StopInit() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateStarted:
		b.state = stateStopping
		return true
	case stateNew:
		b.markStoppedLocked()
	}
	return false
}

// Stopped ends a stop begun with [Base.StopInit], recording its error.
func (b *Base) Stopped(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.err = err
	}
	b.markStoppedLocked()
}

// Done returns the channel closed once the component has stopped.
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stoppedLocked()
}

// Stop stops the component with stop, which runs once, in the caller that
// found it running; every caller waits for the stop to end and gets its
// error. A component never started is stopped without calling stop.
func (b *Base) Stop(stop func() error) error {
	if b.StopInit() {
		b.Stopped(stop())
	}
	<-b.Done()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

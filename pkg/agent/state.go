package agent

import (
	"context"
	"slices"
	"sync"

	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// runState is the mutable state of a run: its history, usage, retries,
// queued messages and cancellation. Tools, capabilities and background
// tasks run on other goroutines than the loop, so every access, also by
// the loop, goes through its methods (here, and the retry accounting in
// validate.go, the record of deferred calls in deferred.go), which hold
// its lock: none reads a field from outside them.
type runState struct {
	mu        sync.Mutex
	history   message.History
	usage     message.Usage
	retries   map[string]int
	asap      [][]message.Content
	whenIdle  [][]message.Content
	cancelled bool
	ended     bool // the run has returned: Enqueue refuses, Cancel is moot
	cancelRun context.CancelCauseFunc
}

func (s *runState) usageSnapshot() message.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

func (s *runState) historySnapshot() message.History {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history)
}

// snapshot returns a copy of the history and the usage, taken together.
func (s *runState) snapshot() (message.History, message.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history), s.usage
}

func (s *runState) addToolCalls(n int) {
	s.mu.Lock()
	s.usage.ToolCalls += n
	s.mu.Unlock()
}

// addRequest counts a model request.
func (s *runState) addRequest() {
	s.mu.Lock()
	s.usage.Requests++
	s.mu.Unlock()
}

// addTokens adds a response's token usage and returns the run's usage.
func (s *runState) addTokens(u message.Usage) message.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage.InputTokens += u.InputTokens
	s.usage.OutputTokens += u.OutputTokens
	return s.usage
}

// appendMessage appends m, stamped already, to the history.
func (s *runState) appendMessage(m message.Message) {
	s.mu.Lock()
	s.history = append(s.history, m)
	s.mu.Unlock()
}

// wireHistory returns wireMessages of the history, without copying it
// first: wireMessages copies what it changes, and the messages it leaves
// may share the history's array, since the loop only appends to the
// history once a request was built (a step records its deferred calls in
// the response it handles before the next request).
func (s *runState) wireHistory() []message.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return wireMessages(s.history)
}

// answeredAfter is answeredAfter of the history, without copying it.
func (s *runState) answeredAfter(i int) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return answeredAfter(s.history, i)
}

// lastIndex returns the index of the history's last message.
func (s *runState) lastIndex() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.history) - 1
}

// message returns history[i].
func (s *runState) message(i int) message.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.history[i]
}

// enqueue queues content for the model (tool.RunControl.Enqueue).
func (s *runState) enqueue(p tool.Priority, content []message.Content) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return tool.ErrNoRun
	}
	if p == tool.PriorityWhenIdle {
		s.whenIdle = append(s.whenIdle, slices.Clone(content))
	} else {
		s.asap = append(s.asap, slices.Clone(content))
	}
	return nil
}

// takeAsap takes the asap messages queued for the next request.
func (s *runState) takeAsap() [][]message.Content {
	s.mu.Lock()
	defer s.mu.Unlock()
	queued := s.asap
	s.asap = nil
	return queued
}

// drainAtEnd takes the queued messages that redirect a run about to end:
// leftover asap messages first, then when_idle ones.
func (s *runState) drainAtEnd() [][]message.Content {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append(s.asap, s.whenIdle...)
	s.asap, s.whenIdle = nil, nil
	return out
}

// hasQueued reports whether messages enqueued by tools wait for delivery.
func (s *runState) hasQueued() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.asap) > 0 || len(s.whenIdle) > 0
}

// started records the cancellation of the run's context, for cancel.
func (s *runState) started(cancel context.CancelCauseFunc) {
	s.mu.Lock()
	s.cancelRun = cancel
	s.mu.Unlock()
}

// cancel marks the run cancelled (RunContext.Cancel) and returns the
// cancellation of its context, nil before it started.
func (s *runState) cancel() context.CancelCauseFunc {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelled = true
	return s.cancelRun
}

// end marks the run returned.
func (s *runState) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

// isCancelled reports whether RunContext.Cancel was called.
func (s *runState) isCancelled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// retry returns the retries the named tool used.
func (s *runState) retry(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retries[name]
}

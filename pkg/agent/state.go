package agent

// The run's mutable state (history, usage, retries, queued messages,
// cancellation) lives in the fields of run guarded by run.mu. Tools,
// capabilities and background tasks run on other goroutines than the loop,
// so every access, also by the loop, goes through the methods below (or
// holds run.mu): none reads a field of that group directly.

import (
	"slices"

	"github.com/offload-dev/offload/pkg/message"
)

func (r *run) usageSnapshot() message.Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.usage
}

func (r *run) historySnapshot() message.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.history)
}

func (r *run) addToolCalls(n int) {
	r.mu.Lock()
	r.usage.ToolCalls += n
	r.mu.Unlock()
}

func (r *run) appendMessage(m message.Message) {
	r.mu.Lock()
	r.history = append(r.history, r.stamp(m))
	r.mu.Unlock()
}

// wireHistory returns wireMessages of the history, without copying it
// first: wireMessages copies what it changes, and the messages it leaves
// may share the history's array, since the loop only appends to the
// history once a request was built (a step records its deferred calls in
// the response it handles before the next request).
func (r *run) wireHistory() []message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return wireMessages(r.history)
}

// answeredAfter is answeredAfter of the history, without copying it.
func (r *run) answeredAfter(i int) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return answeredAfter(r.history, i)
}

// lastIndex returns the index of the history's last message.
func (r *run) lastIndex() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.history) - 1
}

// drainAtEnd takes the queued messages that redirect a run about to end:
// leftover asap messages first, then when_idle ones.
func (r *run) drainAtEnd() [][]message.Content {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append(r.asap, r.whenIdle...)
	r.asap, r.whenIdle = nil, nil
	return out
}

// hasQueued reports whether messages enqueued by tools wait for delivery.
func (r *run) hasQueued() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asap) > 0 || len(r.whenIdle) > 0
}

// message returns history[i].
func (r *run) message(i int) message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.history[i]
}

// isCancelled reports whether RunContext.Cancel was called.
func (r *run) isCancelled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelled
}

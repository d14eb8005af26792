package background

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/tool"
)

// ErrAlreadyDecided is returned by [Decisions.Decide] for a task that has
// its decision or answer already: the first one wins.
var ErrAlreadyDecided = errors.New("agent: the call has its decision already")

// Decisions is an in-process [DeferredWaiter]: the program decides the
// non-blocking calls of its runs with Decide (a UI in the same process, a
// test). A decision given before the run waits for it, or after a pause,
// is kept until a run waits for the call. The zero value is not usable:
// call [NewDecisions].
type Decisions struct {
	mu      sync.Mutex
	decided map[string]any           // task ID → decision or answer
	waits   map[string]*decisionWait // task ID → the live wait
	asked   []deferred.PendingTask   // in the order the runs asked
	signal  chan struct{}            // closed and replaced when a call is asked
}

var _ DeferredWaiter = (*Decisions)(nil)

// NewDecisions returns an empty set of decisions.
func NewDecisions() *Decisions {
	return &Decisions{decided: map[string]any{}, waits: map[string]*decisionWait{}, signal: make(chan struct{})}
}

// Wait implements [DeferredWaiter].
func (d *Decisions) Wait(_ context.Context, _ *agent.RunInfo, call deferred.PendingTask) (agent.BackgroundTask, error) {
	w := &decisionWait{d: d, taskID: call.TaskID, done: make(chan struct{})}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.waits[call.TaskID]; ok {
		return nil, fmt.Errorf("agent: task %s is waited for already", call.TaskID)
	}
	d.asked = append(d.asked, call)
	close(d.signal)
	d.signal = make(chan struct{})
	if v, ok := d.decided[call.TaskID]; ok {
		w.val = v
		close(w.done)
		return w, nil
	}
	d.waits[call.TaskID] = w
	return w, nil
}

// Decide gives the call of taskID its decision (an approval value:
// true, false, deferred.ToolApproved, deferred.ToolDenied,
// [ApprovalExpired]) or answer (a call value). The first one wins
// (ErrAlreadyDecided after it).
func (d *Decisions) Decide(taskID string, v any) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.decided[taskID]; ok {
		return fmt.Errorf("%w: task %s", ErrAlreadyDecided, taskID)
	}
	d.decided[taskID] = v
	if w, ok := d.waits[taskID]; ok {
		delete(d.waits, taskID)
		w.val = v
		close(w.done)
	}
	return nil
}

// Asked returns the calls runs waited for, in order, and a channel closed
// when the next one is asked.
func (d *Decisions) Asked() ([]deferred.PendingTask, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deferred.PendingTask(nil), d.asked...), d.signal
}

// decisionWait is one run's wait for a decision of [Decisions].
type decisionWait struct {
	d      *Decisions
	taskID string
	done   chan struct{}
	val    any   // set before done is closed
	err    error // set before done is closed
}

func (w *decisionWait) Done() <-chan struct{} { return w.done }

func (w *decisionWait) Outcome() (any, error) {
	<-w.done
	return w.val, w.err
}

// Cancel stops the wait: its outcome is a cancellation unless the
// decision came first.
func (w *decisionWait) Cancel(reason string) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if w.d.waits[w.taskID] != w {
		return // decided, or stopped already
	}
	delete(w.d.waits, w.taskID)
	w.err = &tool.TaskCancelled{Reason: reason}
	close(w.done)
}

// Detach stops the wait; the decision, when it comes, is kept for a later
// run.
func (w *decisionWait) Detach() bool {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if w.d.waits[w.taskID] == w {
		delete(w.d.waits, w.taskID)
	}
	return true
}

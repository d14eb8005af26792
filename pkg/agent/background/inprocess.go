package background

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/tool"
)

// InProcessExecutor runs background calls in goroutines of this process:
// the default [Executor] of [Tools]. Its tasks cannot outlive the
// process (Detach reports false). A panicking tool becomes a *agent.Panic
// outcome. The zero value is ready to use.
type InProcessExecutor struct{}

var _ Executor = InProcessExecutor{}

// Start implements [Executor]: it runs call.Run in a new goroutine with a
// context that keeps ctx's values but not its cancellation; Cancel cancels
// it. A task cancelled before its goroutine started never runs the tool.
func (InProcessExecutor) Start(ctx context.Context, call *Call) (agent.BackgroundTask, error) {
	if call == nil || call.Run == nil || call.Call == nil {
		return nil, errors.New("agent: in-process executor: a call without Run")
	}
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	t := &inProcessTask{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(t.done)
		defer cancel(nil)
		if err := context.Cause(tctx); err != nil {
			t.err = err
			return
		}
		val, err := protect(func() (any, error) { return call.Run(tctx, call.Call) })
		if cause := context.Cause(tctx); cause != nil && err != nil {
			// Cancelled while running: the cancellation is the outcome,
			// whatever error the tool made of it.
			err = fmt.Errorf("%w (tool returned: %v)", cause, err) //nolint:errorlint // the tool's error is text only: a ModelRetry or CallDeferred in it must not change the outcome
		}
		t.val, t.err = val, err
	}()
	return t, nil
}

type inProcessTask struct {
	done   chan struct{}
	cancel context.CancelCauseFunc
	once   sync.Once
	val    any
	err    error
}

func (t *inProcessTask) Done() <-chan struct{} { return t.done }

func (t *inProcessTask) Outcome() (any, error) {
	<-t.done
	return t.val, t.err
}

func (t *inProcessTask) Cancel(reason string) {
	t.once.Do(func() { t.cancel(&tool.TaskCancelled{Reason: reason}) })
}

func (t *inProcessTask) Detach() bool { return false }

package background

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// What the model sees of background outcomes: those arrived, delivered
// between model requests or awaited when nothing else is left, each as a
// follow-up message in the texts of SPEC §4 and §12.

// deliver turns the outcomes that arrived into follow-up parts, in
// completion order. A fatal outcome (retries exhausted, the tool's own
// cancellation) ends the run.
func (br *bgRun) deliver(ctx context.Context) ([]message.Part, error) {
	br.takeUnwatched()
	br.mu.Lock()
	all := br.arrived
	br.arrived = nil
	br.mu.Unlock()
	// A decision that approves a non-blocking call starts it: the task
	// stays live, and its result is delivered later.
	arrived := all[:0:0]
	for i, t := range all {
		if t.wait == "" && t.err != nil {
			// An unknown effect goes to a person (unknown.go): the task
			// stays live, waiting for the decision.
			asked, err := br.askPerson(ctx, t)
			if err != nil {
				br.mu.Lock()
				br.arrived = append(append(arrived, all[i:]...), br.arrived...)
				br.mu.Unlock()
				return nil, err
			}
			if asked {
				continue
			}
		}
		if t.wait != "" && t.err == nil {
			running, err := br.decided(ctx, t)
			if err != nil {
				// The run ends with err (an expiry that fails it, SPEC
				// §12): what arrived stays arrived for end, which has no
				// task of theirs to cancel.
				br.mu.Lock()
				br.arrived = append(append(arrived, all[i:]...), br.arrived...)
				br.mu.Unlock()
				return nil, err
			}
			if running {
				continue
			}
		}
		arrived = append(arrived, t)
	}
	br.mu.Lock()
	for _, t := range arrived {
		for i, l := range br.live {
			if l == t {
				br.live = append(br.live[:i], br.live[i+1:]...)
				break
			}
		}
	}
	br.mu.Unlock()
	return br.followUps(arrived)
}

// followUps returns the follow-up parts of the tasks, in order; it stops at
// the first fatal outcome, returning the parts before it.
func (br *bgRun) followUps(tasks []*bgTask) ([]message.Part, error) {
	var parts []message.Part
	for _, t := range tasks {
		var p message.Part
		var err error
		if t.wait != "" {
			p, err = br.waitFollowUp(t)
		} else {
			p, err = br.followUp(t)
		}
		br.resultSpan(t, err)
		if err != nil {
			return parts, err
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// takeUnwatched takes the outcome of the task without a watcher, if it is
// done.
func (br *bgRun) takeUnwatched() {
	br.mu.Lock()
	t := br.unwatched
	br.mu.Unlock()
	if t == nil {
		return
	}
	select {
	case <-t.task.Done():
		br.finish(t, t.task)
	default:
	}
}

// awaitOutcome is the idle wait: when the model ended its turn, it
// delivers what arrived or, while tasks are live and no message is queued
// (those redirect the run at once), waits for the next outcome. When only
// decisions or answers are awaited, a run that may pause does; one
// suspended while it waits stops there.
func (br *bgRun) awaitOutcome(ctx context.Context) (agent.Idle, error) {
	for {
		parts, err := br.deliver(ctx)
		if err != nil || len(parts) > 0 || br.liveCount() == 0 || br.info.HasQueued() {
			return agent.Idle{Parts: parts}, err
		}
		if br.info.AllowsDeferred() && br.onlyWaiting() {
			// Only decisions or answers are awaited: a run that may pause
			// does, and a later run continues when one arrives.
			return agent.Idle{Pause: true}, nil
		}
		// With one task running, the wait takes its outcome itself rather
		// than through its watcher.
		var sole *bgTask
		var soleDone <-chan struct{}
		if sole = br.soleRunning(); sole != nil {
			soleDone = sole.task.Done()
		}
		select {
		case <-br.arrival:
		case <-soleDone:
			br.finish(sole, sole.task)
		case <-ctx.Done():
			return agent.Idle{}, ctx.Err()
		case <-br.info.Suspend():
			return agent.Idle{Suspend: true}, nil
		}
	}
}

// soleRunning returns the one live task whose outcome has not been taken,
// when there is exactly one (an adopted task that had finished has none).
func (br *bgRun) soleRunning() *bgTask {
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.running != 1 {
		return nil
	}
	for _, t := range br.live {
		if !t.finished && t.task != nil {
			return t
		}
	}
	return nil
}

// followUp is the user message that delivers t's outcome (SPEC §4).
func (br *bgRun) followUp(t *bgTask) (message.Part, error) {
	name, id := t.call.Call.ToolName, t.id
	// Each task held one tool call slot while it ran; a failed one gives
	// it back, a completed one counts once.
	if t.err != nil {
		br.info.ReserveToolCalls(-1)
	}
	err := t.err
	if err == nil {
		part, content, merr := agent.ReturnPart(name, t.call.Call.ToolCallID, t.val)
		if merr != nil {
			return br.unexpected(t, merr)
		}
		return completed(name, id, part, content), nil
	}
	failed := func(detail string) (message.Part, error) {
		return message.UserText(fmt.Sprintf("Background tool '%s' (task %s) failed: %s", name, id, detail)), nil
	}
	// Declared past the common case: errors.As moves them to the heap.
	var retry *tool.ModelRetry
	var tf *tool.ToolFailed
	var ar *tool.ApprovalRequired
	var cd *tool.CallDeferred
	var inval *tool.ValidationError
	var tc *tool.TaskCancelled
	var fatal *tool.FatalError
	switch {
	case errors.As(err, &retry):
		if e := br.info.UseRetry(name, t.retries()); e != nil {
			return nil, e
		}
		if retry.Message == "" {
			return failed("ModelRetry")
		}
		return failed(retry.Message)
	case errors.As(err, &inval):
		if e := br.info.UseRetry(name, t.retries()); e != nil {
			return nil, e
		}
		return failed("Invalid arguments: " + inval.Error())
	case errors.As(err, &tf):
		if tf.Message == "" {
			return failed("ToolFailed")
		}
		return failed(tf.Message)
	case errors.As(err, &ar):
		if _, unknown := unknownEffectOf(err); unknown {
			return unknownText(t, ""), nil // no one to ask in this run
		}
		return failed("ApprovalRequired was raised; background tools cannot defer a running task.")
	case errors.As(err, &cd):
		return failed("CallDeferred was raised; background tools cannot defer a running task.")
	case errors.Is(err, agent.ErrRunCancelled):
		return nil, agent.ErrRunCancelled
	case errors.As(err, &tc):
		// Cancelled, but not by this run (a worker shutting down for
		// good, an operator): the run cannot go on without it.
		return nil, fmt.Errorf("background tool %s (task %s): %w", name, id, err)
	case errors.Is(err, context.Canceled), errors.As(err, &fatal):
		// The tool's own cancellation, or a fatal failure, ends the run.
		// (A deadline of the tool's own that passed is a failure like any
		// other: the task's context has no deadline from the run.)
		return nil, fmt.Errorf("background tool %s (task %s): %w", name, id, err)
	default:
		return br.unexpected(t, err)
	}
}

// unexpected handles an unexpected failure: logged with its message; the
// model sees only its type. With Config.FailOnToolError it ends the run.
func (br *bgRun) unexpected(t *bgTask, err error) (message.Part, error) {
	typ := tool.ErrorType(err)
	br.logger().Error("background tool failed", append([]any{slog.String("tool", t.call.Call.ToolName), slog.String("task_id", t.id), slog.String("error_type", typ), slog.Any("error", err)}, panicStack(err)...)...)
	if br.info.FailOnToolError() {
		return nil, fmt.Errorf("tool %s: %w", t.call.Call.ToolName, err)
	}
	return message.UserText(fmt.Sprintf("Background tool '%s' (task %s) failed: %s", t.call.Call.ToolName, t.id, typ)), nil
}

// completed is the follow-up of a completed task: its result as text, and
// the tool.Return's extra content (joined to the text when it is all text,
// else as further items). Application metadata is not carried.
func completed(name, id string, part message.ToolReturn, content []message.Content) message.Part {
	text := "Background tool '" + name + "' (task " + id + ") completed.\nResult: " + part.ModelText()
	allText := true
	for _, c := range content {
		if c.Type != "text" {
			allText = false
		}
	}
	if allText {
		for _, c := range content {
			text += "\n" + c.Text
		}
		return message.UserText(text)
	}
	items := append([]message.Content{message.TextContent(text)}, content...)
	return message.UserPrompt{Content: items}
}

// panicStack returns the log attribute of a panic's stack, if err is one.
func panicStack(err error) []any {
	var p *agent.Panic
	if errors.As(err, &p) {
		return []any{slog.String("stack", string(p.Stack))}
	}
	return nil
}

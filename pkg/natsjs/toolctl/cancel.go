package toolctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/toolstate"
)

// matchOf returns what selects the queue entries f selects at now.
func matchOf(f Filter, now time.Time) func(*limits.Entry) bool {
	return func(e *limits.Entry) bool {
		return (f.Agent == "" || e.Agent == f.Agent) && (f.Tenant == "" || e.Tenant == f.Tenant) &&
			(f.OlderThan <= 0 || now.Sub(e.Since) > f.OlderThan)
	}
}

// Cancel cancels the calls held in f.Tool's queue that f selects: each is
// sent its cancel (as the agent sends one), then started at once on a
// worker replica, which answers it cancelled without running it, whatever
// holds the tool (a pause, a limit). A call that a worker claimed
// meanwhile is reached by its cancel as it runs. It returns the calls
// cancelled.
func (c *Control) Cancel(ctx context.Context, f Filter, by string) ([]Cancelled, error) {
	if err := c.audit(ctx, Record{Action: "cancel", Tool: f.Tool, By: by, Detail: f.String()}); err != nil {
		return nil, err
	}
	st, _, err := c.state.Load(ctx, f.Tool)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	picked := st.Cancel(now, matchOf(f, now))
	// The cancels are stored before the calls may start: the worker that
	// claims one finds its cancel.
	ids := map[string]bool{}
	for _, e := range picked {
		pctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
		_, err := c.js.Publish(pctx, c.subj.Cancel(e.Conversation, e.Task, f.Tool), encodeCancel(e.Task, "cancelled by "+by))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("toolctl: cancel task %s: %w", e.Task, err)
		}
		ids[e.ID] = true
	}
	var out []Cancelled
	_, err = c.state.Update(ctx, f.Tool, func(st *limits.State) error {
		out = out[:0]
		for _, e := range st.Cancel(time.Now(), func(e *limits.Entry) bool { return ids[e.ID] }) {
			out = append(out, Cancelled{Conversation: e.Conversation, Task: e.Task, Attempt: e.Attempt})
		}
		if len(out) == 0 {
			return toolstate.ErrNoChange
		}
		return nil
	})
	if err != nil && !errors.Is(err, toolstate.ErrNoChange) {
		return nil, err
	}
	return out, nil
}

package agent

import (
	"context"
	"encoding/json"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// hold offers the deferred calls of a step still unresolved to the
// DeferredHolders: a held call gets its result (an acknowledgement) now.
// It returns what is left of reqs (nil when nothing is).
func (r *run) hold(ctx context.Context, slots []*slot, respIdx int, reqs *deferred.Requests) (*deferred.Requests, error) {
	var holders []DeferredHolder
	for _, c := range r.caps {
		if h, ok := c.(DeferredHolder); ok {
			holders = append(holders, h)
		}
	}
	if len(holders) == 0 {
		return reqs, nil
	}
	record := r.state.deferredRecord(respIdx)
	var calls []*DeferredCall
	var open []*slot
	for _, s := range slots {
		if s.deferKind == "" || s.part != nil {
			continue
		}
		id := s.call.ToolCallID
		args := s.args
		if !json.Valid(args) {
			args = json.RawMessage(s.call.Args)
		}
		calls = append(calls, &DeferredCall{Tool: s.t, Call: s.call, Task: deferred.PendingTask{TaskID: reqs.TaskIDs[id], Kind: s.deferKind,
			Tool: s.call.ToolName, ToolCallID: id, Args: args, Metadata: tool.DeepCopy(reqs.Metadata[id]), Attempt: record[id].Attempt}})
		open = append(open, s)
	}
	if len(calls) == 0 {
		return reqs, nil
	}
	taken := map[string]bool{}
	for _, h := range holders {
		err := h.HoldDeferred(ctx, r.info, calls)
		for i, c := range calls {
			if s := open[i]; c.Result != nil && s.part == nil {
				s.part = c.Result
				r.emitResult(s)
				taken[s.call.ToolCallID] = true
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if len(taken) == 0 {
		return reqs, nil
	}
	return withoutCalls(reqs, taken), nil
}

// withoutCalls returns reqs without the calls of taken, or nil when none
// is left.
func withoutCalls(reqs *deferred.Requests, taken map[string]bool) *deferred.Requests {
	out := &deferred.Requests{Metadata: map[string]map[string]any{}, TaskIDs: map[string]string{}}
	keep := func(c message.ToolCall) bool {
		if taken[c.ToolCallID] {
			return false
		}
		if m, ok := reqs.Metadata[c.ToolCallID]; ok {
			out.Metadata[c.ToolCallID] = m
		}
		out.TaskIDs[c.ToolCallID] = reqs.TaskIDs[c.ToolCallID]
		return true
	}
	for _, c := range reqs.Approvals {
		if keep(c) {
			out.Approvals = append(out.Approvals, c)
		}
	}
	for _, c := range reqs.Calls {
		if keep(c) {
			out.Calls = append(out.Calls, c)
		}
	}
	if len(out.Approvals)+len(out.Calls) == 0 {
		return nil
	}
	return out
}

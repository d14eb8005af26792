package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// resume answers the deferred calls the history ended with.
func (r *run) resume(ctx context.Context, res *deferred.Results) ([]message.Part, *deferred.Requests, error) {
	h := r.state.historySnapshot()
	if len(h) == 0 {
		return nil, nil, userErrorf(nil, "Tool call results were provided, but the message history is empty.")
	}
	li := lastResponse(h)
	if li < 0 {
		return nil, nil, userErrorf(nil, "Tool call results were provided, but the message history does not contain a `ModelResponse`.")
	}
	if len(h[li].ToolCalls()) == 0 {
		return nil, nil, userErrorf(nil, "Tool call results were provided, but the message history does not contain any unprocessed tool calls.")
	}
	return r.step(ctx, li, res)
}

// resumePass validates supplied results against the pending calls of the
// response (every resume error of the reference, plus the fail-closed
// checks) and applies them, in emission order.
func (r *run) resumePass(ctx context.Context, st *stepState, slots []*slot, names []string, respIdx int, res *deferred.Results) (*deferred.Requests, error) {
	// Calls answered in a request after the response were already executed.
	skip := map[string]bool{}
	for _, s := range slots {
		skip[s.call.ToolCallID] = s.skip
	}
	resultIDs := map[string]bool{}
	for id := range res.Approvals {
		resultIDs[id] = true
	}
	for id := range res.Calls {
		resultIDs[id] = true
	}
	for _, id := range keys(resultIDs) {
		if skip[id] {
			return nil, userErrorf(nil, "Tool call '%s' was already executed and its result cannot be overridden.", id)
		}
	}
	var eligible []*slot
	seen, dups := map[string]bool{}, map[string]bool{}
	responseIDs := map[string]bool{}
	for _, s := range slots {
		id := s.call.ToolCallID
		responseIDs[id] = true
		if skip[id] {
			continue
		}
		if seen[id] {
			dups[id] = true
		}
		seen[id] = true
		eligible = append(eligible, s)
	}
	if len(dups) > 0 {
		return nil, userErrorf(nil, "Tool call results cannot be matched unambiguously because the message history contains duplicate tool_call_id values: %s", idList(keys(dups)))
	}
	complete := true
	for _, s := range eligible {
		if !resultIDs[s.call.ToolCallID] {
			complete = false
		}
	}
	for id := range resultIDs {
		if !responseIDs[id] {
			complete = false
		}
	}
	if !complete {
		var expected []string
		for _, s := range eligible {
			expected = append(expected, s.call.ToolCallID)
		}
		sort.Strings(expected)
		return nil, userErrorf(nil, "Tool call results need to be provided for all deferred tool calls. Expected: %s, got: %s", idSet(expected), idSet(keys(resultIDs)))
	}
	record := r.state.deferredRecord(respIdx)
	for _, s := range eligible {
		id := s.call.ToolCallID
		approval, isApproval := res.Approvals[id]
		_, isCall := res.Calls[id]
		if isApproval && isCall {
			return nil, userErrorf(nil, "Tool call '%s' was given both an approval and a result; give exactly one.", id)
		}
		kind := record[id].Kind
		s.deferredTaskID, s.attempt, s.effect, s.answerNext = record[id].TaskID, record[id].Attempt, record[id].Effect, record[id].AnswerNext
		s.answerHolder = record[id].AnswerHolder
		if kind == "" && s.t != nil {
			switch {
			case s.t.Kind == tool.KindExternal:
				kind = deferred.KindExternal
			case s.t.RequiresApproval:
				kind = deferred.KindApproval
			}
		}
		if isApproval {
			n, err := deferred.NormalizeApproval(approval)
			if err != nil {
				return nil, approvalError(fmt.Sprintf("Tool call '%s': %v", id, err), err)
			}
			if kind == deferred.KindExternal {
				if _, ok := n.(deferred.ToolApproved); ok {
					return nil, &UserError{Message: tool.ErrExternal.Error(), Err: tool.ErrExternal}
				}
				return nil, userErrorf(nil, "Tool call '%s' is an external call: give its result under `calls`, not an approval.", id)
			}
		}
		if isCall && kind == deferred.KindApproval {
			return nil, userErrorf(nil, "Tool call '%s' awaits approval: give a decision under `approvals`, not a result under `calls`.", id)
		}
	}
	if err := r.precheck(len(eligible)); err != nil {
		return nil, err
	}
	if err := r.answer(ctx, st, eligible, names, res, true); err != nil {
		return nil, err
	}
	return r.collectDeferred(slots, respIdx)
}

func idSet(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = "'" + id + "'"
	}
	return "{" + strings.Join(q, ", ") + "}"
}

package agent

import (
	"slices"

	"github.com/offload-dev/offload/pkg/message"
)

// lastResponse returns the index of the history's last response, or -1.
func lastResponse(h message.History) int {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Role == message.RoleResponse {
			return i
		}
	}
	return -1
}

// answeredAfter returns the IDs of the calls answered (a tool return or a
// retry prompt) in the requests that follow history[i], up to the next
// response. The map is nil (read-only) when there are none.
func answeredAfter(h message.History, i int) map[string]bool {
	var out map[string]bool
	add := func(id string) {
		if out == nil {
			out = map[string]bool{}
		}
		out[id] = true
	}
	for _, m := range h[i+1:] {
		if m.Role == message.RoleResponse {
			break
		}
		for _, p := range m.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				add(x.ToolCallID)
			case message.RetryPrompt:
				if x.ToolCallID != "" {
					add(x.ToolCallID)
				}
			}
		}
	}
	return out
}

// unanswered returns the calls of the response history[i] that no request
// after it answers.
func unanswered(h message.History, i int) []message.ToolCall {
	done := answeredAfter(h, i)
	var out []message.ToolCall
	for _, c := range h[i].ToolCalls() {
		if !done[c.ToolCallID] {
			out = append(out, c)
		}
	}
	return out
}

// repairDangling answers every call left without a result in a response
// other than the last one with a synthetic cancelled return (reference
// §4.4: providers reject a call without its result). The returns go at the
// start of the request that follows the response, or in a new request when
// another response follows directly. h's messages are not modified.
func repairDangling(h message.History) message.History {
	last := lastResponse(h)
	var out message.History
	for i := 0; i < len(h); i++ {
		m := h[i]
		out = append(out, m)
		if m.Role != message.RoleResponse || i == last {
			continue
		}
		missing := unanswered(h, i)
		if len(missing) == 0 {
			continue
		}
		var parts []message.Part
		for _, c := range missing {
			parts = append(parts, cancelledReturn(c))
		}
		if i+1 < len(h) && h[i+1].Role == message.RoleRequest {
			next := h[i+1]
			next.Parts = append(parts, slices.Clone(next.Parts)...)
			h = slices.Clone(h)
			h[i+1] = next
			continue
		}
		req := message.NewRequest(parts...)
		req.RunID, req.ConversationID, req.Timestamp = m.RunID, m.ConversationID, m.Timestamp
		out = append(out, req)
	}
	return out
}

// cancelledReturn is the synthetic result of a call that never ran to the
// end: the reference's "interrupted" return.
func cancelledReturn(c message.ToolCall) message.ToolReturn {
	return message.ToolReturn{ToolName: c.ToolName, ToolCallID: c.ToolCallID, Content: jsonString(message.CancelledText), Outcome: message.OutcomeCancelled}
}

package agui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/types"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/pending"
)

// The bounds of an input's frontend tools (SPEC §18).
const (
	// MaxFrontendTools is how many tools an input may offer.
	MaxFrontendTools = 32
	// MaxFrontendToolBytes bounds one tool's definition, JSON-encoded.
	MaxFrontendToolBytes = 16 << 10
)

// badTool is an input refused for one of its tools.
func badTool(format string, args ...any) *InputError {
	return &InputError{Status: http.StatusBadRequest, Code: "bad_tool", Message: fmt.Sprintf(format, args...)}
}

// frontendTools checks the input's tools (SPEC §18: the frontend's, a
// call of one an external call it answers): at most MaxFrontendTools,
// each at most MaxFrontendToolBytes, named as a tool is
// (tool.NamePattern), once, with a JSON Schema of its parameters that
// compiles, and none named as one of agent's own tools.
func (f *Face) frontendTools(ctx context.Context, agent string, in []types.Tool) ([]conversation.FrontendTool, error) {
	if len(in) > MaxFrontendTools {
		return nil, badTool("the input offers %d tools: at most %d", len(in), MaxFrontendTools)
	}
	out := make([]conversation.FrontendTool, 0, len(in))
	seen := map[string]bool{}
	for i, t := range in {
		params, err := json.Marshal(t.Parameters)
		if err != nil {
			return nil, badTool("tool %d (%q): parameters: %v", i, t.Name, err)
		}
		ft := conversation.FrontendTool{Name: t.Name, Description: t.Description, Parameters: params}
		if n, _ := json.Marshal(ft); len(n) > MaxFrontendToolBytes {
			return nil, badTool("tool %q: its definition is %d bytes: at most %d", t.Name, len(n), MaxFrontendToolBytes)
		}
		if _, err := ft.Tool(); err != nil {
			return nil, badTool("tool %d: %v", i, err)
		}
		if seen[t.Name] {
			return nil, badTool("tool %q is offered twice", t.Name)
		}
		seen[t.Name] = true
		if f.cfg.Tools != nil {
			if own, err := f.cfg.Tools(ctx, agent, t.Name); err == nil && own != nil {
				return nil, badTool("tool %q is one of agent %s's own tools: a frontend tool may not shadow it", t.Name, agent)
			}
		}
		out = append(out, ft)
	}
	return out, nil
}

// toolMessages returns the role "tool" messages msgs end with: the
// frontend's results of its tools' calls. None when the last message is
// not one.
func toolMessages(msgs []types.Message) []types.Message {
	i := len(msgs)
	for i > 0 && msgs[i-1].Role == types.RoleTool {
		i--
	}
	return msgs[i:]
}

// toolAnswers maps the frontend's tool messages to resume entries of
// the external calls they answer (the calls of st's frontend tools, by
// toolCallId), for the one decision path of a resume. A message of a
// call answered already is left out (nothing is applied twice); one of
// a call this thread never made, or of a call that is not a frontend
// tool's, is refused.
// Whatever refuses the input has been sent as a RUN_ERROR when ended is
// set (err is then the stream's).
func (s *stream) toolAnswers(st *conversation.State, msgs []types.Message) (entries []types.ResumeEntry, ended bool, err error) {
	if st == nil {
		return nil, true, s.runError("not_found", fmt.Sprintf("thread %s has no conversation: no tool call to answer", s.thread))
	}
	calls, err := s.f.cfg.Desk.Calls(s.ctx, pending.Filter{Conversation: s.conv})
	if err != nil {
		return nil, true, s.fail(err)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.ToolCallID
		if id == "" {
			return nil, true, s.runError("bad_request", "a tool message has no toolCallId")
		}
		if seen[id] {
			return nil, true, s.runError("bad_request", fmt.Sprintf("tool call %s is answered twice in the input", id))
		}
		seen[id] = true
		task, ok := waitingCall(st, calls, id)
		switch {
		case !ok && answered(st.History, id):
			continue // answered already: nothing applied again
		case !ok:
			return nil, true, s.runError("unknown_tool_call", fmt.Sprintf("tool call %s is not a call of this thread waiting for the frontend", id))
		case task.Kind != deferred.KindExternal || !st.FrontendTool(task.Tool):
			return nil, true, s.runError("bad_request", fmt.Sprintf("tool call %s (%s) is not a frontend tool's: answer its interrupt %s with a resume", id, task.Tool, task.TaskID))
		}
		payload, err := toolPayload(m)
		if err != nil {
			return nil, true, s.runError("bad_request", fmt.Sprintf("tool call %s: %v", id, err))
		}
		entries = append(entries, types.ResumeEntry{InterruptID: task.TaskID, Status: types.ResumeStatusResolved, Payload: payload})
	}
	return entries, false, nil
}

// waitingCall returns the pending task of tool call id: from the
// conversation's pending record, else the desk's (a pause's record is
// saved with its state, the desk's a moment later).
func waitingCall(st *conversation.State, calls []pending.Call, id string) (deferred.PendingTask, bool) {
	if st.Pending != nil {
		for _, t := range st.Pending.Tasks {
			if t.ToolCallID == id {
				return t, true
			}
		}
	}
	for _, c := range calls {
		if c.ToolCallID == id {
			return c.PendingTask, true
		}
	}
	return deferred.PendingTask{}, false
}

// answered reports whether h holds a result of tool call id.
func answered(h message.History, id string) bool {
	for _, m := range h {
		for _, p := range m.Parts {
			if tr, ok := p.(message.ToolReturn); ok && tr.ToolCallID == id {
				return true
			}
		}
	}
	return false
}

// toolPayload is a tool message as an external call's answer (SPEC
// §5.2): its content, an error answer when the message carries an error.
func toolPayload(m types.Message) (any, error) {
	content := m.Content
	if parts, ok := content.([]any); ok {
		text, err := userText(parts)
		if err != nil {
			return nil, err
		}
		content = text
	}
	if strings.TrimSpace(m.Error) != "" {
		return map[string]any{"content": content, "status": "error", "message": m.Error}, nil
	}
	return map[string]any{"content": content}, nil
}

package agui

import (
	"strconv"
	"strings"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/types"

	"github.com/offload-dev/offload/pkg/message"
)

// idPrefix begins the IDs of the messages of a MESSAGES_SNAPSHOT: a
// message an input sends back with such an ID is the conversation's
// already.
const idPrefix = "offload:"

// isOurs reports whether id is the ID of a message a snapshot sent.
func isOurs(id string) bool { return strings.HasPrefix(id, idPrefix) }

// messagesOf is history h of conversation conv as AG-UI messages: user
// prompts, the model's responses (text and tool calls) and the tools'
// returns, each with an ID stable across snapshots (its place in the
// history).
func messagesOf(conv string, h message.History) []types.Message {
	out := []types.Message{}
	for i, m := range h {
		id := idPrefix + conv + ":" + strconv.Itoa(i)
		if m.Role == message.RoleResponse {
			am := types.Message{ID: id, Role: types.RoleAssistant}
			if text := m.Text(); text != "" {
				am.Content = text
			}
			for _, c := range m.ToolCalls() {
				am.ToolCalls = append(am.ToolCalls, types.ToolCall{ID: c.ToolCallID, Type: types.ToolCallTypeFunction,
					Function: types.FunctionCall{Name: c.ToolName, Arguments: string(c.ArgsJSON())}})
			}
			out = append(out, am)
			continue
		}
		for j, p := range m.Parts {
			pid := id + ":" + strconv.Itoa(j)
			switch x := p.(type) {
			case message.UserPrompt:
				var b strings.Builder
				for _, c := range x.Content {
					b.WriteString(c.Text)
				}
				out = append(out, types.Message{ID: pid, Role: types.RoleUser, Content: b.String()})
			case message.ToolReturn:
				tm := types.Message{ID: pid, Role: types.RoleTool, ToolCallID: x.ToolCallID, Content: x.ModelText()}
				if x.Outcome == message.OutcomeFailed {
					tm.Error = message.ContentText(x.Content)
				}
				out = append(out, tm)
			}
		}
	}
	return out
}

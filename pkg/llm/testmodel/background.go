package testmodel

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// ackRE is the acknowledgement a background call returns at once (SPEC
// §4); its outcome comes later in a follow-up ([llm.ParseFollowUp]).
var ackRE = regexp.MustCompile(`^Tool '([^']+)' is running in the background as task (\S+)\. Its result will arrive later as a follow-up message`)

// followUp is the outcome of a background task, as a follow-up brings it.
type followUp struct {
	tool, task string
	value      json.RawMessage // as the summary reports it
}

// parseFollowUp returns the outcome a user prompt brings, when it is a
// background follow-up.
func parseFollowUp(u message.UserPrompt) (followUp, bool) {
	f, ok := llm.ParseFollowUp(u)
	if !ok {
		return followUp{}, false
	}
	out := followUp{tool: f.Tool, task: f.Task}
	if f.Failed {
		detail, _ := json.Marshal(f.Text)
		out.value = returnValue(message.ToolReturn{Content: detail, Outcome: message.OutcomeFailed})
	} else {
		out.value = textValue(f.Text)
	}
	return out, true
}

// isFollowUp reports whether p is a background follow-up.
func isFollowUp(p message.Part) bool {
	u, ok := p.(message.UserPrompt)
	if !ok {
		return false
	}
	_, ok = parseFollowUp(u)
	return ok
}

// ackTask returns the task a tool return acknowledges, when it is the
// acknowledgement of a background call of its tool.
func ackTask(r message.ToolReturn) (string, bool) {
	if r.Outcome == message.OutcomeFailed {
		return "", false
	}
	m := ackRE.FindStringSubmatch(message.ContentText(r.Content))
	if m == nil || m[1] != r.ToolName {
		return "", false
	}
	return m[2], true
}

// textValue is a result text as a JSON value: the text itself when it is
// JSON, else a JSON string.
func textValue(s string) json.RawMessage {
	return returnValue(message.ToolReturn{Content: json.RawMessage(s)})
}

// waiting returns the acknowledged tasks of the run whose follow-ups have
// not arrived yet, as "<tool> (task <id>)", in order of acknowledgement.
func waiting(run []message.Message) []string {
	done := map[string]bool{}
	for _, msg := range run {
		for _, p := range msg.Parts {
			if u, ok := p.(message.UserPrompt); ok {
				if f, ok := parseFollowUp(u); ok {
					done[f.task] = true
				}
			}
		}
	}
	var out []string
	for _, msg := range run {
		for _, p := range msg.Parts {
			if r, ok := p.(message.ToolReturn); ok {
				if task, ok := ackTask(r); ok && !done[task] {
					out = append(out, fmt.Sprintf("%s (task %s)", r.ToolName, task))
				}
			}
		}
	}
	return out
}

// waitingText is the text of a turn that ends while background tasks run.
func waitingText(tasks []string) string {
	s := "s"
	if len(tasks) == 1 {
		s = ""
	}
	return fmt.Sprintf("Waiting for %d background task%s: %s.", len(tasks), s, strings.Join(tasks, ", "))
}

package llm

import (
	"regexp"

	"github.com/offload-dev/offload/pkg/message"
)

// FollowUp is the outcome of a background task as the follow-up user
// message of SPEC §4 brings it: "Background tool '<tool>' (task <task>)
// completed.\nResult: <text>" or "Background tool '<tool>' (task <task>)
// failed: <detail>".
type FollowUp struct {
	// Tool and Task name the tool and its task.
	Tool, Task string
	// Failed is true for a failure.
	Failed bool
	// Text is the result text of a completed task, or the detail of a
	// failure.
	Text string
}

var followUpRE = regexp.MustCompile(`(?s)^Background tool '([^']+)' \(task ([^)\s]+)\) (?:completed\.\nResult: (.*)|failed: (.*))$`)

// ParseFollowUp returns the outcome u brings when u is a background
// follow-up: its first content item is a text of that form. Test and
// scripted models tell follow-ups from prompts with it.
func ParseFollowUp(u message.UserPrompt) (FollowUp, bool) {
	if len(u.Content) == 0 || u.Content[0].Type != "text" {
		return FollowUp{}, false
	}
	text := u.Content[0].Text
	m := followUpRE.FindStringSubmatchIndex(text)
	if m == nil {
		return FollowUp{}, false
	}
	f := FollowUp{Tool: text[m[2]:m[3]], Task: text[m[4]:m[5]]}
	if m[6] >= 0 {
		f.Text = text[m[6]:m[7]]
	} else {
		f.Failed, f.Text = true, text[m[8]:m[9]]
	}
	return f, true
}

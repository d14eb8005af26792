package script

import (
	"errors"
	"fmt"
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// When chooses a turn by what a request brings: the parts of the messages
// after the model's last response in the request's history (all of them
// when it has none), that is the prompt, the tool results, the retry
// prompts and the background follow-ups the agent sent since the model
// last answered. Every condition set must hold, each by a part of its
// kind; a When without any condition is invalid.
type When struct {
	// Prompt holds when a user prompt (not a background follow-up) is
	// among the parts.
	Prompt *PromptMatch `json:"prompt,omitempty" yaml:"prompt,omitempty"`
	// Result holds when a tool result is among the parts.
	Result *PartMatch `json:"result,omitempty" yaml:"result,omitempty"`
	// Retry holds when a retry prompt (invalid arguments, a tool's
	// ModelRetry) is among the parts.
	Retry *PartMatch `json:"retry,omitempty" yaml:"retry,omitempty"`
	// FollowUp holds when a background follow-up ("Background tool
	// '<name>' (task <id>) completed.…" or "… failed: …") is among the
	// parts.
	FollowUp *PartMatch `json:"follow_up,omitempty" yaml:"follow_up,omitempty"`
}

// PromptMatch matches a user prompt.
type PromptMatch struct {
	// Contains, when not empty, is text the prompt must contain (its text
	// items joined by newlines). Empty: any prompt.
	Contains string `json:"contains,omitempty" yaml:"contains,omitempty"`
}

// PartMatch matches a tool result, a retry prompt or a follow-up.
type PartMatch struct {
	// Tool, when not empty, is the tool it must be of.
	Tool string `json:"tool,omitempty" yaml:"tool,omitempty"`
	// Contains, when not empty, is text it must contain: the text the
	// model reads of a result or a retry prompt, the whole text of a
	// follow-up ("Background tool 'sleep' (task …) completed.\nResult: …").
	Contains string `json:"contains,omitempty" yaml:"contains,omitempty"`
}

// validate checks a When: at least one condition, valid tool names.
func (w *When) validate() error {
	if w.Prompt == nil && w.Result == nil && w.Retry == nil && w.FollowUp == nil {
		return errors.New("when needs prompt, result, retry or follow_up")
	}
	for _, c := range []struct {
		key string
		m   *PartMatch
	}{{"result", w.Result}, {"retry", w.Retry}, {"follow_up", w.FollowUp}} {
		if c.m == nil || c.m.Tool == "" {
			continue
		}
		if err := tool.ValidateName(c.m.Tool); err != nil {
			return fmt.Errorf("when: %s: %w", c.key, err)
		}
	}
	return nil
}

// matches reports whether the parts a request brings satisfy w.
func (w *When) matches(parts []message.Part) bool {
	if w.Prompt != nil && !anyPart(parts, func(p message.Part) bool {
		u, ok := p.(message.UserPrompt)
		if !ok {
			return false
		}
		_, follow := llm.ParseFollowUp(u)
		return !follow && strings.Contains(promptText(u), w.Prompt.Contains)
	}) {
		return false
	}
	if w.Result != nil && !anyPart(parts, func(p message.Part) bool {
		r, ok := p.(message.ToolReturn)
		return ok && w.Result.matches(r.ToolName, r.ModelText())
	}) {
		return false
	}
	if w.Retry != nil && !anyPart(parts, func(p message.Part) bool {
		r, ok := p.(message.RetryPrompt)
		return ok && w.Retry.matches(r.ToolName, r.ModelText())
	}) {
		return false
	}
	if w.FollowUp != nil && !anyPart(parts, func(p message.Part) bool {
		u, ok := p.(message.UserPrompt)
		if !ok {
			return false
		}
		f, follow := llm.ParseFollowUp(u)
		return follow && w.FollowUp.matches(f.Tool, promptText(u))
	}) {
		return false
	}
	return true
}

func (m *PartMatch) matches(toolName, text string) bool {
	return (m.Tool == "" || m.Tool == toolName) && strings.Contains(text, m.Contains)
}

func anyPart(parts []message.Part, ok func(message.Part) bool) bool {
	for _, p := range parts {
		if ok(p) {
			return true
		}
	}
	return false
}

// promptText is the text items of a user prompt, joined by newlines.
func promptText(u message.UserPrompt) string {
	var texts []string
	for _, c := range u.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// brought returns the parts a request brings: those of the messages after
// the last response of its history (all of them without one), and the
// number of responses in the history.
func brought(req *llm.Request) (parts []message.Part, responses int) {
	if req == nil {
		return nil, 0
	}
	from := 0
	for i, m := range req.Messages {
		if m.Role == message.RoleResponse {
			from = i + 1
			responses++
		}
	}
	for _, m := range req.Messages[from:] {
		parts = append(parts, m.Parts...)
	}
	return parts, responses
}

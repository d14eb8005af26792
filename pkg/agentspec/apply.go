package agentspec

import (
	"context"
	"fmt"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Configure sets on cfg what the spec gives that has no other source (no
// command-line flag): the instructions, the token limit, the agent's
// policies for tools (the tools of cfg's toolsets are held to them, see
// tool.WithPolicies: approval the spec requires, the description and
// schema it pins), the external tools (which win over any other tool of
// their name: no toolset of cfg answers for a person) and a
// BackgroundTools capability per selector of the spec, built from bg
// (background.DefaultSelector when the spec has none: the tools whose metadata
// says background: true or "optional"). A nil spec adds the default
// capability only. A remote toolset is best given the same policies
// ([Spec.Policies]), so that it reports the registry entries that clash
// with them.
func (s *Spec) Configure(cfg *agent.Config, bg background.Config) error {
	var sels []background.Selector
	if s != nil {
		if s.Instructions != nil {
			cfg.Instructions = *s.Instructions
		}
		if s.Limits != nil && s.Limits.Tokens != nil {
			cfg.Limits.TotalTokens = agent.Limit(*s.Limits.Tokens)
		}
		if policies := s.Policies(); len(policies) > 0 {
			cfg.Toolsets = []tool.Toolset{tool.WithPolicies(joined(cfg.Toolsets), policies)}
		}
		if defs := s.ExternalDefs(); len(defs) > 0 {
			ext, err := tool.External(defs...)
			if err != nil {
				return fmt.Errorf("external_tools: %w", err)
			}
			cfg.Toolsets = []tool.Toolset{tool.WithFallback(ext, joined(cfg.Toolsets))}
		}
		var err error
		if sels, err = s.Selectors(); err != nil {
			return err
		}
	}
	if len(sels) == 0 {
		sels = []background.Selector{background.DefaultSelector}
	}
	for _, sel := range sels {
		c := bg
		c.Tools = sel
		cfg.Capabilities = append(cfg.Capabilities, background.Tools(c))
	}
	return nil
}

// joined returns the one toolset of sets, or one offering all of theirs.
func joined(sets []tool.Toolset) tool.Toolset {
	if len(sets) == 1 {
		return sets[0]
	}
	return tool.FuncSet(func(ctx context.Context) ([]*tool.Tool, error) {
		var out []*tool.Tool
		for _, ts := range sets {
			tools, err := ts.Tools(ctx)
			if err != nil {
				return nil, err
			}
			out = append(out, tools...)
		}
		return out, nil
	})
}

// Settings returns the model request settings of model_settings:
// temperature, max_tokens, parallel_tool_calls.
func (s *Spec) Settings() llm.Settings {
	if s == nil || s.ModelSettings == nil {
		return llm.Settings{}
	}
	ms := s.ModelSettings
	out := llm.Settings{Temperature: ms.Temperature, ParallelToolCalls: ms.ParallelToolCalls}
	if ms.MaxTokens != nil {
		out.MaxTokens = *ms.MaxTokens
	}
	return out
}

// AdjustOpenAI sets on an OpenAI-compatible adapter's configuration what
// model_settings gives of its transport: stream_usage (when absent, usage
// in streams, stream_options, is asked of OpenAI itself, which supports
// it, and of no other server, since some reject the field: baseURL is
// OPENAI_BASE_URL) and extra_body.
func (s *Spec) AdjustOpenAI(cfg *openaicompat.Config, baseURL string) {
	cfg.StreamUsage = baseURL == ""
	if s == nil || s.ModelSettings == nil {
		return
	}
	if s.ModelSettings.StreamUsage != nil {
		cfg.StreamUsage = *s.ModelSettings.StreamUsage
	}
	cfg.ExtraBody = s.ModelSettings.ExtraBody
}

// Approvals returns the handler of approvals of mode, one of
// [ApproveModes], that decides them within the run: all approves every
// call, none denies every call, ask asks ask (a person at a terminal, see
// liveview.Ask) for each. Defer and wait (and an unknown mode) decide none
// within the run: it returns nil, and the run pauses on them (wait reads
// decisions from the conversation's stream, see the session package).
func Approvals(mode string, ask func(message.ToolCall) any) agent.DeferredHandlerFunc {
	var decide func(message.ToolCall) any
	switch mode {
	case "all":
		decide = func(message.ToolCall) any { return true }
	case "none":
		decide = func(message.ToolCall) any { return false }
	case "ask":
		decide = ask
	default:
		return nil
	}
	return func(_ context.Context, _ *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error) {
		res := &deferred.Results{Approvals: map[string]any{}}
		for _, c := range reqs.Approvals {
			res.Approvals[c.ToolCallID] = decide(c)
		}
		return res, nil
	}
}

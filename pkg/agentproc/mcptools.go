package agentproc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
)

// ToolAgents returns, for each of the registry's tools named (every one
// the registry holds now when names is ["all"]), an agent of agent serve
// that calls that tool once, its prompt the call's arguments, and answers
// the tool's result (agent serve --mcp-tools, SPEC §17): a fleet tool
// called over MCP is then a conversation as any other, dispatched to the
// workers under the tool's policy (its approval waits for people, a
// cancel reaches the worker), and answered by any replica. Its Input is
// the tool's parameters' schema. A tool named that the registry does not
// hold is an error: its worker advertises it first.
func (p *Process) ToolAgents(ctx context.Context, names []string) ([]serve.Agent, error) {
	if p.Client == nil {
		return nil, errors.New("agentproc: the fleet's tools need a remote client")
	}
	tools, err := p.Client.Toolset().Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("agentproc: the registry's tools: %w", err)
	}
	all := slices.Equal(names, []string{"all"})
	var out []serve.Agent
	found := map[string]bool{}
	for _, t := range tools {
		if !all && !slices.Contains(names, t.Name) {
			continue
		}
		found[t.Name] = true
		a, err := p.ServeAgent(&agentspec.Spec{Name: t.Name, Tools: []agentspec.ToolEntry{{Name: t.Name}}}, directModel(t.Name), false)
		if err != nil {
			return nil, fmt.Errorf("agentproc: tool %s: %w", t.Name, err)
		}
		a.Description, a.Input = t.Description, t.Parameters
		out = append(out, a)
	}
	if !all {
		for _, name := range names {
			if !found[name] {
				return nil, fmt.Errorf("agentproc: --mcp-tools: the registry has no tool %s (start its worker first)", name)
			}
		}
	}
	return out, nil
}

// directModel is the model of a tool's agent: its first answer calls the
// tool with the prompt as the arguments; then it answers the tool's
// result (or the refusal of its arguments) as its output.
func directModel(tool string) llm.Model {
	return script.New("direct:"+tool, func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				return &llm.Response{Parts: []message.Part{message.Text{Content: message.ContentText(x.Content)}}}, nil
			case message.RetryPrompt:
				return &llm.Response{Parts: []message.Part{message.Text{Content: x.Content}}}, nil
			}
		}
		for i := len(req.Messages) - 1; i >= 0; i-- {
			for _, p := range req.Messages[i].Parts {
				if u, ok := p.(message.UserPrompt); ok {
					var args string
					for _, c := range u.Content {
						args += c.Text
					}
					return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: tool, ToolCallID: "call_1", Args: args}}}, nil
				}
			}
		}
		return nil, errors.New("a tool's agent: no arguments")
	})
}

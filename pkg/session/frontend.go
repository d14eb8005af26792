package session

import (
	"context"
	"log/slog"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/tool"
)

// FrontendTools returns the capability that offers the model the
// conversation's frontend tools (conversation.State.FrontendTools, SPEC
// §18) as external tools: a call of one defers as an external call
// (pending record, answered through the desk), as a call of any external
// tool does. A frontend tool whose name is one of the agent's own tools
// is not offered (the agent's wins; the face refuses such a name when it
// is given). It reads the tools the state holds when it is made: make it
// after the state is set for the run.
func (s *Session) FrontendTools() agent.Capability {
	s.mu.Lock()
	defs := s.st.FrontendTools
	s.mu.Unlock()
	tools := make([]*tool.Tool, 0, len(defs))
	for _, d := range defs {
		t, err := d.Tool()
		if err != nil {
			// Checked when recorded: a definition that no longer
			// compiles is left out rather than failing every run.
			s.log.Warn("frontend tool left out", slog.String("conversation_id", s.st.ID), slog.Any("err", err))
			continue
		}
		tools = append(tools, t)
	}
	return frontendTools(tools)
}

// frontendTools adds its tools to those of every step.
type frontendTools []*tool.Tool

// PrepareTools implements agent.ToolsPreparer.
func (f frontendTools) PrepareTools(_ context.Context, _ *agent.RunInfo, tools []*tool.Tool) ([]*tool.Tool, error) {
	if len(f) == 0 {
		return tools, nil
	}
	out := tools[:len(tools):len(tools)]
	for _, t := range f {
		if !hasTool(tools, t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

func hasTool(tools []*tool.Tool, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

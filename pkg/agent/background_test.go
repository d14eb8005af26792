package agent_test

import (
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/bgtest"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestBackgroundScenarios runs the BackgroundTools scenario suite with the
// in-process executor.
func TestBackgroundScenarios(t *testing.T) {
	t.Parallel()
	bgtest.Run(t, bgtest.Harness{
		Name: "in-process",
		New: func(_ *testing.T, tools ...*tool.Tool) (tool.Toolset, agent.Executor) {
			return tool.MustSet(tools...), agent.InProcessExecutor{}
		},
	})
}

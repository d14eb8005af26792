package background_test

import (
	"context"

	"github.com/offload-dev/offload/pkg/agent/bgtest"
	"github.com/offload-dev/offload/pkg/tool"
)

// The shared scripted model and helpers (bgtest/fnmodel.go), under the
// names these tests use.
type (
	fnModel = bgtest.FnModel
	xArgs   = bgtest.XArgs
)

var (
	model            = bgtest.Model
	turns            = bgtest.Turns
	text             = bgtest.Text
	calls            = bgtest.Calls
	call             = bgtest.Call
	newAgent         = bgtest.NewAgent
	newAgentCfg      = bgtest.NewAgentCfg
	lastRequestParts = bgtest.LastRequestParts
	returnContent    = bgtest.ReturnContent
	mustJSON         = bgtest.MustJSON
)

func times42(name string, opts ...tool.Option) *tool.Tool {
	return tool.Func(name, "", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) { return a.X * 42, nil }, opts...)
}

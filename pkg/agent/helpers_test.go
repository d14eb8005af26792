package agent_test

import (
	"github.com/offload-dev/offload/pkg/agent/bgtest"
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

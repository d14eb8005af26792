// Package benchcall holds the call that offload's benchmarks measure, so
// that offload-bench and the Go benchmarks of pkg/agent and pkg/natsjs
// measure the same thing: a "lookup" tool with about 200 bytes of
// arguments and 200 bytes of result.
package benchcall

import (
	"context"
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Args is the arguments' JSON (about 200 bytes).
const Args = `{"query":"quarterly revenue of the northern region by product line, excluding returns and internal transfers","limit":20,"filters":{"lang":"en","since":"2026-01-01","until":"2026-06-30","region":"north"}}`

// Output is the tool's return value (about 200 bytes once encoded).
var Output = "Found 20 rows: " + strings.Repeat("north/widgets 1.2M, ", 9)

// LookupArgs are the measured tool's arguments.
type LookupArgs struct {
	Query   string            `json:"query"`
	Limit   int               `json:"limit"`
	Filters map[string]string `json:"filters,omitempty"`
}

// Lookup returns the measured tool: it decodes its arguments and returns
// Output.
func Lookup() *tool.Tool {
	return tool.Func("lookup", "Looks rows up.", func(_ context.Context, _ *tool.RunContext, a LookupArgs) (string, error) {
		if a.Query == "" {
			return "", tool.Retry("query is empty")
		}
		return Output, nil
	})
}

// Call returns the model response that calls the measured tool once.
func Call() *llm.Response {
	return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "lookup", ToolCallID: "call_1", Args: Args}}}
}

// FollowUps counts the background follow-ups of tool name in req (the user
// prompts the agent loop adds when a background call's result arrives).
func FollowUps(req *llm.Request, name string) int {
	n := 0
	prefix := "Background tool '" + name + "'"
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			if u, ok := p.(message.UserPrompt); ok && len(u.Content) > 0 && strings.HasPrefix(u.Content[0].Text, prefix) {
				n++
			}
		}
	}
	return n
}

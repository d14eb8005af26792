package agent_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

type deleteArgs struct {
	Path string `json:"path" jsonschema:"the file to delete"`
}

// A tool that needs a person's approval pauses the run; the follow-up run
// takes the decision.
func Example_approval() {
	del := tool.Func("delete_file", "Delete a file.", func(_ context.Context, _ *tool.RunContext, a deleteArgs) (string, error) {
		return "deleted " + a.Path, nil
	}, tool.NeedsApproval())
	model := script.FromTurns("demo", []script.Turn{
		{ToolCalls: []script.Call{{Tool: "delete_file", ID: "c1", Args: map[string]any{"path": "old.log"}}}},
		{Text: "Done."},
	})
	a, _ := agent.New(agent.Config{Model: model, Toolsets: []tool.Toolset{tool.MustSet(del)}, AllowDeferred: true})

	res, _ := a.Run(context.Background(), "Clean up old.log", nil)
	pending := res.Deferred.Approvals[0]
	fmt.Println("pending:", pending.ToolName, pending.Args)

	// Later, possibly in another process: history and decision go back in.
	res, _ = a.Run(context.Background(), "", &agent.RunOptions{
		History:         res.Messages,
		DeferredResults: &deferred.Results{Approvals: map[string]any{pending.ToolCallID: true}},
	})
	fmt.Println(res.Output)
	// Output:
	// pending: delete_file {"path":"old.log"}
	// Done.
}

// An external tool is executed elsewhere; its result comes back with the
// follow-up run.
func Example_external() {
	ext, _ := tool.External(tool.Def{
		Name:        "ask_user",
		Description: "Ask the user a question in the UI.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`),
	})
	model := script.New("demo", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		if r, ok := last.Parts[0].(message.ToolReturn); ok {
			return &llm.Response{Parts: []message.Part{message.Text{Content: "The user said: " + r.ModelText()}}}, nil
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "ask_user", ToolCallID: "q1", Args: `{"question":"Which color?"}`}}}, nil
	})
	a, _ := agent.New(agent.Config{Model: model, Toolsets: []tool.Toolset{ext}, AllowDeferred: true})

	res, _ := a.Run(context.Background(), "Pick a color", nil)
	fmt.Println("external:", res.Deferred.Calls[0].ToolName)
	res, _ = a.Run(context.Background(), "", &agent.RunOptions{
		History:         res.Messages,
		DeferredResults: &deferred.Results{Calls: map[string]any{"q1": "blue"}},
	})
	fmt.Println(res.Output)
	// Output:
	// external: ask_user
	// The user said: blue
}

// HandleDeferredToolCalls resolves approvals inline, without ending the run.
func ExampleHandleDeferredToolCalls() {
	del := tool.Func("delete_file", "Delete a file.", func(_ context.Context, _ *tool.RunContext, a deleteArgs) (string, error) {
		return "deleted " + a.Path, nil
	}, tool.NeedsApproval())
	model := script.FromTurns("demo", []script.Turn{
		{ToolCalls: []script.Call{
			{Tool: "delete_file", ID: "a", Args: map[string]any{"path": "tmp.txt"}},
			{Tool: "delete_file", ID: "b", Args: map[string]any{"path": "/etc/passwd"}},
		}},
		{Text: "One file deleted."},
	})
	policy := agent.HandleDeferredToolCalls(func(_ context.Context, _ *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error) {
		res := &deferred.Results{Approvals: map[string]any{}}
		for _, c := range reqs.Approvals {
			var a deleteArgs
			_ = json.Unmarshal(c.ArgsJSON(), &a)
			if a.Path[0] == '/' {
				res.Approvals[c.ToolCallID] = deferred.ToolDenied{Message: "absolute paths are not allowed"}
			} else {
				res.Approvals[c.ToolCallID] = true
			}
		}
		return res, nil
	})
	a, _ := agent.New(agent.Config{Model: model, Toolsets: []tool.Toolset{tool.MustSet(del)}, Capabilities: []agent.Capability{policy}})
	res, _ := a.Run(context.Background(), "Delete tmp.txt and /etc/passwd", nil)
	for _, p := range res.Messages[2].Parts {
		r := p.(message.ToolReturn)
		fmt.Printf("%s: %s (%s)\n", r.ToolCallID, r.ModelText(), r.Outcome)
	}
	fmt.Println(res.Output)
	// Output:
	// a: deleted tmp.txt (success)
	// b: absolute paths are not allowed (denied)
	// One file deleted.
}

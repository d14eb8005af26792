package background_test

import (
	"context"
	"fmt"
	"regexp"
	"sync/atomic"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

type topicArgs struct {
	Topic string `json:"topic"`
}

// A background tool returns at once with an acknowledgement; the model
// keeps working, and the tool's result arrives as a follow-up message.
func ExampleTools() {
	release := make(chan struct{}) // the report is slow: it waits for this
	report := tool.Func("write_report", "Write a long report.", func(ctx context.Context, _ *tool.RunContext, a topicArgs) (string, error) {
		select {
		case <-release:
			return "a report on " + a.Topic, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, tool.Meta(map[string]any{"background": true}))

	var turn atomic.Int32
	model := script.New("demo", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		reply := func(s string) *llm.Response { return &llm.Response{Parts: []message.Part{message.Text{Content: s}}} }
		switch turn.Add(1) {
		case 1:
			return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "write_report", ToolCallID: "c1", Args: `{"topic":"tides"}`}}}, nil
		case 2:
			close(release) // the model's next turn came first; now the report may finish
			return reply("The report is on its way."), nil
		default:
			last := req.Messages[len(req.Messages)-1]
			return reply("Got it: " + last.Parts[len(last.Parts)-1].(message.UserPrompt).Content[0].Text), nil
		}
	})
	a, _ := agent.New(agent.Config{
		Model:        model,
		Toolsets:     []tool.Toolset{tool.MustSet(report)},
		Capabilities: []agent.Capability{background.Tools(background.Config{})},
	})

	task := regexp.MustCompile(`[0-9A-Z]{26}`)
	res, err := a.Run(context.Background(), "Write about tides.", &agent.RunOptions{OnEvent: func(e agent.Event) {
		switch e.Type {
		case agent.EventToolResult:
			fmt.Println("ack:", task.ReplaceAllString(message.ContentText(e.Content), "<task>"))
		case agent.EventBackgroundTaskFinished:
			fmt.Println("task", e.Status)
		}
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(task.ReplaceAllString(res.Output, "<task>"))
	// Output:
	// ack: Tool 'write_report' is running in the background as task <task>. Its result will arrive later as a follow-up message; continue with other work meanwhile.
	// task completed
	// Got it: Background tool 'write_report' (task <task>) completed.
	// Result: a report on tides
}

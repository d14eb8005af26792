package remote_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// An agent runs a worker's tool in the background: the call returns an
// acknowledgement at once, the worker runs it, and its result reaches the
// model as a follow-up message.
func ExampleToolset_Executor() {
	url, shutdown := runServer()
	defer shutdown()
	ctx := context.Background()

	wc, _ := nats.Connect(url)
	defer wc.Close()
	research := tool.Func("research", "Research a topic.", func(_ context.Context, _ *tool.RunContext, a struct {
		Topic string `json:"topic"`
	}) (string, error) {
		return "notes on " + a.Topic, nil
	}, tool.Meta(map[string]any{"background": true}))
	w, _ := worker.New(worker.Config{Conn: wc, ID: "research-1", Tools: []*tool.Tool{research}})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	ac, _ := nats.Connect(url)
	defer ac.Close()
	d, _ := remote.NewDispatcher(remote.DispatcherConfig{Conn: ac})
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer d.Stop(ctx)
	ts, _ := remote.NewToolset(remote.ToolsetConfig{Conn: ac, Dispatcher: d})
	_ = ts.Start(ctx)
	defer ts.Stop(ctx)

	// A scripted model: call the tool, keep talking, answer with the
	// follow-up once it is there.
	model := script.New("demo", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		for _, m := range req.Messages {
			for _, p := range m.Parts {
				if u, ok := p.(message.UserPrompt); ok && strings.HasPrefix(u.Content[0].Text, "Background tool") {
					return &llm.Response{Parts: []message.Part{message.Text{Content: "Summary: " + u.Content[0].Text[strings.Index(u.Content[0].Text, "Result: ")+8:]}}}, nil
				}
			}
		}
		if len(req.Messages) == 1 {
			return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "research", ToolCallID: "c1", Args: `{"topic":"JetStream"}`}}}, nil
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "Waiting for the research."}}}, nil
	})
	a, _ := agent.New(agent.Config{
		Model:        model,
		Toolsets:     []tool.Toolset{ts},
		Capabilities: []agent.Capability{background.Tools(background.Config{Executor: ts.Executor(background.InProcessExecutor{})})},
	})
	res, err := a.Run(ctx, "Research JetStream.", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventBackgroundTaskFinished {
			fmt.Println("background task", e.Status)
		}
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Output)
	// Output:
	// background task completed
	// Summary: notes on JetStream
}

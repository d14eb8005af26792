package script_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
)

// printResponse prints a response's text and tool calls, or the error.
func printResponse(resp *llm.Response, err error) {
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, p := range resp.Parts {
		switch p := p.(type) {
		case message.Text:
			fmt.Println("text:", p.Content)
		case message.ToolCall:
			fmt.Println("call:", p.ToolCallID, p.ToolName, p.Args)
		}
	}
}

// A FuncModel answers with a Go function, which sees the whole request.
func ExampleNew() {
	model := script.New("echo", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			if r, ok := p.(message.ToolReturn); ok {
				return &llm.Response{Parts: []message.Part{message.Text{Content: "The weather is " + r.ModelText() + "."}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{
			message.ToolCall{ToolName: "get_weather", ToolCallID: "w1", Args: `{"city":"Paris"}`},
		}}, nil
	})
	ctx := context.Background()
	history := []message.Message{message.NewRequest(message.UserText("Weather in Paris?"))}
	printResponse(model.Generate(ctx, &llm.Request{Messages: history}))

	history = append(history,
		message.NewResponse(message.ToolCall{ToolName: "get_weather", ToolCallID: "w1", Args: `{"city":"Paris"}`}),
		message.NewRequest(message.ToolReturn{ToolName: "get_weather", ToolCallID: "w1", Content: []byte(`"sunny"`)}))
	printResponse(model.Generate(ctx, &llm.Request{Messages: history}))
	// Output:
	// call: w1 get_weather {"city":"Paris"}
	// text: The weather is sunny.
}

// A scripted model answers with its turns in order and fails loudly when
// they run out.
func ExampleFromTurns() {
	model := script.FromTurns("weather", []script.Turn{
		{ToolCalls: []script.Call{{Tool: "get_weather", Args: map[string]any{"city": "Paris"}}}},
		{Text: "It is sunny in Paris."},
	})
	ctx := context.Background()
	for range 3 {
		printResponse(model.Generate(ctx, &llm.Request{}))
	}
	_, err := model.Generate(ctx, &llm.Request{})
	fmt.Println(errors.Is(err, llm.ErrScriptExhausted))
	// Output:
	// call: call_1_1 get_weather {"city":"Paris"}
	// text: It is sunny in Paris.
	// error: script "weather": request 3: llm: script exhausted (the script has 2 turns)
	// true
}

// Scripts are usually files, in YAML or JSON.
func ExampleParse() {
	model, err := script.Parse([]byte(`
name: flaky
turns:
  - error: simulate a model failure
  - tool_calls:
      - tool: get_time
        args: {tz: UTC}
        id: t1
      - tool: get_weather
        args: '{"city": "Par'
  - text: Done.
`), script.FormatYAML)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		printResponse(model.Generate(ctx, &llm.Request{}))
	}
	// Output:
	// error: script "flaky": turn 1: scripted model failure: simulate a model failure
	// call: t1 get_time {"tz":"UTC"}
	// call: call_2_2 get_weather {"city": "Par
	// text: Done.
}

func ExampleLoad() {
	model, err := script.Load("../../../examples/scripts/weather.yaml")
	if err != nil {
		panic(err)
	}
	fmt.Println(model.Name(), model.Len())
	printResponse(model.Stream(context.Background(), &llm.Request{}, func(d llm.Delta) {
		fmt.Printf("delta %d: %s\n", d.ToolCallIndex, d.ToolCall.ToolName)
	}))
	// Output:
	// weather 2
	// delta 0: get_weather
	// delta 1: get_time
	// call: call_1_1 get_weather {"city":"Paris"}
	// call: call_1_2 get_time {"tz":"Europe/Paris"}
}

// A turn with when answers the requests that bring what it names,
// whatever their order; the first that matches wins, so the turn with two
// conditions comes first. A turn without when answers anything else, once.
func ExampleParse_when() {
	model, err := script.Parse([]byte(`
name: reactive
turns:
  - when: {prompt: {contains: ship}}
    tool_calls:
      - tool: build
      - tool: deploy
  - when: {result: {tool: deploy}, follow_up: {tool: build}}
    text: Built and deployed.
  - when: {follow_up: {tool: build, contains: "failed: "}}
    text: The build failed.
  - when: {follow_up: {tool: build}}
    text: Built; deploying.
  - when: {result: {tool: deploy}}
    text: Deployed; the build still runs.
  - text: I did not expect that.
`), script.FormatYAML)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	history := []message.Message{message.NewRequest(message.UserText("Please ship it."))}
	ask := func(parts ...message.Part) {
		if len(parts) > 0 {
			history = append(history, message.NewRequest(parts...))
		}
		resp, err := model.Generate(ctx, &llm.Request{Messages: history})
		printResponse(resp, err)
		if err == nil {
			history = append(history, message.NewResponse(resp.Parts...))
		}
	}
	ask()
	ask(message.ToolReturn{ToolName: "deploy", ToolCallID: "call_1_2_1", Content: []byte(`"deployed"`)},
		message.UserText("Background tool 'build' (task 01J0000000000000000000000A) completed.\nResult: ok"))
	ask(message.UserText("Background tool 'build' (task 01J0000000000000000000000B) failed: disk full"))
	ask(message.UserText("What now?"))
	ask(message.UserText("And now?"))
	// Output:
	// call: call_1_1_1 build {}
	// call: call_1_2_1 deploy {}
	// text: Built and deployed.
	// text: The build failed.
	// text: I did not expect that.
	// error: script "reactive": request 5: llm: script exhausted (no turn's when matches it, and the turn without when is used up)
}

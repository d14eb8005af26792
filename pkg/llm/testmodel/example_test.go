package testmodel_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/message"
)

// The test model calls every offered tool on the first turn, with arguments
// generated from the tools' schemas, then summarises what they returned.
func Example() {
	ctx := context.Background()
	model := testmodel.New(testmodel.Config{})
	tools := []llm.ToolDef{{
		Name:       "get_weather",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	}}
	history := []message.Message{message.NewRequest(message.UserText("What is the weather?"))}

	resp, err := model.Generate(ctx, &llm.Request{Messages: history, Tools: tools})
	if err != nil {
		panic(err)
	}
	history = append(history, message.NewResponse(resp.Parts...))
	for _, c := range history[len(history)-1].ToolCalls() {
		fmt.Println("call:", c.ToolCallID, c.ToolName, c.Args)
		history = append(history, message.NewRequest(message.ToolReturn{
			ToolName: c.ToolName, ToolCallID: c.ToolCallID, Content: json.RawMessage(`"sunny"`),
		}))
	}

	resp, err = model.Generate(ctx, &llm.Request{Messages: history, Tools: tools})
	if err != nil {
		panic(err)
	}
	fmt.Println("text:", message.NewResponse(resp.Parts...).Text())
	// Output:
	// call: call_0001 get_weather {"city":"a"}
	// text: {"get_weather":"sunny"}
}

// Stream delivers text word by word and tool calls whole.
func ExampleModel_Stream() {
	model := testmodel.New(testmodel.Config{OutputText: "It is sunny in Paris."})
	req := &llm.Request{Messages: []message.Message{message.NewRequest(message.UserText("Weather?"))}}
	_, err := model.Stream(context.Background(), req, func(d llm.Delta) {
		fmt.Printf("%q\n", d.Text)
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// "It "
	// "is "
	// "sunny "
	// "in "
	// "Paris."
}

func ExampleGenerateArgs() {
	schema := json.RawMessage(`{
		"type": "object",
		"properties": {
			"city":  {"type": "string"},
			"units": {"enum": ["metric", "imperial"]},
			"days":  {"type": "integer", "minimum": 1, "maximum": 7},
			"note":  {"type": "string"}
		},
		"required": ["city", "units", "days"]
	}`)
	for seed := range 2 {
		args, err := testmodel.GenerateArgs(schema, seed)
		if err != nil {
			panic(err)
		}
		fmt.Println(string(args))
	}
	// Output:
	// {"city":"a","days":1,"units":"metric"}
	// {"city":"b","days":2,"units":"imperial"}
}

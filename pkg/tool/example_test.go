package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/offload-dev/offload/pkg/tool"
)

func ExampleFunc() {
	type weatherArgs struct {
		City  string `json:"city" jsonschema:"the city to look up"`
		Units string `json:"units,omitempty" jsonschema:"celsius or fahrenheit"`
	}
	weather := tool.Func("get_weather", "Get the current weather.",
		func(ctx context.Context, rc *tool.RunContext, a weatherArgs) (string, error) {
			if a.City == "" {
				return "", tool.Retry("city must not be empty")
			}
			return "sunny in " + a.City, nil
		}, tool.Retries(2))

	fmt.Println(string(weather.Parameters))

	// The model's arguments are parsed and checked against the schema first...
	args, err := weather.ParseArgs(`{"city": "Oslo"}`)
	fmt.Println(string(args), err)
	_, err = weather.ParseArgs(`{"town": "Oslo"}`)
	var ve *tool.ValidationError
	fmt.Println(errors.As(err, &ve), ve)

	// ...then the tool runs with them.
	out, err := weather.Run(context.Background(), &tool.RunContext{ToolName: "get_weather"}, args)
	fmt.Println(out, err)
	// Output:
	// {"type":"object","properties":{"city":{"type":"string","description":"the city to look up"},"units":{"type":"string","description":"celsius or fahrenheit"}},"required":["city"],"additionalProperties":false}
	// {"city":"Oslo"} <nil>
	// true validating root: unexpected additional properties ["town"]
	// sunny in Oslo <nil>
}

func ExampleRequireApproval() {
	deleteFile := tool.MustNew(tool.Def{Name: "delete_file"},
		func(ctx context.Context, rc *tool.RunContext, args json.RawMessage) (any, error) {
			return "deleted", nil
		})
	// Deleting anything under /etc needs a person's approval.
	guarded := tool.RequireApproval(tool.MustSet(deleteFile),
		func(ctx context.Context, rc *tool.RunContext, t *tool.Tool, args json.RawMessage) bool {
			var a struct {
				Path string `json:"path"`
			}
			_ = json.Unmarshal(args, &a)
			return strings.HasPrefix(a.Path, "/etc/")
		})
	tools, _ := guarded.Tools(context.Background())
	del := tools[0]

	ctx := context.Background()
	out, err := del.Run(ctx, &tool.RunContext{}, json.RawMessage(`{"path":"/tmp/x"}`))
	fmt.Println(out, err)

	_, err = del.Run(ctx, &tool.RunContext{}, json.RawMessage(`{"path":"/etc/passwd"}`))
	var ar *tool.ApprovalRequired
	fmt.Println(errors.As(err, &ar), err)

	// After a person approved the call, the follow-up run executes it.
	out, err = del.Run(ctx, &tool.RunContext{ToolCallApproved: true}, json.RawMessage(`{"path":"/etc/passwd"}`))
	fmt.Println(out, err)
	// Output:
	// deleted <nil>
	// true tool call requires approval
	// deleted <nil>
}

func ExampleExternal() {
	set, err := tool.External(tool.Def{
		Name:        "buy",
		Description: "Buy an item; executed by the shop's own system.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"item":{"type":"string"}},"required":["item"]}`),
	})
	if err != nil {
		panic(err)
	}
	tools, _ := set.Tools(context.Background())
	buy := tools[0]
	fmt.Println(buy.Kind, buy.Retries, buy.Handler == nil)

	// Its schema is enforced: bad arguments go back to the model.
	_, err = buy.ParseArgs(`{"item": 3}`)
	fmt.Println(err)

	// It never runs here: its calls are deferred and answered later.
	_, err = buy.Run(context.Background(), &tool.RunContext{}, json.RawMessage(`{"item":"apple"}`))
	fmt.Println(errors.Is(err, tool.ErrExternal))
	// Output:
	// external 0 true
	// validating root: validating /properties/item: type: 3 has type "integer", want "string"
	// true
}

func ExampleErrorType() {
	_, err := openConfig()
	fmt.Println(tool.ErrorType(err))
	fmt.Println(tool.ErrorType(errors.New("plain")))
	// Output:
	// PathError
	// errorString
}

func openConfig() ([]byte, error) {
	return nil, fmt.Errorf("load config: %w", &fs.PathError{Op: "open", Path: "config.yaml", Err: fs.ErrNotExist})
}

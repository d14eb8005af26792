package message_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/message"
)

func ExampleHistory() {
	ts := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
	h := message.History{
		{Role: message.RoleRequest, RunID: "run1", ConversationID: "conv1", Timestamp: ts,
			Parts: []message.Part{message.UserText("What is 6 x 7?")}},
		{Role: message.RoleResponse, RunID: "run1", ConversationID: "conv1", Timestamp: ts,
			ModelName: "gpt-4o-mini", Usage: message.Usage{Requests: 1, InputTokens: 12, OutputTokens: 3},
			Parts: []message.Part{message.Text{Content: "42"}}},
	}

	// One process writes the history...
	b, err := json.Marshal(h)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))

	// ...another reads it back and resumes.
	var got message.History
	if err := json.Unmarshal(b, &got); err != nil {
		panic(err)
	}
	fmt.Println(len(got), got[1].ModelName, got[1].Text(), got[1].Usage.TotalTokens())

	// A history written by a newer version is refused.
	err = json.Unmarshal([]byte(`{"version":3,"messages":[]}`), &got)
	fmt.Println(err)
	// Output:
	// {"version":2,"messages":[{"role":"request","run_id":"run1","conversation_id":"conv1","timestamp":"2025-03-14T15:09:26Z","parts":[{"part_kind":"user-prompt","content":[{"type":"text","text":"What is 6 x 7?"}]}]},{"role":"response","run_id":"run1","conversation_id":"conv1","timestamp":"2025-03-14T15:09:26Z","model_name":"gpt-4o-mini","usage":{"requests":1,"input_tokens":12,"output_tokens":3},"parts":[{"part_kind":"text","content":"42"}]}]}
	// 2 gpt-4o-mini 42 15
	// message: unsupported history version: 3 (this build reads 1 to 2)
}

func ExampleToolReturn_ModelText() {
	for _, r := range []message.ToolReturn{
		{Content: json.RawMessage(`"sunny"`)},
		{Content: json.RawMessage(`{"temp": 21, "unit": "C"}`)},
		{Content: json.RawMessage(`null`)},
		{Content: json.RawMessage(`"PathError"`), Outcome: message.OutcomeFailed},
	} {
		fmt.Printf("%q\n", r.ModelText())
	}
	// Output:
	// "sunny"
	// "{\"temp\":21,\"unit\":\"C\"}"
	// ""
	// "{\"error\":\"PathError\"}"
}

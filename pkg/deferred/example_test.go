package deferred_test

import (
	"encoding/json"
	"fmt"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

func ExampleRequests_BuildResults() {
	// A run ended with these deferred calls.
	reqs := &deferred.Requests{
		Approvals: []message.ToolCall{
			{ToolName: "delete_file", ToolCallID: "call_1", Args: `{"path":".env"}`},
			{ToolName: "delete_file", ToolCallID: "call_2", Args: `{"path":"tmp.txt"}`},
		},
		Calls: []message.ToolCall{
			{ToolName: "buy", ToolCallID: "call_3", Args: `{"item":"apple"}`},
		},
		TaskIDs: map[string]string{
			"call_1": "01JQ0000000000000000000001",
			"call_2": "01JQ0000000000000000000002",
			"call_3": "01JQ0000000000000000000003",
		},
	}

	// A person denies one deletion and approves the rest; the shop's system
	// answers the external call.
	res, err := reqs.BuildResults(
		map[string]any{"call_1": deferred.ToolDenied{Message: "Keep the secrets."}},
		map[string]any{"call_3": tool.Return{Value: "bought", Metadata: map[string]any{"order": "A-17"}}},
		map[string]map[string]any{"call_2": {"approved_by": "alice"}},
		true, // approve every approval not answered explicitly
	)
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	fmt.Println(reqs.Remaining(res) == nil)

	// An ID under the wrong category is refused.
	_, err = reqs.BuildResults(nil, map[string]any{"call_1": "done"}, nil, false)
	fmt.Println(err)

	// So is an approval value that is not true, false, ToolApproved or ToolDenied.
	_, err = reqs.BuildResults(map[string]any{"call_1": "yes"}, nil, nil, false)
	fmt.Println(err)
	// Output:
	// {"calls":{"call_3":{"return_value":"bought","metadata":{"order":"A-17"},"kind":"tool-return"}},"approvals":{"call_1":{"message":"Keep the secrets.","kind":"tool-denied"},"call_2":{"override_args":null,"kind":"tool-approved"}},"metadata":{"call_2":{"approved_by":"alice"}}}
	// true
	// `calls` contains tool call IDs not in this `DeferredToolRequests.calls`: ['call_1']
	// approval for "call_1": deferred: invalid approval value: string (yes); use true, false, deferred.ToolApproved or deferred.ToolDenied
}

func ExampleRequests_Remaining() {
	reqs := &deferred.Requests{
		Approvals: []message.ToolCall{{ToolName: "delete_file", ToolCallID: "call_1"}},
		Calls:     []message.ToolCall{{ToolName: "buy", ToolCallID: "call_2"}},
	}
	// The approval is (wrongly) answered under Calls: it stays pending.
	rem := reqs.Remaining(&deferred.Results{Calls: map[string]any{"call_1": true, "call_2": "bought"}})
	fmt.Println(rem.Len(), rem.Approvals[0].ToolCallID, rem.Kind("call_1"))
	// Output:
	// 1 call_1 approval
}

package a2aface_test

import (
	"encoding/json"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/offload-dev/offload/pkg/a2aface"
)

// A client settles a task that waits for input (TASK_STATE_INPUT_REQUIRED)
// with a message to it whose data part holds its decisions and answers:
// each task_id one of the status message's pending calls.
func ExampleInput() {
	approved := true
	in := a2aface.Input{
		Decisions: []a2aface.Decision{{TaskID: "01JD0000000000000000000001", Approved: &approved,
			ArgsDigest: "8135af9cfe9643e629a7ee52bc23b12eeca92cd8bb856c65a7548f27b7f77c05"}},
		Answers: []a2aface.Answer{{TaskID: "01JD0000000000000000000002", Content: json.RawMessage(`{"ticket":"OPS-7"}`)}},
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(in))
	msg.TaskID = "01JD00000000000000000000T1"
	data, _ := json.Marshal(msg.Parts)
	fmt.Println(string(data))
	// Output:
	// [{"data":{"decisions":[{"task_id":"01JD0000000000000000000001","approved":true,"args_digest":"8135af9cfe9643e629a7ee52bc23b12eeca92cd8bb856c65a7548f27b7f77c05"}],"answers":[{"task_id":"01JD0000000000000000000002","content":{"ticket":"OPS-7"}}]}}]
}

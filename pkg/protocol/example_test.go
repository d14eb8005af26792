package protocol_test

import (
	"errors"
	"fmt"

	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

func ExampleSubjects() {
	s := protocol.Subjects{Prefix: "tools"}
	conv, task := "01JQ0000000000000000000000", "01JQ0000000000000000000001"
	fmt.Println(s.Task("search"))
	fmt.Println(s.Result(conv, task, "search"))
	fmt.Println(s.ResultsFor(conv))
	fmt.Println(s.OfTool(protocol.KindResult, "search"))

	kind, c, t, _, err := s.Parse(s.Decision(conv, task))
	fmt.Println(kind, c == conv, t == task, err)
	// Output:
	// tools.task.search
	// tools.result.01JQ0000000000000000000000.01JQ0000000000000000000001.search
	// tools.result.01JQ0000000000000000000000.>
	// tools.result.*.*.search
	// decision true true <nil>
}

func ExampleDecodeResult() {
	// The minimal manual form: nats pub tools.answer.<conv>.<task> '{"content":"42"}'
	r, err := protocol.DecodeResult([]byte(`{"content":"42"}`), "01JQ0000000000000000000001", nil)
	fmt.Println(r.TaskID, r.Status, string(r.Content), err)

	_, err = protocol.DecodeDecision([]byte(`{"approved":"yes"}`), nil)
	var de *protocol.DecodeError
	fmt.Println(errors.Is(err, protocol.ErrInvalidField), errors.As(err, &de) && de.Field == "approved")
	fmt.Println(err)
	// Output:
	// 01JQ0000000000000000000001 ok "42" <nil>
	// true true
	// protocol: decode decision: invalid field "approved": must be a boolean, got string
}

func ExampleResultFromOutcome() {
	r := protocol.ResultFromOutcome(nil, tool.Retry("query must not be empty"))
	fmt.Println(r.Status, r.Message)

	_, err := r.Outcome()
	var retry *tool.ModelRetry
	fmt.Println(errors.As(err, &retry))
	// Output:
	// retry query must not be empty
	// true
}

package session

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Answers are answers given by hand in their command-line form (`agent
// resume`'s --approve-task TASK, --deny-task TASK[=MESSAGE] and
// --result TASK=JSON).
type Answers struct {
	// Approve are the task IDs of the calls approved.
	Approve []string
	// Deny are the calls denied, TASK or TASK=MESSAGE.
	Deny []string
	// Results are the external calls answered, TASK=JSON (JSON an
	// Answer such as {"content":"42"}).
	Results []string
}

// Given returns the answers as [Given] for [ContinueOptions], in the order
// approvals, denials, results, each with the flag that gave it (for
// messages). A result without "=" is an error.
func (a Answers) Given() ([]Given, []string, error) {
	var given []Given
	var flags []string
	add := func(flag, task string, kind conversation.ArrivalKind, data []byte) {
		given, flags = append(given, Given{Kind: kind, TaskID: task, Data: data}), append(flags, flag)
	}
	for _, t := range a.Approve {
		add("--approve-task", t, conversation.ArrivalDecision, []byte(`{"approved":true}`))
	}
	for _, v := range a.Deny {
		task, msg, _ := strings.Cut(v, "=")
		data, err := json.Marshal(protocol.Decision{Approved: false, Message: msg})
		if err != nil {
			return nil, nil, fmt.Errorf("--deny-task %s: %w", v, err)
		}
		add("--deny-task", task, conversation.ArrivalDecision, data)
	}
	for _, v := range a.Results {
		task, js, ok := strings.Cut(v, "=")
		if !ok {
			return nil, nil, fmt.Errorf("--result %s: want TASK=JSON", v)
		}
		add("--result", task, conversation.ArrivalAnswer, []byte(js))
	}
	return given, flags, nil
}

package remote_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// The agent's own limits for a tool (its spec's tool policy, SPEC §19)
// travel on each of the tool's tasks, for its worker to hold the call to
// them beside its own; a tool without a policy's limits sends none.
func TestPolicyLimitsTravelOnTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	echo := func(name string) *tool.Tool {
		return tool.Func(name, "Echo.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ok", nil })
	}
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{echo("job"), echo("free")}})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	mine := &limits.Limits{MaxInFlight: 1, Key: limits.KeyConversation, Priority: 5}
	r, err := remote.NewToolset(remote.ToolsetConfig{Conn: b.srv.Conn(t), Dispatcher: d, Logger: jstest.Logger(),
		Policies: map[string]tool.Policy{"job": {Limits: mine}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	waitTools(t, r, "free", "job")
	tools, err := r.Tools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		tap := b.taskTap(t, tl.Name)
		rc := &tool.RunContext{ConversationID: protocol.NewID(), ToolCallID: "call_" + tl.Name, ToolName: tl.Name}
		if _, err := tl.Run(t.Context(), rc, json.RawMessage(`{}`)); err != nil {
			t.Fatalf("%s: %v", tl.Name, err)
		}
		m := offloadtest.WaitOrTimeout(t, tap, "the task of "+tl.Name)
		task, err := protocol.DecodeTask(m.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch got := task.Limits; tl.Name {
		case "job":
			if got == nil || got.MaxInFlight != 1 || got.Key != limits.KeyConversation || got.Priority != 5 {
				t.Errorf("job's task carries limits %+v, want the policy's", got)
			}
		default:
			if got != nil {
				t.Errorf("%s's task carries limits %+v, want none", tl.Name, got)
			}
		}
	}
}

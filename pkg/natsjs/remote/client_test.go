package remote_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// A resume attaches the background tasks a conversation left running
// before it reads the results stream: a result stored after that read and
// before the run attaches is not dropped by the dispatcher but reaches the
// attached task; a released task is let go.
func TestClientAttachKeepsResultForTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t, remote.ClientConfig{})
	conv, held, released := protocol.NewID(), protocol.NewID(), protocol.NewID()
	pt := func(id string) deferred.PendingTask {
		return deferred.PendingTask{TaskID: id, Kind: deferred.KindBackground, Tool: "research", ToolCallID: "call_" + id, Args: json.RawMessage(`{}`)}
	}
	if err := c.Attach(conv, []deferred.PendingTask{pt(held), pt(released)}); err != nil {
		t.Fatal(err)
	}
	c.Release(released)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The worker's result is stored before the run attaches.
	if _, err := b.js.Publish(ctx, protocol.Subjects{}.Result(conv, held, "research"), []byte(`{"content":"found"}`)); err != nil {
		t.Fatal(err)
	}
	att, ok := background.Executor(c.Executor()).(background.Attacher)
	if !ok {
		t.Fatal("the remote executor is not an Attacher")
	}
	task, err := att.Attach(ctx, &agent.RunInfo{ConversationID: conv, RunID: protocol.NewID()}, pt(held))
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, task.Done(), "the held task's result")
	v, err := task.Outcome()
	if r, ok := v.(tool.Return); err != nil || !ok || string(r.Value.(json.RawMessage)) != `"found"` {
		t.Fatalf("outcome %#v, %v", v, err)
	}
	if n := c.Dispatcher().Pending(); n != 0 {
		t.Errorf("%d tasks still waited for; the released one should not be", n)
	}
}

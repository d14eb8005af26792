package remote_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// SIGTERM while an inline remote call waits: the run suspends at once,
// the task runs on on its worker and is kept like a background task
// (with its deadline), and a later run attached to it delivers the
// worker's result once, as a follow-up. The tool ran once.
func TestSuspendDuringInlineCallKeepsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := jstest.NewGate()
	b.worker(t, worker.Config{ID: "w1", Tools: []*tool.Tool{g.Tool("slow", "slow done")}})
	c := b.client(t, remote.ClientConfig{})
	d, ts := c.Dispatcher(), c.Toolset()
	waitTools(t, ts, "slow")
	mk := func() *agent.Agent {
		a, err := agent.New(agent.Config{
			Model:        callOnceThen("slow", "done"),
			Toolsets:     []tool.Toolset{ts},
			Capabilities: []agent.Capability{background.Tools(background.Config{Executor: c.Executor()})},
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	suspend := make(chan struct{})
	go func() {
		<-g.Started // the tool runs on its worker: SIGTERM now
		close(suspend)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := mk().Run(ctx, "go", &agent.RunOptions{Suspend: suspend})
	if err != nil || !res.Suspended {
		t.Fatalf("run: %v, suspended %v", err, res != nil && res.Suspended)
	}
	if len(res.Background) != 1 || res.Background[0].Tool != "slow" || res.Background[0].Deadline.IsZero() {
		t.Fatalf("background %+v, want the inline call with its deadline", res.Background)
	}
	bg := res.Background[0]
	if d.Pending() != 0 {
		t.Errorf("%d calls still waited for after the suspend", d.Pending())
	}

	// The next run takes the task over (attached first, as a resume
	// does); the worker finishes it then.
	if err := c.Attach(res.ConversationID, res.Background); err != nil {
		t.Fatal(err)
	}
	g.Open()
	done := make(chan struct{})
	var out *agent.Result
	go func() {
		defer close(done)
		out, err = mk().Run(ctx, "", &agent.RunOptions{History: res.Messages, Background: []agent.AdoptedTask{{Task: bg}}})
	}()
	offloadtest.WaitOrTimeout(t, done, "the resumed run")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(mustJSONString(t, out.Messages), "slow done"); n != 1 || out.Output != "done" {
		t.Errorf("the result appears %d times in the history, want once; output %q: %s", n, out.Output, mustJSONString(t, out.Messages))
	}
	if !strings.Contains(mustJSONString(t, out.Messages), "Background tool 'slow' (task "+bg.TaskID+") completed.") {
		t.Errorf("no follow-up for the handed-off call: %s", mustJSONString(t, out.Messages))
	}
	select {
	case id := <-g.Started:
		t.Errorf("the tool ran again (call %s)", id)
	default:
	}
}

func mustJSONString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// callOnceThen is a model that calls the named tool when the conversation
// has no call yet, and else answers with text.
func callOnceThen(name, text string) llm.Model {
	return script.New("once", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		for _, m := range req.Messages {
			if len(m.ToolCalls()) > 0 {
				return &llm.Response{Parts: []message.Part{message.Text{Content: text}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: name, ToolCallID: "call_1", Args: "{}"}}}, nil
	})
}

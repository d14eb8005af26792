package serve_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// stepWorld is the agents of TestLapsedStepDoneOnce: the model answers
// the prompt with two calls, quick and slow, and their results with
// "done"; quick returns at once, slow hangs on the killed replica.
type stepWorld struct {
	mu        sync.Mutex
	requests  map[string]int // replica → model requests
	quick     map[string]int // replica → runs of quick
	slow      map[string]int // replica → runs of slow completed
	hung      chan struct{}
	continued chan string
	finals    chan service.Final
}

func (k *stepWorld) agent(t *testing.T, name string, hang bool) serve.Agent {
	t.Helper()
	quick := tool.Func("quick", "Returns at once.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		k.mu.Lock()
		k.quick[name]++
		k.mu.Unlock()
		return "quick", nil
	})
	slow := tool.Func("slow", "Works slowly.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		if hang {
			k.hung <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		}
		k.mu.Lock()
		k.slow[name]++
		k.mu.Unlock()
		return "slow", nil
	})
	set := tool.MustSet(quick, slow)
	model := script.New("step-test", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		k.mu.Lock()
		k.requests[name]++
		k.mu.Unlock()
		for _, p := range req.Messages[len(req.Messages)-1].Parts {
			if _, ok := p.(message.ToolReturn); ok {
				return &llm.Response{Parts: []message.Part{message.Text{Content: "done"}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{
			message.ToolCall{ToolName: "quick", ToolCallID: "c1", Args: "{}"},
			message.ToolCall{ToolName: "slow", ToolCallID: "c2", Args: "{}"},
		}}, nil
	})
	a, err := agent.New(agent.Config{Model: model, Toolsets: []tool.Toolset{set}, AllowDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	return serve.Agent{Name: "ops", Digest: "sha256:test", Agent: a, Tools: set}
}

// A replica dies after the model answered with two calls and one of them
// ran (SPEC §20): the replica that continues the conversation makes no
// model request for that step, does not run the finished call again, and
// makes the in-process call not declared idempotent that was running an
// unknown effect for a person; approved, it runs once, and the
// conversation finishes with one more model request.
func TestLapsedStepDoneOnce(t *testing.T) {
	b := servetest.Setup(t)
	k := &stepWorld{requests: map[string]int{}, quick: map[string]int{}, slow: map[string]int{},
		hung: make(chan struct{}, 1), continued: make(chan string, 16), finals: make(chan service.Final, 16)}
	opts := func(name string, hang bool) servetest.ReplicaOpts {
		return servetest.ReplicaOpts{Config: func(c *serve.Config) {
			c.Agents = []serve.Agent{k.agent(t, name, hang)}
			c.SweepInterval = 200 * time.Millisecond
			c.OnContinue = func(conv string) { k.continued <- conv }
			if !hang {
				c.OnFinal = func(f service.Final) { k.finals <- f }
			}
		}}
	}
	r1 := b.ReplicaWith(t, "r1", opts("r1", true))
	r2 := b.ReplicaWith(t, "r2", opts("r2", false))
	run, err := r1.Svc.StartConversation(context.Background(), "ops", "go", "")
	if err != nil {
		t.Fatal(err)
	}
	conv := run.ConversationID
	offloadtest.WaitOrTimeout(t, k.hung, "slow running on r1")
	// quick's outcome is saved as slow runs (the store's write has no
	// signal but itself).
	offloadtest.Eventually(t, "quick's outcome stored", func() error {
		st, err := r2.Convs.Load(context.Background(), conv)
		if err != nil {
			return err
		}
		if n := len(st.History); n < 3 || st.History[n-1].Role != message.RoleRequest {
			return errors.New("not yet")
		}
		return nil
	})
	r1.JS.Conn().Close() // the kill
	if c := offloadtest.WaitOrTimeoutWithin(t, k.continued, servetest.LeaseTTL+servetest.Wait, "the continuation"); c != conv {
		t.Fatalf("continued %s, want %s", c, conv)
	}
	f := offloadtest.WaitOrTimeout(t, k.finals, "the continuation's end")
	if f.Status != "paused" || len(f.Pending) != 1 || f.Pending[0].ToolCallID != "c2" || f.Pending[0].Metadata["offload.effect"] != "unknown" {
		t.Fatalf("continuation ended %+v, want paused on slow's unknown effect", f)
	}
	k.mu.Lock()
	if k.requests["r2"] != 0 || k.quick["r2"] != 0 || k.slow["r2"] != 0 {
		t.Fatalf("after the kill: requests %v, quick %v, slow %v; want none on r2", k.requests, k.quick, k.slow)
	}
	k.mu.Unlock()
	b.Decide(t, r2.JS, conv, f.Pending[0].TaskID)
	offloadtest.WaitOrTimeout(t, k.continued, "the decision's continuation")
	if f := offloadtest.WaitOrTimeout(t, k.finals, "the approved continuation's end"); f.Status != "finished" || f.Output != "done" {
		t.Fatalf("approved continuation ended %+v", f)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.requests["r1"] != 1 || k.requests["r2"] != 1 || k.quick["r1"] != 1 || k.quick["r2"] != 0 || k.slow["r2"] != 1 {
		t.Fatalf("requests %v, quick %v, slow %v; want one request each, quick once on r1, slow once on r2", k.requests, k.quick, k.slow)
	}
}

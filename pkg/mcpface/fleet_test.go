package mcpface_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestFleetTools: agent serve --mcp-tools serves the registry's tools on
// the MCP endpoint of two replicas: a worker's approval-gated tool called
// as a task by the TypeScript SDK's client, its approval answered by
// elicitation, runs once on the worker; a long call as a task created on
// one replica and cancelled on the other is cancelled on the worker.
func TestFleetTools(t *testing.T) {
	c := mcptest.NewClient(t)
	w := servetest.Setup(t)
	ran := make(chan string, 8)
	started, stopped := make(chan struct{}, 1), make(chan error, 1)
	job := tool.Func("job", "Deploys a target once approved.", func(_ context.Context, _ *tool.RunContext, a servetest.TargetArgs) (string, error) {
		ran <- a.Target
		return "ran " + a.Target, nil
	}, tool.NeedsApproval())
	long := tool.Func("long", "Works until cancelled.", func(ctx context.Context, _ *tool.RunContext, _ servetest.TargetArgs) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- ctx.Err()
		return "", ctx.Err()
	})
	wk, err := worker.New(worker.Config{Conn: w.Srv.Conn(t), ID: "w1", Tools: []*tool.Tool{job, long}, AckWait: 2 * time.Second, Logger: servetest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
		defer cancel()
		if err := wk.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	replica := func(name string) *servetest.Replica {
		return w.ReplicaWith(t, name, servetest.ReplicaOpts{Remote: &remote.ClientConfig{}, Agents: func(t *testing.T, p *agentproc.Process) []serve.Agent {
			var agents []serve.Agent
			offloadtest.Eventually(t, "the worker's tools in the registry", func() error {
				var err error
				if agents, err = p.ToolAgents(t.Context(), []string{"all"}); err == nil && len(agents) != 2 {
					err = errors.New("not yet")
				}
				return err
			})
			return agents
		}})
	}
	srvA, _ := replica("a").Face(t, tokens, agentproc.FaceOptions{MCP: true})
	srvB, _ := replica("b").Face(t, tokens, agentproc.FaceOptions{MCP: true})
	for name, url := range map[string]string{"a": srvA.URL, "b": srvB.URL} {
		mcptest.OK[map[string]any](c, map[string]any{"op": "connect", "client": name, "url": url + "/mcp", "token": admin,
			"elicit": map[string]any{"approved": true}})
	}

	tools := mcptest.OK[[]map[string]any](c, map[string]any{"op": "list", "client": "a"})
	if len(tools) != 2 {
		t.Fatalf("tools %v", tools)
	}
	for _, tl := range tools {
		schema, _ := tl["inputSchema"].(map[string]any)
		props, _ := schema["properties"].(map[string]any)
		if exec, _ := tl["execution"].(map[string]any); exec["taskSupport"] != "optional" || props["target"] == nil {
			t.Fatalf("tool %v: want the tool's schema, tasks optional", tl)
		}
	}

	// The approval-gated tool as a task: asked, approved, run once.
	stream := mcptest.OK[[]map[string]any](c, map[string]any{"op": "stream", "client": "a", "tool": "job", "args": map[string]any{"target": "web"}})
	last := stream[len(stream)-1]
	if last["type"] != "result" || !strings.Contains(toJSON(last["result"]), "ran web") {
		t.Fatalf("job's stream %v", stream)
	}
	if got := offloadtest.WaitOrTimeout(t, ran, "job run"); got != "web" {
		t.Fatalf("ran %s", got)
	}
	if e := mcptest.OK[[]map[string]any](c, map[string]any{"op": "elicitations", "client": "a"}); len(e) != 1 || !strings.Contains(toJSON(e[0]), "job") {
		t.Fatalf("elicitations %v", e)
	}

	// A long call as a task created on one replica, cancelled on the
	// other: cancelled on the worker.
	created := mcptest.OK[struct {
		Task task `json:"task"`
	}](c, map[string]any{"op": "create", "client": "a", "tool": "long", "args": map[string]any{"target": "db"}})
	offloadtest.WaitOrTimeout(t, started, "long started on the worker")
	if got := mcptest.OK[task](c, map[string]any{"op": "cancel", "client": "b", "taskId": created.Task.TaskID}); got.Status != "cancelled" {
		t.Fatalf("cancel %+v", got)
	}
	if err := offloadtest.WaitOrTimeout(t, stopped, "long cancelled on the worker"); !errors.Is(err, context.Canceled) {
		t.Fatalf("long ended with %v", err)
	}
	select {
	case got := <-ran:
		t.Fatalf("job ran again: %s", got)
	default:
	}
}

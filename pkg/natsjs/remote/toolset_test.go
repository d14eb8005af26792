package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

func TestRegistryEntriesAppearAndVanish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	r := b.toolset(t, d, nil)
	filtered := b.toolset(t, d, []string{"echo"})
	if got := toolNames(t, r); len(got) != 0 {
		t.Fatalf("tools before any worker: %v", got)
	}

	approve := tool.Func("approve_me", "Needs approval.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "ok", nil
	}, tool.NeedsApproval(), tool.Meta(map[string]any{"background": true}))
	w1 := b.worker(t, worker.Config{ID: "host.one-1", Tools: []*tool.Tool{jstest.EchoTool(""), approve}})
	w2 := b.worker(t, worker.Config{ID: "two", Tools: []*tool.Tool{jstest.EchoTool("")}})
	waitTools(t, r, "approve_me", "echo")
	waitTools(t, filtered, "echo")

	tools, _ := r.Tools(context.Background())
	a := tools[0]
	if !a.RequiresApproval || a.Metadata["background"] != true || a.Description != "Needs approval." {
		t.Errorf("approve_me as seen remotely: %+v", a.Def())
	}
	if !tools[1].HasParameter("text") {
		t.Errorf("echo schema %s", tools[1].Parameters)
	}

	// The stored entry follows SPEC §5.4.
	kv, err := b.js.KeyValue(context.Background(), "tools_registry")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), natsjs.RegistryKey("echo", "host.one-1"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Key() != "echo.host_one-1" {
		t.Errorf("key %s", e.Key())
	}
	var fields map[string]any
	if err := json.Unmarshal(e.Value(), &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "description", "parameters", "metadata", "requires_approval", "worker", "expires_at"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("registry value lacks %q: %s", k, e.Value())
		}
	}

	// An expired entry is ignored.
	stale, _ := json.Marshal(natsjs.RegistryEntry{Name: "stale", Parameters: json.RawMessage(`{"type":"object"}`), Worker: "gone", ExpiresAt: time.Now().Add(-time.Minute)})
	changed := r.Changed()
	if _, err := kv.Put(context.Background(), natsjs.RegistryKey("stale", "gone"), stale); err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, changed, "the stale entry to be seen")
	waitTools(t, r, "approve_me", "echo")

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitTools(t, r, "echo") // still served by w2
	if err := w2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitTools(t, r)
	waitTools(t, filtered)
}

type weatherArgs struct {
	City string `json:"city" jsonschema:"the city"`
}

func TestRemoteToolThroughAgentLoop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	weather := tool.Func("get_weather", "Get the weather of a city.", func(_ context.Context, rc *tool.RunContext, a weatherArgs) (string, error) {
		return "sunny in " + a.City + " for " + rc.ToolCallID, nil
	})
	b.worker(t, worker.Config{ID: "weather-1", Tools: []*tool.Tool{weather}})
	d, am := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	waitTools(t, ts, "get_weather")

	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{ts}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := a.Run(ctx, "What is the weather?", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		t.Fatalf("output %q: %v", res.Output, err)
	}
	if got := out["get_weather"]; !strings.HasPrefix(got, "sunny in a for call_") {
		t.Fatalf("output %q", res.Output)
	}
	if got := testutil.ToFloat64(am.ToolCallsTotal.WithLabelValues("get_weather", "inline", "ok")); got != 1 {
		t.Errorf("tool_calls_total{get_weather,inline,ok} = %v, want 1", got)
	}
}

func TestRemoteToolOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failing := tool.Func("failing", "Fail.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Fail("no luck")
	})
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{failing, jstest.EchoTool("remote:")}})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	waitTools(t, ts, "echo", "failing")
	tools, _ := ts.Tools(context.Background())
	rc := &tool.RunContext{ConversationID: protocol.NewID(), ToolCallID: "call_1"}
	ctx := context.Background()

	v, err := tools[0].Run(ctx, rc, json.RawMessage(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	ret, ok := v.(tool.Return)
	if !ok || string(ret.Value.(json.RawMessage)) != `"remote:hi"` {
		t.Fatalf("echo returned %#v", v)
	}
	_, err = tools[1].Run(ctx, rc, json.RawMessage(`{}`))
	var failed *tool.ToolFailed
	if !errors.As(err, &failed) || failed.Message != "no luck" {
		t.Fatalf("failing returned %v", err)
	}
}

// A remote tool's progress reports reach the agent's events with the task
// ID, while the call runs.
func TestRemoteProgressReachesAgentEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	slow := tool.Func("slow", "Report, then wait.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		progress.Report(ctx, "half way", progress.Fraction(0.5))
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	b.worker(t, worker.Config{ID: "slow-1", Tools: []*tool.Tool{slow}})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	waitTools(t, ts, "slow")

	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{ts}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var seen agent.Event
	var once sync.Once
	_, err = a.Run(ctx, "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventProgress {
			once.Do(func() { seen = e; close(release) })
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, perr := protocol.ParseID(seen.TaskID); perr != nil || seen.Tool != "slow" || seen.Message != "half way" || seen.Fraction == nil || *seen.Fraction != 0.5 || seen.ToolCallID == "" {
		t.Fatalf("progress event %+v", seen)
	}
}

// A remote call's tool_call event names the task the worker runs, and the
// worker runs it under that ID.
func TestRemoteToolCallEventNamesTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seen := make(chan string, 1)
	probe := tool.Func("probe", "Report the task ID.", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		seen <- rc.TaskID
		return "ok", nil
	})
	b.worker(t, worker.Config{ID: "probe-1", Tools: []*tool.Tool{probe}})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	waitTools(t, ts, "probe")
	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{ts}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var calls []agent.Event
	var mu sync.Mutex
	if _, err := a.Run(ctx, "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolCall {
			mu.Lock()
			calls = append(calls, e)
			mu.Unlock()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	ran := offloadtest.WaitOrTimeout(t, seen, "the worker's task ID")
	if len(calls) != 1 || calls[0].TaskID == "" || calls[0].TaskID != ran {
		t.Fatalf("tool_call events %+v, worker ran task %q", calls, ran)
	}
}

package remote_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/internal/benchcall"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// BenchmarkBackgroundRoundTripJetStream is offload-bench's two round trips
// of a remote call on an embedded server, one worker with one slot: "inline"
// is the remote tool's handler (Dispatcher → Worker → back); "background"
// is one agent run per op with BackgroundTools and RemoteToolset.Executor,
// timed (rt-p50-ns) from the model's response holding the call to the
// model request holding its follow-up. The difference between their
// rt-p50-ns is the agent loop's own part. The server runs in this process,
// so a CPU profile holds it too.
func BenchmarkBackgroundRoundTripJetStream(b *testing.B) {
	srv := natstest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lookup := benchcall.Lookup()
	w, err := worker.New(worker.Config{Conn: srv.Conn(b), ID: "bench", Tools: []*tool.Tool{lookup}, Concurrency: 1, Logger: jstest.Logger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(b), Metrics: metrics.NewAgent(prometheus.NewRegistry()), Logger: jstest.Logger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = d.Stop(context.Background()) }()
	rt, err := remote.NewToolset(remote.ToolsetConfig{Conn: srv.Conn(b), Dispatcher: d, Logger: jstest.Logger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()
	var echo *tool.Tool
	for echo == nil {
		changed := rt.Changed()
		if tools, _ := rt.Tools(ctx); len(tools) == 1 {
			echo = tools[0]
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			b.Fatal("the lookup tool never appeared")
		}
	}

	b.Run("inline", func(b *testing.B) {
		rc := &tool.RunContext{ConversationID: protocol.NewID(), RunID: "run", ToolCallID: "c", ToolName: "lookup"}
		spans := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			if _, err := echo.Run(ctx, rc, json.RawMessage(benchcall.Args)); err != nil {
				b.Fatal(err)
			}
			spans = append(spans, time.Since(start))
		}
		reportSpans(b, spans)
	})

	b.Run("background", func(b *testing.B) {
		var mu sync.Mutex
		var sent, seen time.Time
		followUp := func(req *llm.Request) bool { return benchcall.FollowUps(req, "lookup") > 0 }
		call := benchcall.Call()
		model := script.New("bench-background", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
			mu.Lock()
			defer mu.Unlock()
			if len(req.Messages) <= 2 {
				defer func() { sent = time.Now() }()
				return call, nil
			}
			if followUp(req) {
				seen = time.Now()
				return &llm.Response{Parts: []message.Part{message.Text{Content: "done"}}}, nil
			}
			return &llm.Response{Parts: []message.Part{message.Text{Content: "waiting"}}}, nil
		})
		a, err := agent.New(agent.Config{
			Model:        model,
			Toolsets:     []tool.Toolset{rt},
			Capabilities: []agent.Capability{background.Tools(background.Config{Tools: background.SelectNames("lookup"), Executor: rt.Executor(nil)})},
			Limits:       agent.UsageLimits{Requests: agent.Unlimited()},
		})
		if err != nil {
			b.Fatal(err)
		}
		spans := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		for b.Loop() {
			res, err := a.Run(ctx, "look it up", nil)
			if err != nil {
				b.Fatal(err)
			}
			if res.Output != "done" {
				b.Fatalf("run ended with %q", res.Output)
			}
			mu.Lock()
			spans = append(spans, seen.Sub(sent))
			mu.Unlock()
		}
		reportSpans(b, spans)
	})
}

// reportSpans reports the median and 99th percentile of spans.
func reportSpans(b *testing.B, spans []time.Duration) {
	b.StopTimer()
	if len(spans) == 0 {
		return
	}
	slices.Sort(spans)
	b.ReportMetric(float64(spans[len(spans)/2].Nanoseconds()), "rt-p50-ns")
	b.ReportMetric(float64(spans[len(spans)*99/100].Nanoseconds()), "rt-p99-ns")
}

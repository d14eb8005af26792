package background_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/benchcall"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// BenchmarkBackgroundRoundTrip measures the agent loop's own part of a
// background call's round trip, as offload-bench's "offload background"
// row runs it but with the in-process executor and a no-op tool (its
// arguments validated, not decoded): one agent
// run per op, whose model calls the tool in the background, answers
// "waiting" to the acknowledgement and "done" to the follow-up. ns/op and
// allocs/op are the whole run's; rt-ns/op is the mean time from the model's
// response holding the call to the model request holding the follow-up,
// the span offload-bench times; pre-p50-ns is the median time from that
// response to the tool's start (the step before the dispatch), and
// post-p50-ns from the tool's return to the follow-up's request.
//
// In "arrives-while-waiting" the tool finishes once the model has answered
// "waiting", so the follow-up reaches a loop idle in its wait for the live
// task, as a worker's result does in offload-bench. In "arrives-first" the
// tool returns at once and the follow-up usually goes with the request
// after the acknowledgement's.
func BenchmarkBackgroundRoundTrip(b *testing.B) {
	b.Run("arrives-while-waiting", func(b *testing.B) { benchBackgroundRoundTrip(b, true) })
	b.Run("arrives-first", func(b *testing.B) { benchBackgroundRoundTrip(b, false) })
}

// benchRound is one op's state: the run's gate (closed once the model
// answered "waiting") and the span's ends.
type benchRound struct {
	gate           chan struct{}
	gateOnce       sync.Once
	sent, seen     time.Time
	started, ended time.Time // the tool's run
}

func benchBackgroundRoundTrip(b *testing.B, gated bool) {
	var mu sync.Mutex
	var cur *benchRound
	round := func() *benchRound {
		mu.Lock()
		defer mu.Unlock()
		return cur
	}
	// The tool's arguments are validated against the schema offload-bench's
	// typed tool has, as the loop does for every call; the handler does not
	// decode them (a worker does that, outside the loop).
	typed := tool.Func("lookup", "Looks rows up.", func(context.Context, *tool.RunContext, benchcall.LookupArgs) (string, error) { return "", nil })
	lookup := tool.MustNew(typed.Def(), func(ctx context.Context, _ *tool.RunContext, _ json.RawMessage) (any, error) {
		round().started = time.Now()
		defer func() { round().ended = time.Now() }()
		if gated {
			select {
			case <-round().gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return benchcall.Output, nil
	})
	followUp := func(req *llm.Request) bool { return benchcall.FollowUps(req, "lookup") > 0 }
	call := benchcall.Call()
	waiting := &llm.Response{Parts: []message.Part{message.Text{Content: "waiting"}}}
	done := &llm.Response{Parts: []message.Part{message.Text{Content: "done"}}}
	model := script.New("bench-background", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		rd := round()
		if len(req.Messages) <= 2 { // system prompt and user prompt
			defer func() { rd.sent = time.Now() }()
			return call, nil
		}
		if followUp(req) {
			rd.seen = time.Now()
			return done, nil
		}
		rd.gateOnce.Do(func() { close(rd.gate) })
		return waiting, nil
	})
	a, err := agent.New(agent.Config{
		Model:        model,
		Toolsets:     []tool.Toolset{tool.MustSet(lookup)},
		Capabilities: []agent.Capability{background.Tools(background.Config{Tools: background.SelectNames("lookup")})},
		Limits:       agent.UsageLimits{Requests: agent.Unlimited()},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	spans := make([]time.Duration, 0, b.N)
	var pre, post []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rd := &benchRound{gate: make(chan struct{})}
		mu.Lock()
		cur = rd
		mu.Unlock()
		res, err := a.Run(ctx, "look it up", nil)
		if err != nil {
			b.Fatal(err)
		}
		if res.Output != "done" {
			b.Fatalf("run ended with %q", res.Output)
		}
		spans = append(spans, rd.seen.Sub(rd.sent))
		pre = append(pre, rd.started.Sub(rd.sent))
		post = append(post, rd.seen.Sub(rd.ended))
	}
	b.StopTimer()
	if len(spans) == 0 {
		return
	}
	var sum time.Duration
	for _, s := range spans {
		sum += s
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(spans)), "rt-ns/op")
	slices.Sort(spans)
	b.ReportMetric(float64(spans[len(spans)/2].Nanoseconds()), "rt-p50-ns")
	b.ReportMetric(float64(spans[len(spans)*99/100].Nanoseconds()), "rt-p99-ns")
	slices.Sort(pre)
	slices.Sort(post)
	b.ReportMetric(float64(pre[len(pre)/2].Nanoseconds()), "pre-p50-ns")
	b.ReportMetric(float64(post[len(post)/2].Nanoseconds()), "post-p50-ns")
}

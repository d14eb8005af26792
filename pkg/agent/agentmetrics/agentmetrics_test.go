package agentmetrics_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/agentmetrics"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/tool"
)

func TestAgentMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	am := metrics.NewAgent(reg)
	n := 0
	m := script.New("scripted", func(context.Context, *llm.Request) (*llm.Response, error) {
		n++
		switch n {
		case 1:
			return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "gated", ToolCallID: "c1", Args: "{}"}}, Usage: message.Usage{InputTokens: 10, OutputTokens: 3}}, nil
		case 2:
			return &llm.Response{Parts: []message.Part{message.Text{Content: "done"}}, Usage: message.Usage{InputTokens: 20, OutputTokens: 1}}, nil
		}
		return nil, errors.New("model down")
	})
	gated := tool.Func("gated", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ok", nil }, tool.NeedsApproval())
	approve := agentmetrics.TimeApprovals(am, func(_ context.Context, _ *tool.RunContext, r *deferred.Requests) (*deferred.Results, error) {
		return &deferred.Results{Approvals: map[string]any{r.Approvals[0].ToolCallID: true}}, nil
	})
	a, err := agent.New(agent.Config{
		Model:        agentmetrics.Model(m, am),
		Toolsets:     []tool.Toolset{tool.MustSet(gated)},
		Capabilities: []agent.Capability{agentmetrics.Runs(am), agent.HandleDeferredToolCalls(approve)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(t.Context(), "again", nil); err == nil {
		t.Fatal("want the model's error")
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"runs finished", testutil.ToFloat64(am.RunsTotal.WithLabelValues("finished")), 1},
		{"runs failed", testutil.ToFloat64(am.RunsTotal.WithLabelValues("failed")), 1},
		{"requests ok", testutil.ToFloat64(am.ModelRequestsTotal.WithLabelValues("scripted", "ok")), 2},
		{"requests error", testutil.ToFloat64(am.ModelRequestsTotal.WithLabelValues("scripted", "error")), 1},
		{"input tokens", testutil.ToFloat64(am.TokensTotal.WithLabelValues("scripted", metrics.DirectionInput)), 30},
		{"output tokens", testutil.ToFloat64(am.TokensTotal.WithLabelValues("scripted", metrics.DirectionOutput)), 4},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(am, "offload_approval_wait_seconds"); n != 1 {
		t.Errorf("approval wait series = %d", n)
	}
	if problems, err := testutil.CollectAndLint(am); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
	out, err := testutil.GatherAndCount(reg)
	if err != nil || out == 0 {
		t.Errorf("gather: %d %v", out, err)
	}

}

// A run that RunContext.Cancel ends is counted with the status its final
// event reports, also when the cancellation reached a tool through its
// context first.
func TestRunsCountsACancelledRunAsItsFinalEventSays(t *testing.T) {
	t.Parallel()
	am := metrics.NewAgent(prometheus.NewRegistry())
	m := script.New("scripted", func(context.Context, *llm.Request) (*llm.Response, error) {
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "stop", ToolCallID: "c1", Args: "{}"}}}, nil
	})
	stop := tool.Func("stop", "", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		rc.Cancel()
		<-ctx.Done()
		return "", ctx.Err()
	})
	a, err := agent.New(agent.Config{
		Model:        m,
		Toolsets:     []tool.Toolset{tool.MustSet(stop)},
		Capabilities: []agent.Capability{agentmetrics.Runs(am)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var final *agent.Final
	_, err = a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventFinal {
			final = e.Final
		}
	}})
	if !errors.Is(err, agent.ErrRunCancelled) || final == nil {
		t.Fatalf("err = %v, final %+v", err, final)
	}
	if got := testutil.ToFloat64(am.RunsTotal.WithLabelValues(string(final.Status))); got != 1 {
		t.Errorf("runs{outcome=%q} = %v, want 1 (interrupted: %v)", final.Status, got, testutil.ToFloat64(am.RunsTotal.WithLabelValues("interrupted")))
	}
}

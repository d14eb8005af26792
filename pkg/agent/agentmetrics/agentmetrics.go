// Package agentmetrics records an agent's Prometheus metrics (SPEC §7) into
// a [metrics.Agent] set: [Model] wraps a model to count its requests, their
// duration and tokens; [Runs] is a capability counting runs by outcome;
// [TimeApprovals] observes how long inline approval handlers take. Calls of
// remote tools are counted by the natsjs Dispatcher itself.
package agentmetrics

import (
	"context"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/tool"
)

// Model returns m instrumented: offload_model_requests_total{model,outcome}
// (outcome "ok" or "error"), offload_model_request_duration_seconds{model}
// and offload_tokens_total{model,direction}.
func Model(m llm.Model, am *metrics.Agent) llm.Model { return &model{m: m, am: am} }

type model struct {
	m  llm.Model
	am *metrics.Agent
}

func (x *model) Name() string { return x.m.Name() }

func (x *model) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	start := time.Now()
	resp, err := x.m.Generate(ctx, req)
	x.observe(start, resp, err)
	return resp, err
}

func (x *model) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	start := time.Now()
	resp, err := x.m.Stream(ctx, req, onDelta)
	x.observe(start, resp, err)
	return resp, err
}

func (x *model) observe(start time.Time, resp *llm.Response, err error) {
	name := x.m.Name()
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	x.am.ModelRequestsTotal.WithLabelValues(name, outcome).Inc()
	x.am.ModelRequestDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if resp != nil {
		x.am.TokensTotal.WithLabelValues(name, metrics.DirectionInput).Add(float64(resp.Usage.InputTokens))
		x.am.TokensTotal.WithLabelValues(name, metrics.DirectionOutput).Add(float64(resp.Usage.OutputTokens))
	}
}

// Runs returns a capability counting runs by outcome in
// offload_runs_total{outcome}: finished, paused, failed or interrupted.
func Runs(am *metrics.Agent) agent.Capability { return runs{am: am} }

type runs struct{ am *metrics.Agent }

// WrapRun implements agent.RunWrapper.
func (r runs) WrapRun(ctx context.Context, _ *agent.RunInfo, next func(context.Context) (*agent.Result, error)) (*agent.Result, error) {
	res, err := next(ctx)
	r.am.RunsTotal.WithLabelValues(string(agent.StatusOf(res, err))).Inc()
	return res, err
}

// TimeApprovals wraps an inline approval handler so that the time each
// batch of approvals waits for it is observed in
// offload_approval_wait_seconds (once per approval decided).
func TimeApprovals(am *metrics.Agent, fn agent.DeferredHandlerFunc) agent.DeferredHandlerFunc {
	return func(ctx context.Context, rc *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error) {
		start := time.Now()
		res, err := fn(ctx, rc, reqs)
		if res != nil {
			wait := time.Since(start).Seconds()
			for range res.Approvals {
				am.ApprovalWait.Observe(wait)
			}
		}
		return res, err
	}
}

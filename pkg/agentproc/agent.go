package agentproc

import (
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/agentmetrics"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultInstructions are an agent's instructions when its spec gives
// none.
const DefaultInstructions = "You are a helpful assistant. Use the tools when they help."

// AgentOptions are what makes one agent of a process.
type AgentOptions struct {
	// Spec is the agent's spec (nil: none): its instructions, token
	// limit, capabilities, external tools and request settings.
	Spec *agentspec.Spec
	// Model is the agent's model. Required.
	Model llm.Model
	// Toolset offers its tools. Required.
	Toolset tool.Toolset
	// Executor runs its background calls. Defaults to in-process.
	Executor background.Executor
	// Stream streams the model's responses.
	Stream bool
	// Limits are its usage limits (the spec's, or the flags').
	Limits agent.UsageLimits
	// Capabilities are added after the runs' metrics (with Metrics),
	// before the spec's.
	Capabilities []agent.Capability
	// Metrics, if set, records the model's requests and the runs.
	Metrics *metrics.Agent
	// TracerProvider records the run's spans (SPEC §14); nil records none.
	TracerProvider trace.TracerProvider
	// Logger receives the agent's logs.
	Logger *slog.Logger
}

// AgentConfig is the configuration of the agent of o: the one place an
// agent.Config is built, for `agent run`, `resume` and every agent of
// `agent serve`. Deferred calls are allowed (a run pauses on them);
// BackgroundTools is on (SPEC §6.1), the spec choosing its tools. An
// error is the spec's: it cannot be applied.
func AgentConfig(o AgentOptions) (agent.Config, error) {
	if o.Model == nil || o.Toolset == nil {
		return agent.Config{}, fmt.Errorf("agentproc: an agent needs a model and a toolset")
	}
	if o.Executor == nil {
		o.Executor = background.InProcessExecutor{}
	}
	model, caps := o.Model, o.Capabilities
	if o.Metrics != nil {
		model, caps = agentmetrics.Model(o.Model, o.Metrics), append([]agent.Capability{agentmetrics.Runs(o.Metrics)}, caps...)
	}
	cfg := agent.Config{
		Model:          model,
		Toolsets:       []tool.Toolset{o.Toolset},
		Instructions:   DefaultInstructions,
		AllowDeferred:  true,
		Stream:         o.Stream,
		Settings:       o.Spec.Settings(),
		Logger:         o.Logger,
		Limits:         o.Limits,
		TracerProvider: o.TracerProvider,
		Capabilities:   caps,
	}
	if err := o.Spec.Configure(&cfg, background.Config{Executor: o.Executor, Logger: o.Logger}); err != nil {
		return agent.Config{}, err
	}
	return cfg, nil
}

// Agent returns o as an agent of p: its metrics, tracer and logger the
// process's, its background calls run by the remote client's executor
// (when p has a client and o names none).
func (p *Process) Agent(o AgentOptions) AgentOptions {
	o.Metrics, o.TracerProvider, o.Logger = p.opts.Metrics, p.opts.TracerProvider, p.log
	if o.Executor == nil && p.Client != nil {
		o.Executor = p.Client.Executor()
	}
	return o
}

// SpecLimits are the usage limits a spec sets (limits:).
func SpecLimits(s *agentspec.Spec) agent.UsageLimits {
	var l agent.UsageLimits
	if s == nil || s.Limits == nil {
		return l
	}
	if s.Limits.Requests != nil {
		l.Requests = agent.Limit(*s.Limits.Requests)
	}
	if s.Limits.ToolCalls != nil {
		l.ToolCalls = agent.Limit(*s.Limits.ToolCalls)
	}
	return l
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Label values of offload_tokens_total's direction label.
const (
	// DirectionInput counts prompt (input) tokens.
	DirectionInput = "input"
	// DirectionOutput counts completion (output) tokens.
	DirectionOutput = "output"
)

// RefuseReason is the reason label of offload_refused_messages_total: why
// the agent refused an incoming result or decision (SPEC §5.5).
type RefuseReason string

// The reasons a message is refused.
const (
	// RefuseUnknownTask: the message names a task the conversation's pending
	// record does not hold.
	RefuseUnknownTask RefuseReason = "unknown_task"
	// RefuseDuplicate: the task was already answered (first wins).
	RefuseDuplicate RefuseReason = "duplicate"
	// RefuseMalformed: the payload is not valid JSON or misses required fields.
	RefuseMalformed RefuseReason = "malformed"
	// RefuseWrongConversation: the task belongs to another conversation.
	RefuseWrongConversation RefuseReason = "wrong_conversation"
	// RefuseWrongKind: the message does not fit the call (e.g. a decision for
	// a call that awaits a result).
	RefuseWrongKind RefuseReason = "wrong_kind"
	// RefuseOversize: the payload exceeds the size limit.
	RefuseOversize RefuseReason = "oversize"
	// RefuseLate: the call was already cancelled or otherwise closed.
	RefuseLate RefuseReason = "late"
	// RefuseWrongTool: a result's subject names another tool than the
	// pending task's (the last token of <prefix>.result.<conv>.<task>.<tool>):
	// a worker answering a task of a tool it does not serve.
	RefuseWrongTool RefuseReason = "wrong_tool"
	// RefuseWrongAttempt: a result's attempt is not the pending dispatch's
	// (a result of an earlier dispatch of the same task, such as its
	// approval_required deferral, arriving again).
	RefuseWrongAttempt RefuseReason = "wrong_attempt"
	// RefuseStale: a decision's args_digest is not that of the call's
	// arguments as pending (SPEC §12, binding).
	RefuseStale RefuseReason = "stale"
	// RefuseDuplicateIdentity: a second approval by the same identity of
	// a call that needs a quorum (SPEC §12).
	RefuseDuplicateIdentity RefuseReason = "duplicate_identity"
	// RefuseUnauthenticated: an approval of a call that needs a quorum
	// without an authenticated identity (SPEC §12).
	RefuseUnauthenticated RefuseReason = "unauthenticated"
	// RefuseInvalidTimeout: a decision by "timeout" (or written by the
	// expiries stream) that is not the call's timeout as its approval
	// policy sets it, or stored before it (SPEC §12).
	RefuseInvalidTimeout RefuseReason = "invalid_timeout"
)

// RefuseReasons returns every [RefuseReason], in a fixed order.
func RefuseReasons() []RefuseReason {
	return []RefuseReason{
		RefuseUnknownTask, RefuseDuplicate, RefuseMalformed, RefuseWrongConversation,
		RefuseWrongKind, RefuseOversize, RefuseLate, RefuseWrongTool, RefuseWrongAttempt, RefuseStale,
		RefuseDuplicateIdentity, RefuseUnauthenticated, RefuseInvalidTimeout,
	}
}

// Agent is the agent's metric set. Build it with [NewAgent]; its fields are
// safe for concurrent use. Agent is a [prometheus.Collector] of all its
// metrics.
type Agent struct {
	// RunsTotal counts finished runs: offload_runs_total{outcome}.
	RunsTotal *prometheus.CounterVec
	// ModelRequestsTotal counts model requests:
	// offload_model_requests_total{model,outcome}.
	ModelRequestsTotal *prometheus.CounterVec
	// ModelRequestDuration observes model request latency in seconds:
	// offload_model_request_duration_seconds{model}.
	ModelRequestDuration *prometheus.HistogramVec
	// TokensTotal counts tokens by model and direction ([DirectionInput],
	// [DirectionOutput]): offload_tokens_total{model,direction}.
	TokensTotal *prometheus.CounterVec
	// ToolCallsTotal counts finished tool calls:
	// offload_tool_calls_total{tool,mode,outcome}.
	ToolCallsTotal *prometheus.CounterVec
	// PendingCalls is the number of calls dispatched and not yet answered:
	// offload_pending_calls{mode}. It counts this process's dispatches; a
	// set built with [AgentOptions.StoreWidePending] keeps it but does not
	// export it.
	PendingCalls *prometheus.GaugeVec
	// ToolCallDuration observes the time from dispatch to result in seconds:
	// offload_tool_call_duration_seconds{tool,mode}.
	ToolCallDuration *prometheus.HistogramVec
	// ApprovalWait observes the time a call waited for a person's decision in
	// seconds: offload_approval_wait_seconds.
	ApprovalWait prometheus.Histogram
	// RefusedMessagesTotal counts refused results and decisions by
	// [RefuseReason]: offload_refused_messages_total{reason}. Every reason is
	// exported from the start, at zero.
	RefusedMessagesTotal *prometheus.CounterVec
	// RegistryClashesTotal counts the registry entries that advertise a
	// tool otherwise than the agent's policy for it (SPEC §5.4), once per
	// entry revision and difference: offload_registry_clashes_total{tool,field},
	// field one of requires_approval, description, parameters, external.
	RegistryClashesTotal *prometheus.CounterVec
	// PublishRefusedTotal counts the agent's publishes a stream refused at
	// one of its limits (nothing stored), by stream and limit (max_msg_size,
	// max_bytes, max_msgs, max_msgs_per_subject, storage):
	// offload_publish_refused_total{stream,limit}.
	PublishRefusedTotal *prometheus.CounterVec

	all collectors
}

var _ prometheus.Collector = (*Agent)(nil)

// AgentOptions are the choices of [NewAgentWith].
type AgentOptions struct {
	// StoreWidePending leaves the per-process gauge
	// offload_pending_calls{mode} out of the exported set (it is still
	// built and kept, so code that writes it works): a process that
	// reports the pending calls of a whole store registers the store-wide
	// offload_pending_calls{kind} under that name instead (agent serve:
	// convstore.PendingCollector), and one registry cannot hold two
	// metrics of one name with different labels.
	StoreWidePending bool
}

// NewAgent builds the agent's metric set and registers it with reg. A nil
// reg builds a working set that is not registered. NewAgent panics if the
// metrics conflict with metrics already registered with reg (a programming
// error, as with promauto); to get an error instead, call NewAgent(nil) and
// then reg.Register.
func NewAgent(reg prometheus.Registerer) *Agent { return NewAgentWith(reg, AgentOptions{}) }

// NewAgentWith is [NewAgent] with options.
func NewAgentWith(reg prometheus.Registerer, o AgentOptions) *Agent {
	a := &Agent{
		RunsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_runs_total",
			Help: "Total number of agent runs finished, by outcome.",
		}, []string{"outcome"}),
		ModelRequestsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_model_requests_total",
			Help: "Total number of requests sent to a language model, by model and outcome.",
		}, []string{"model", "outcome"}),
		ModelRequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "offload_model_request_duration_seconds",
			Help:    "Latency of language model requests in seconds, by model.",
			Buckets: modelBuckets,
		}, []string{"model"}),
		TokensTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_tokens_total",
			Help: "Total number of tokens used, by model and direction (input or output).",
		}, []string{"model", "direction"}),
		ToolCallsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_tool_calls_total",
			Help: "Total number of tool calls finished, by tool, execution mode and outcome.",
		}, []string{"tool", "mode", "outcome"}),
		PendingCalls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "offload_pending_calls",
			Help: "Number of tool calls dispatched and not yet answered, by execution mode.",
		}, []string{"mode"}),
		ToolCallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "offload_tool_call_duration_seconds",
			Help:    "Time from a tool call's dispatch to its result in seconds, by tool and execution mode.",
			Buckets: durationBuckets,
		}, []string{"tool", "mode"}),
		ApprovalWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "offload_approval_wait_seconds",
			Help:    "Time a tool call waited for a person's approval decision in seconds.",
			Buckets: approvalBuckets,
		}),
		RefusedMessagesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_refused_messages_total",
			Help: "Total number of incoming results and decisions refused, by reason.",
		}, []string{"reason"}),
		RegistryClashesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_registry_clashes_total",
			Help: "Total number of registry entry revisions that advertise a tool otherwise than the agent's policy for it, by tool and field.",
		}, []string{"tool", "field"}),
		PublishRefusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_publish_refused_total",
			Help: "Total number of the agent's publishes a stream refused at one of its limits, by stream and limit.",
		}, []string{"stream", "limit"}),
	}
	for _, r := range RefuseReasons() {
		a.RefusedMessagesTotal.WithLabelValues(string(r))
	}
	a.all = collectors{
		a.RunsTotal, a.ModelRequestsTotal, a.ModelRequestDuration, a.TokensTotal,
		a.ToolCallsTotal, a.ToolCallDuration, a.ApprovalWait,
		a.RefusedMessagesTotal, a.RegistryClashesTotal, a.PublishRefusedTotal,
	}
	if !o.StoreWidePending {
		a.all = append(a.all, a.PendingCalls)
	}
	if reg != nil {
		reg.MustRegister(a)
	}
	return a
}

// Refused counts one message refused for reason.
func (a *Agent) Refused(reason RefuseReason) {
	a.RefusedMessagesTotal.WithLabelValues(string(reason)).Inc()
}

// RegistryClash counts one registry entry revision whose field departs
// from the agent's policy for tool.
func (a *Agent) RegistryClash(tool, field string) {
	a.RegistryClashesTotal.WithLabelValues(tool, field).Inc()
}

// PublishRefused counts one publish that stream refused at limit. A nil
// *Agent counts nothing.
func (a *Agent) PublishRefused(stream, limit string) {
	if a == nil {
		return
	}
	a.PublishRefusedTotal.WithLabelValues(stream, limit).Inc()
}

// Describe implements [prometheus.Collector].
func (a *Agent) Describe(ch chan<- *prometheus.Desc) { a.all.describe(ch) }

// Collect implements [prometheus.Collector].
func (a *Agent) Collect(ch chan<- prometheus.Metric) { a.all.collect(ch) }

package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// What an approval's timeout decides (SPEC §12, on_timeout).
const (
	OnTimeoutDeny    = "deny"
	OnTimeoutApprove = "approve"
	// OnTimeoutFail ends the run that reads the timeout's decision with
	// a *deferred.ApprovalTimeoutError naming the call.
	OnTimeoutFail = protocol.OnTimeoutFail
)

// TimeoutDecider is the by of the decision an approval's timeout writes.
const TimeoutDecider = protocol.TimeoutDecider

// ApprovalPolicy is an approval's expiry (SPEC §12): when no decision is
// stored within Timeout of the announcement, the server writes the
// decision OnTimeout says.
type ApprovalPolicy struct {
	// Timeout is how long the call waits for a person. Positive, unless
	// only Required is set.
	Timeout time.Duration
	// OnTimeout is OnTimeoutDeny (the default), OnTimeoutApprove or
	// OnTimeoutFail.
	OnTimeout string
	// Message, for a denial, is told to the model.
	Message string
	// Required, when above 1, is the quorum (SPEC §12): how many distinct
	// authenticated identities must approve a call before it runs.
	Required int
}

// ParseApprovalPolicy reads an approval's expiry from its map form
// ({timeout: "30m", on_timeout: deny|approve|fail, message, required}, a
// tool's metadata "approval" or a spec's approval); nil for nil.
func ParseApprovalPolicy(m map[string]any) (*ApprovalPolicy, error) {
	if m == nil {
		return nil, nil
	}
	p := &ApprovalPolicy{OnTimeout: OnTimeoutDeny}
	for k, v := range m {
		if k == "required" {
			n, ok := quorumOf(v)
			if !ok {
				return nil, fmt.Errorf("approval.required: %v is not a positive whole number", v)
			}
			p.Required = n
			continue
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("approval.%s: not a string", k)
		}
		switch k {
		case "timeout":
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("approval.timeout: %q is not a positive duration", s)
			}
			p.Timeout = d
		case "on_timeout":
			if s != OnTimeoutDeny && s != OnTimeoutApprove && s != OnTimeoutFail {
				return nil, fmt.Errorf("approval.on_timeout: %q is not deny, approve or fail", s)
			}
			p.OnTimeout = s
		case "message":
			p.Message = s
		default:
			return nil, fmt.Errorf("approval: unknown key %q (timeout, on_timeout, message, required)", k)
		}
	}
	if p.Timeout <= 0 && p.Required == 0 {
		return nil, errors.New("approval: a timeout or a quorum (required) is required")
	}
	return p, nil
}

// quorumOf reads approval.required: a positive whole number (an int from
// a spec, a float64 from a tool's JSON metadata).
func quorumOf(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, n > 0
	case float64:
		return int(n), n > 0 && n == float64(int(n))
	}
	return 0, false
}

// Decision is the decision the server writes at the timeout: the only
// one a reader admits as the timeout of a call deferred under p
// (conversation.TimeoutDecision of [ApprovalPolicy.Expiry]).
func (p *ApprovalPolicy) Decision() protocol.Decision {
	return conversation.TimeoutDecision(deferred.Expiry{After: p.Timeout, OnTimeout: p.OnTimeout, Message: p.Message})
}

// Expiry is p's timeout as the calls deferred under it save it
// (deferred.PendingTask.Expiry); nil when p sets none.
func (p *ApprovalPolicy) Expiry() *deferred.Expiry {
	if p == nil || p.Timeout <= 0 {
		return nil
	}
	return &deferred.Expiry{After: p.Timeout, OnTimeout: p.OnTimeout, Message: p.Message}
}

// ResolveApprovalPolicy returns the approval policy of toolName: the
// metadata "approval" of the tool of that name in tools (when tools is
// set and offers it), else fallback (the agent's spec's); nil when neither
// sets one. Invalid metadata is logged on log and ignored. It is the one
// resolution of `agent run`, `agent resume` and `agent serve`.
func ResolveApprovalPolicy(ctx context.Context, tools tool.Toolset, fallback *ApprovalPolicy, toolName string, log *slog.Logger) *ApprovalPolicy {
	if tools == nil {
		return fallback
	}
	all, err := tools.Tools(ctx)
	if err != nil {
		return fallback
	}
	i := slices.IndexFunc(all, func(t *tool.Tool) bool { return t.Name == toolName })
	if i < 0 {
		return fallback
	}
	m, ok := all[i].Metadata["approval"].(map[string]any)
	if !ok {
		return fallback
	}
	p, err := ParseApprovalPolicy(m)
	if err != nil {
		if log != nil {
			log.WarnContext(ctx, "tool metadata approval ignored", slog.String("tool", toolName), slog.Any("error", err))
		}
		return fallback
	}
	return p
}

// ApprovalPolicies are the approval policies of one agent's tools (SPEC
// §12): each tool's metadata "approval", else Default (the spec's
// approval:), as [ResolveApprovalPolicy] resolves them, at each question
// (a tool advertised after the start counts). `agent run`, `agent
// resume` and `agent serve` (per agent) ask them.
type ApprovalPolicies struct {
	// Tools are the agent's tools; nil: Default for every tool.
	Tools tool.Toolset
	// Default is the spec's approval policy; nil when it sets none.
	Default *ApprovalPolicy
	// Logger receives the tools' invalid metadata.
	Logger *slog.Logger
}

// Of returns the approval policy of toolName; nil when none is set.
func (p ApprovalPolicies) Of(ctx context.Context, toolName string) *ApprovalPolicy {
	return ResolveApprovalPolicy(ctx, p.Tools, p.Default, toolName, p.Logger)
}

// Expiry returns the approval policy of toolName when it sets a timeout;
// nil otherwise.
func (p ApprovalPolicies) Expiry(ctx context.Context, toolName string) *ApprovalPolicy {
	if pol := p.Of(ctx, toolName); pol != nil && pol.Timeout > 0 {
		return pol
	}
	return nil
}

// Quorum returns how many distinct approvers the calls of toolName need
// (approval.required; 0: one decision decides): the Config.Quorum of a
// session.
func (p ApprovalPolicies) Quorum(ctx context.Context, toolName string) int {
	if pol := p.Of(ctx, toolName); pol != nil {
		return pol.Required
	}
	return 0
}

// AnyTimeout reports whether Default or the policy of a tool offered now
// sets an approval timeout.
func (p ApprovalPolicies) AnyTimeout(ctx context.Context) bool {
	if p.Default != nil && p.Default.Timeout > 0 {
		return true
	}
	if p.Tools == nil {
		return false
	}
	tools, err := p.Tools.Tools(ctx)
	if err != nil {
		return false
	}
	for _, t := range tools {
		if p.Expiry(ctx, t.Name) != nil {
			return true
		}
	}
	return false
}

// Expirer schedules the decision the server writes on task's decision
// subject at when, unless one is scheduled already
// (convstore.Announcer.Expire).
type Expirer interface {
	Expire(ctx context.Context, conv, task string, at time.Time, d protocol.Decision) error
}

// ExpiringAnnouncer is an Announcer that schedules, with each approval it
// announces whose policy has a timeout, the timeout's decision (SPEC §12):
// the server writes it at the timeout whether or not any agent runs then.
type ExpiringAnnouncer struct {
	Announcer
	// Expirer schedules the timeouts' decisions.
	Expirer Expirer
	// Policy returns the approval policy of the calls of toolName in
	// conversation conv; nil, or one without a timeout, schedules nothing.
	Policy func(ctx context.Context, conv, toolName string) *ApprovalPolicy
}

// Announce implements Announcer: the announcement, then the timeouts'
// scheduled decisions.
func (e ExpiringAnnouncer) Announce(ctx context.Context, rec *deferred.PendingRecord) error {
	if err := e.Announcer.Announce(ctx, rec); err != nil || rec == nil {
		return err
	}
	now := time.Now()
	for _, t := range rec.Tasks {
		if t.Kind != deferred.KindApproval {
			continue
		}
		p := e.Policy(ctx, rec.ConversationID, t.Tool)
		if p == nil || p.Timeout <= 0 {
			continue
		}
		if err := e.Expirer.Expire(ctx, rec.ConversationID, t.TaskID, now.Add(p.Timeout), p.Decision()); err != nil {
			return fmt.Errorf("session: schedule the timeout of task %s: %w", t.TaskID, err)
		}
	}
	return nil
}

package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
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
const TimeoutDecider = "timeout"

// ApprovalPolicy is an approval's expiry (SPEC §12): when no decision is
// stored within Timeout of the announcement, the server writes the
// decision OnTimeout says.
type ApprovalPolicy struct {
	// Timeout is how long the call waits for a person. Positive.
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
// ({timeout: "30m", on_timeout: deny|approve|fail, message}, a tool's
// metadata "approval" or a spec's approval); nil for nil.
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

// Decision is the decision the server writes at the timeout.
func (p *ApprovalPolicy) Decision() protocol.Decision {
	d := protocol.Decision{Approved: p.OnTimeout == OnTimeoutApprove, By: TimeoutDecider, Reason: protocol.ReasonExpired, OnTimeout: p.OnTimeout}
	if !d.Approved {
		d.Message = p.Message
	}
	return d
}

// Expirer schedules the decision the server writes on task's decision
// subject at when, unless one is scheduled already
// (convstore.Announcer.Expire).
type Expirer interface {
	Expire(ctx context.Context, conv, task string, at time.Time, d protocol.Decision) error
}

// policy returns the expiry of the approvals of toolName for the agent
// named agentName (see approvalPolicy); nil when it sets no timeout.
func (s *Service) policy(ctx context.Context, agentName, toolName string) *ApprovalPolicy {
	if p := s.approvalPolicy(ctx, agentName, toolName); p != nil && p.Timeout > 0 {
		return p
	}
	return nil
}

// quorum returns how many distinct approvers the calls of toolName need
// for the agent named agentName (0: one decision decides).
func (s *Service) quorum(ctx context.Context, agentName, toolName string) int {
	if p := s.approvalPolicy(ctx, agentName, toolName); p != nil {
		return p.Required
	}
	return 0
}

// approvalPolicy returns the approval policy of toolName for the agent
// named agentName: the tool's metadata "approval", else the agent's
// Approval; nil when neither sets one.
func (s *Service) approvalPolicy(ctx context.Context, agentName, toolName string) *ApprovalPolicy {
	a, ok := s.agents[agentName]
	if !ok {
		return nil
	}
	if a.Tools != nil {
		if tools, err := a.Tools.Tools(ctx); err == nil {
			if i := slices.IndexFunc(tools, func(t *tool.Tool) bool { return t.Name == toolName }); i >= 0 {
				if m, ok := tools[i].Metadata["approval"].(map[string]any); ok {
					p, err := ParseApprovalPolicy(m)
					if err != nil {
						s.log.Warn("tool metadata approval ignored", slog.String("tool", toolName), slog.Any("error", err))
					} else {
						return p
					}
				}
			}
		}
	}
	return a.Approval
}

// expiringAnnouncer is the sessions' announcer of a service with an
// Expirer: each approval it announces whose policy has a timeout gets its
// timeout decision scheduled with the announcement.
type expiringAnnouncer struct {
	session.Announcer
	svc *Service
}

// Announce implements session.Announcer.
func (e expiringAnnouncer) Announce(ctx context.Context, rec *deferred.PendingRecord) error {
	if err := e.Announcer.Announce(ctx, rec); err != nil || rec == nil {
		return err
	}
	r := e.svc.live(rec.ConversationID)
	if r == nil {
		return nil
	}
	now := time.Now()
	for _, t := range rec.Tasks {
		if t.Kind != deferred.KindApproval {
			continue
		}
		p := e.svc.policy(ctx, r.agent, t.Tool)
		if p == nil {
			continue
		}
		if err := e.svc.cfg.Expirer.Expire(ctx, rec.ConversationID, t.TaskID, now.Add(p.Timeout), p.Decision()); err != nil {
			return fmt.Errorf("serve: schedule the timeout of task %s: %w", t.TaskID, err)
		}
	}
	return nil
}

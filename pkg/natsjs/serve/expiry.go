package serve

import (
	"context"

	"github.com/offload-dev/offload/pkg/session"
)

// The approvals' expiry and quorum (SPEC §12) are session's
// (session.ApprovalPolicy, resolved by session.ResolveApprovalPolicy, the
// timeouts scheduled by session.ExpiringAnnouncer), shared with `agent
// run` and `agent resume`; here, which agent's policy applies.

// policy returns the expiry of the approvals of toolName for the agent
// named agentName (see approvalPolicy); nil when it sets no timeout.
func (s *Service) policy(ctx context.Context, agentName, toolName string) *session.ApprovalPolicy {
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
// Approval; nil when neither sets one (session.ResolveApprovalPolicy).
func (s *Service) approvalPolicy(ctx context.Context, agentName, toolName string) *session.ApprovalPolicy {
	a, ok := s.agents[agentName]
	if !ok {
		return nil
	}
	return session.ResolveApprovalPolicy(ctx, a.Tools, a.Approval, toolName, s.log)
}

// livePolicy is the session.ExpiringAnnouncer's Policy of the live runs:
// the policy of the agent that runs conv here.
func (s *Service) livePolicy(ctx context.Context, conv, toolName string) *session.ApprovalPolicy {
	r := s.live(conv)
	if r == nil {
		return nil
	}
	return s.policy(ctx, r.agent, toolName)
}

package serve

import (
	"context"
	"fmt"
	"slices"

	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// The approvals' expiry and quorum (SPEC §12) are session's
// (session.ApprovalPolicy, resolved by session.ResolveApprovalPolicy, the
// timeouts scheduled by session.ExpiringAnnouncer), shared with `agent
// run` and `agent resume`; here, which agent's policy applies.

// approvals returns the approval policies of the agent named agentName
// (none for an agent this replica does not serve).
func (s *Service) approvals(agentName string) session.ApprovalPolicies {
	a, ok := s.agents[agentName]
	if !ok {
		return session.ApprovalPolicies{}
	}
	return session.ApprovalPolicies{Tools: a.Tools, Default: a.Approval, Logger: s.log}
}

// policy returns the expiry of the approvals of toolName for the agent
// named agentName; nil when it sets no timeout.
func (s *Service) policy(ctx context.Context, agentName, toolName string) *session.ApprovalPolicy {
	return s.approvals(agentName).Expiry(ctx, toolName)
}

// quorum returns how many distinct approvers the calls of toolName need
// for the agent named agentName (0: one decision decides).
func (s *Service) quorum(ctx context.Context, agentName, toolName string) int {
	return s.approvals(agentName).Quorum(ctx, toolName)
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

// ApprovalTimeout returns the timeout of the approvals of agentName's
// tool toolName when this service expires them (a session.ApprovalPolicy
// with a timeout, and Config.Expirer or Config.Records set): what the
// inbox shows and the notifications say (pending.Config.Timeouts,
// notify.Config.Expiry).
func (s *Service) ApprovalTimeout(ctx context.Context, agentName, toolName string) (pending.Timeout, bool) {
	if s.cfg.Expirer == nil && s.cfg.Records == nil {
		return pending.Timeout{}, false
	}
	p := s.policy(ctx, agentName, toolName)
	if p == nil {
		return pending.Timeout{}, false
	}
	return pending.Timeout{After: p.Timeout, OnTimeout: p.OnTimeout}, true
}

// Tool returns agentName's tool toolName, as this replica offers it: the
// schema an approval's edited arguments are checked against
// (pending.Config.Tools).
func (s *Service) Tool(ctx context.Context, agentName, toolName string) (*tool.Tool, error) {
	a, ok := s.agents[agentName]
	if !ok || a.Tools == nil {
		return nil, fmt.Errorf("this replica does not know the schema of %s (agent %q): the arguments cannot be checked", toolName, agentName)
	}
	tools, err := a.Tools.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("the tools of agent %s: %w", agentName, err)
	}
	i := slices.IndexFunc(tools, func(t *tool.Tool) bool { return t.Name == toolName })
	if i < 0 {
		return nil, fmt.Errorf("agent %s offers no tool %s: the arguments cannot be checked", agentName, toolName)
	}
	return tools[i], nil
}

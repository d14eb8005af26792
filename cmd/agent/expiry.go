package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/session"
)

// expiringAnnouncer returns the announcer of `agent run` and `agent
// resume`: convs' announcer, which with each approval whose policy (the
// tool's metadata "approval", else the spec's approval:
// session.ResolveApprovalPolicy, as `agent serve` resolves it) has a
// timeout also schedules the timeout's decision (SPEC §12), written by
// the server at the timeout whether or not any agent runs then (a
// policy is resolved at each announcement: a tool advertised after the
// start counts). On a server that cannot schedule messages it says so
// once, on stderr, when some policy sets a timeout at the start, and
// announces only.
func expiringAnnouncer(ctx context.Context, e env, p approvalPolicy, rem *conn, convs *convstore.Conversations, log *slog.Logger) session.Announcer {
	policy, fallback := p.policy, p.fallback
	if err := convs.Announcer.CanExpire(ctx); err != nil {
		if anyTimeout(ctx, policy, fallback, rem) {
			log.Warn("approval timeouts are not scheduled", slog.Any("error", err))
			fmt.Fprintf(e.stderr, "agent: the NATS server cannot schedule messages (%v): approval timeouts are not written; a paused call waits for a decision (or for agent serve's timers)\n", err)
		}
		return convs.Announcer
	}
	return session.ExpiringAnnouncer{Announcer: convs.Announcer, Expirer: convs.Announcer, Policy: policy}
}

// approvalPolicy is the approval policy of `agent run` and `agent
// resume`, resolved once per run: policy gives each tool's (the tool's
// metadata "approval", else the spec's approval:
// session.ResolveApprovalPolicy, as `agent serve` resolves it),
// fallback is the spec's (nil without one).
type approvalPolicy struct {
	policy   func(ctx context.Context, conv, toolName string) *session.ApprovalPolicy
	fallback *session.ApprovalPolicy
}

// approvalPolicies returns the approval policy of the run's spec and
// tools.
func approvalPolicies(f *runFlags, rem *conn, log *slog.Logger) (approvalPolicy, error) {
	var fallback *session.ApprovalPolicy
	if s := f.agentSpec; s != nil && s.Approval != nil {
		p, err := session.ParseApprovalPolicy(s.Approval.Map())
		if err != nil {
			return approvalPolicy{}, usageErr("--spec: %v", err)
		}
		fallback = p
	}
	tools := rem.client.Toolset()
	return approvalPolicy{fallback: fallback, policy: func(ctx context.Context, _, toolName string) *session.ApprovalPolicy {
		return session.ResolveApprovalPolicy(ctx, tools, fallback, toolName, log)
	}}, nil
}

// quorum is the session.Config.Quorum of `agent run` and `agent
// resume`: the approvers a tool's calls need (approval.required; 0: one
// decision decides). Its approvals count when the service signed them
// (agent serve's inbox and API, with the key of the store's links) or
// with --trust-nats-by; any other is refused unauthenticated and the call
// stays pending (SPEC §12).
func (p approvalPolicy) quorum(ctx context.Context, toolName string) int {
	if pol := p.policy(ctx, "", toolName); pol != nil {
		return pol.Required
	}
	return 0
}

// anyTimeout reports whether the spec's approval or the metadata of a
// tool offered now sets an approval timeout.
func anyTimeout(ctx context.Context, policy func(context.Context, string, string) *session.ApprovalPolicy, fallback *session.ApprovalPolicy, rem *conn) bool {
	if fallback != nil && fallback.Timeout > 0 {
		return true
	}
	tools, err := rem.client.Toolset().Tools(ctx)
	if err != nil {
		return false
	}
	for _, t := range tools {
		if p := policy(ctx, "", t.Name); p != nil && p.Timeout > 0 {
			return true
		}
	}
	return false
}

// linksKey returns the service's HMAC key (convstore.Links.Key, kept in
// the store), with which agent serve signs the decisions of its inbox and
// API.
func linksKey(ctx context.Context, rem *conn, f *runFlags) ([]byte, error) {
	js, err := jetstream.New(rem.nc)
	if err != nil {
		return nil, err
	}
	links, err := convstore.OpenLinks(ctx, convstore.OpenConfig{JetStream: js, Provision: f.conn.ProvisionOptions(f.prefix)})
	if err != nil {
		return nil, err
	}
	return links.Key(ctx)
}

package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// The map form of an approval's expiry (a tool's metadata "approval").
func TestParseApprovalPolicy(t *testing.T) {
	t.Parallel()
	p, err := session.ParseApprovalPolicy(map[string]any{"timeout": "90s", "message": "late"})
	if err != nil || p.Timeout != 90*time.Second || p.OnTimeout != session.OnTimeoutDeny || p.Decision().Message != "late" || p.Decision().By != "timeout" {
		t.Fatalf("%+v, %v", p, err)
	}
	if d := (&session.ApprovalPolicy{Timeout: time.Second, OnTimeout: session.OnTimeoutApprove, Message: "x"}).Decision(); !d.Approved || d.Message != "" || d.Reason != "expired" {
		t.Errorf("approve on timeout: %+v", d)
	}
	// A quorum alone, from a spec (int) or a tool's JSON metadata (float64).
	for _, n := range []any{2, 2.0} {
		if p, err := session.ParseApprovalPolicy(map[string]any{"required": n}); err != nil || p.Required != 2 || p.Timeout != 0 {
			t.Errorf("required %v: %+v, %v", n, p, err)
		}
	}
	p, err = session.ParseApprovalPolicy(map[string]any{"timeout": "1s", "on_timeout": "fail", "message": "x"})
	if d := p.Decision(); err != nil || d.Approved || d.OnTimeout != "fail" || d.Reason != "expired" || d.By != "timeout" {
		t.Errorf("fail on timeout: %+v, %v", p, err)
	}
	for _, bad := range []map[string]any{{}, {"timeout": "0s"}, {"timeout": 5}, {"required": 0}, {"required": 1.5}, {"required": "2"}, {"timeout": "1s", "on_timeout": "maybe"}, {"timeout": "1s", "x": "y"}} {
		if _, err := session.ParseApprovalPolicy(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The one resolution of an approval's policy: a tool's metadata
// "approval" over the spec's, the spec's for a tool without one (or with
// invalid metadata, ignored), the spec's without a toolset.
func TestResolveApprovalPolicy(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil }
	tools, err := tool.NewSet(
		tool.Func("deploy", "d", noop, tool.Meta(map[string]any{"approval": map[string]any{"timeout": "5s", "on_timeout": "approve"}})),
		tool.Func("plain", "p", noop),
		tool.Func("broken", "b", noop, tool.Meta(map[string]any{"approval": map[string]any{"timeout": "soon"}})),
	)
	if err != nil {
		t.Fatal(err)
	}
	spec := &session.ApprovalPolicy{Timeout: time.Minute, OnTimeout: session.OnTimeoutDeny}
	if p := session.ResolveApprovalPolicy(t.Context(), tools, spec, "deploy", nil); p == nil || p.Timeout != 5*time.Second || p.OnTimeout != session.OnTimeoutApprove {
		t.Errorf("deploy: %+v, want its metadata's", p)
	}
	for _, name := range []string{"plain", "broken", "unknown"} {
		if p := session.ResolveApprovalPolicy(t.Context(), tools, spec, name, nil); p != spec {
			t.Errorf("%s: %+v, want the spec's", name, p)
		}
	}
	if p := session.ResolveApprovalPolicy(t.Context(), nil, spec, "deploy", nil); p != spec {
		t.Errorf("no toolset: %+v, want the spec's", p)
	}
}

// scheduled records what an ExpiringAnnouncer schedules.
type scheduled struct {
	session.Announcer
	at map[string]time.Time
	d  map[string]protocol.Decision
}

func (s *scheduled) Announce(context.Context, *deferred.PendingRecord) error { return nil }

func (s *scheduled) Expire(_ context.Context, _, task string, at time.Time, d protocol.Decision) error {
	s.at[task], s.d[task] = at, d
	return nil
}

// ExpiringAnnouncer schedules, with the announcement, the timeout's
// decision of each approval whose policy has a timeout, and nothing for
// other calls or policies without one.
func TestExpiringAnnouncerSchedules(t *testing.T) {
	t.Parallel()
	rec := &scheduled{at: map[string]time.Time{}, d: map[string]protocol.Decision{}}
	policies := map[string]*session.ApprovalPolicy{
		"deploy": {Timeout: 2 * time.Second, OnTimeout: session.OnTimeoutDeny, Message: "late"},
		"quorum": {Required: 2},
	}
	a := session.ExpiringAnnouncer{Announcer: rec, Expirer: rec, Policy: func(_ context.Context, _, toolName string) *session.ApprovalPolicy {
		return policies[toolName]
	}}
	before := time.Now()
	err := a.Announce(t.Context(), &deferred.PendingRecord{ConversationID: "c", Tasks: []deferred.PendingTask{
		{TaskID: "t1", Tool: "deploy", Kind: deferred.KindApproval},
		{TaskID: "t2", Tool: "deploy", Kind: deferred.KindExternal},
		{TaskID: "t3", Tool: "quorum", Kind: deferred.KindApproval},
		{TaskID: "t4", Tool: "other", Kind: deferred.KindApproval},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.at) != 1 || rec.at["t1"].Before(before.Add(2*time.Second)) || rec.at["t1"].After(time.Now().Add(2*time.Second)) {
		t.Errorf("scheduled %v, want t1 at the announcement + 2s", rec.at)
	}
	if d := rec.d["t1"]; d.By != session.TimeoutDecider || d.Approved || d.Message != "late" || d.Reason != protocol.ReasonExpired {
		t.Errorf("t1's decision %+v", d)
	}
}

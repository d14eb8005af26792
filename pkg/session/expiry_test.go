package session_test

import (
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/session"
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

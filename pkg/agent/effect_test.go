package agent_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// unknownEffectTool defers its first call as a worker defers an attempt
// whose worker stopped while running it (SPEC §13), and runs its later
// (approved) calls.
func unknownEffectTool(ran *atomic.Int32) *tool.Tool {
	return tool.Func("charge", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		if !rc.ToolCallApproved {
			return "", &tool.ApprovalRequired{Metadata: map[string]any{
				tool.EffectMetaKey: tool.EffectUnknown, "worker": "w1", "started_at": "2026-12-01T00:00:00Z"}}
		}
		ran.Add(1)
		return "charged", nil
	})
}

// A call whose effect is unknown, denied by a person, reaches the model as
// SPEC §13's text, on a resume from the stored history (a JSON round trip,
// as agent resume and agent serve load it) and from a deferred handler;
// approved, it runs again; any other denial keeps its own text.
func TestUnknownEffectDenialText(t *testing.T) {
	t.Parallel()
	want := "The outcome of tool 'charge' is unknown: its worker stopped while running it, and it was not run again."
	pause := func(t *testing.T, ran *atomic.Int32) (*agent.Agent, message.History) {
		t.Helper()
		a := allowDeferred(t, turns(calls(call("charge", "c1", `{}`)), text("done")), unknownEffectTool(ran))
		res, err := a.Run(t.Context(), "go", nil)
		if err != nil || len(res.Deferred.Approvals) != 1 || res.Deferred.Metadata["c1"][tool.EffectMetaKey] != tool.EffectUnknown {
			t.Fatalf("%v %+v", err, res.Deferred)
		}
		// Stored and loaded again, as a durable conversation is.
		data, err := json.Marshal(res.Messages)
		if err != nil {
			t.Fatal(err)
		}
		var hist message.History
		if err := json.Unmarshal(data, &hist); err != nil {
			t.Fatal(err)
		}
		return a, hist
	}
	for _, tc := range []struct {
		name     string
		decision any
		want     string
	}{
		{"denied", false, want},
		{"denied with a reason", deferred.ToolDenied{Message: "Check the ledger first."}, want + " Check the ledger first."},
	} {
		t.Run("resume "+tc.name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int32
			a, hist := pause(t, &ran)
			res, err := a.Run(t.Context(), "", &agent.RunOptions{History: hist, DeferredResults: &deferred.Results{Approvals: map[string]any{"c1": tc.decision}}})
			if err != nil {
				t.Fatal(err)
			}
			p := res.NewMessages()[0].Parts
			if len(p) != 1 || returnContent(t, p[0]) != tc.want || p[0].(message.ToolReturn).Outcome != message.OutcomeDenied || ran.Load() != 0 {
				t.Fatalf("parts %+v (ran %d), want the denial %q", p, ran.Load(), tc.want)
			}
		})
	}
	t.Run("resume approved", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int32
		a, hist := pause(t, &ran)
		res, err := a.Run(t.Context(), "", &agent.RunOptions{History: hist, DeferredResults: &deferred.Results{Approvals: map[string]any{"c1": true}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := res.NewMessages()[0].Parts; len(p) != 1 || returnContent(t, p[0]) != "charged" || ran.Load() != 1 {
			t.Fatalf("parts %+v (ran %d), want the call run again", p, ran.Load())
		}
	})
	t.Run("deferred handler", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int32
		m := turns(calls(call("charge", "c1", `{}`)), text("done"))
		a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{handler(func(*deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("c1", false)}
		})}}, unknownEffectTool(&ran))
		res, err := a.Run(t.Context(), "go", nil)
		if err != nil {
			t.Fatal(err)
		}
		p := res.NewMessages()[2].Parts
		if len(p) != 1 || returnContent(t, p[0]) != want || ran.Load() != 0 {
			t.Fatalf("parts %+v (ran %d), want the denial %q", p, ran.Load(), want)
		}
	})
}

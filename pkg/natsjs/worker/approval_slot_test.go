package worker_test

import (
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// An approval waiting for a person holds no limit slot (SPEC §19): of a
// tool needing approval with max_in_flight 1 whose slot an approved call
// holds, a call not yet approved is answered approval_required at once,
// not held behind it (approvals come before the limits), while a second
// approved call is held (its report says queued: max_in_flight) and runs
// once the slot frees.
func TestWaitingApprovalHoldsNoSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	results := b.results(t)
	g := jstest.NewGate()
	defer g.Open()
	gated := g.Tool("gated", "done")
	gated.RequiresApproval = true
	gated.Limits = &limits.Limits{MaxInFlight: 1}
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{gated}})
	conv := protocol.NewID()

	first := jstest.NewTask("gated", conv, `{}`)
	first.Approved = true
	b.publishTask(t, first)
	if call := offloadtest.WaitOrTimeout(t, g.Started, "the approved call running"); call != first.ToolCallID {
		t.Fatalf("started %s, want %s", call, first.ToolCallID)
	}
	// The slot is taken: a call for a person is answered all the same,
	// not held behind it.
	waiting := jstest.NewTask("gated", conv, `{}`)
	b.publishTask(t, waiting)
	if r := offloadtest.WaitOrTimeout(t, results, "the unapproved call's answer"); r.TaskID != waiting.TaskID || r.Status != protocol.StatusApprovalRequired {
		t.Fatalf("result %+v, want approval_required for %s", r, waiting.TaskID)
	}
	second := jstest.NewTask("gated", conv, `{}`)
	second.Approved = true
	reports := b.signalProgress(t, second)
	b.publishTask(t, second)
	if p := offloadtest.WaitOrTimeout(t, reports, "the second approved call's report"); p.Queued == nil || p.Queued.Reason != "max_in_flight" {
		t.Fatalf("report %+v, want queued: max_in_flight", p)
	}
	g.Open()
	got := map[string]protocol.Status{}
	for range 2 {
		r := offloadtest.WaitOrTimeout(t, results, "an approved call's result")
		got[r.TaskID] = r.Status
	}
	if got[first.TaskID] != protocol.StatusOK || got[second.TaskID] != protocol.StatusOK {
		t.Errorf("results %v, want both approved calls ok", got)
	}
}

package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// While some slots run long tasks of one tool, a task of another tool
// starts in a free slot at once: the busy tool's pulls do not hold the
// free slots for it.
func TestFreeSlotServesAnotherTool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := jstest.NewGate()
	quick := tool.Func("quick", "Answer at once.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "quick", nil })
	b.worker(t, worker.Config{ID: "mixed", Tools: []*tool.Tool{g.Tool("slow", "slow"), quick}, Concurrency: 4})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ctx := context.Background()
	conv := protocol.NewID()
	for range 2 {
		h, err := d.Dispatch(ctx, jstest.NewTask("slow", conv, `{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Detach()
	}
	offloadtest.WaitOrTimeout(t, g.Started, "the first slow task")
	offloadtest.WaitOrTimeout(t, g.Started, "the second slow task")
	defer g.Open()
	start := time.Now()
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second) // far below the slow tasks' gate
	defer cancel()
	res, err := d.Call(qctx, jstest.NewTask("quick", conv, `{}`))
	if err != nil || jstest.Content(t, res) != "quick" {
		t.Fatalf("quick task while two slots are busy: %+v, %v after %v", res, err, time.Since(start))
	}
}

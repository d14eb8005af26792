package remote_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A task taken by a worker that never answers (it acked it and died, or
// its result was refused) fails with DeadlineExceeded once its deadline
// and the grace have passed: no wait of the agent is unbounded. The task
// is cancelled over the wire and a result that comes after is refused as
// late.
func TestCallWithoutResultEndsAtDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 4)
	const grace = 100 * time.Millisecond
	d, am := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused), DeadlineGrace: grace})

	tasks := make(chan *nats.Msg, 1)
	sub, err := b.nc.ChanSubscribe("tools.task.silent", tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cancels := make(chan *nats.Msg, 1)
	csub, err := b.nc.ChanSubscribe("tools.cancel.>", cancels)
	if err != nil {
		t.Fatal(err)
	}
	defer csub.Unsubscribe()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	task := jstest.NewTask("silent", protocol.NewID(), `{}`)
	task.Deadline = time.Now().Add(300 * time.Millisecond)
	ch := jstest.GoCall(context.Background(), d, task)
	offloadtest.WaitOrTimeout(t, tasks, "the task")

	cr := offloadtest.WaitOrTimeout(t, ch, "the call to end at its deadline")
	if cr.Err != nil || cr.Res.Status != protocol.StatusError || cr.Res.ErrorType != protocol.ErrorDeadlineExceeded {
		t.Fatalf("call: %+v, %v; want an error result DeadlineExceeded", cr.Res, cr.Err)
	}
	if now := time.Now(); now.Before(task.Deadline.Add(grace)) {
		t.Fatalf("the call ended at %s, before its deadline %s and grace", now, task.Deadline)
	}
	if cr.Res.TaskID != task.TaskID || cr.Res.ToolCallID != task.ToolCallID {
		t.Fatalf("result names task %s call %s", cr.Res.TaskID, cr.Res.ToolCallID)
	}
	if got := testutil.ToFloat64(am.ToolCallsTotal.WithLabelValues("silent", "inline", "error")); got != 1 {
		t.Errorf("tool_calls_total{silent,inline,error} = %v, want 1", got)
	}
	if d.Pending() != 0 {
		t.Errorf("%d calls pending", d.Pending())
	}

	// The cancel is stored, for a worker still running the task.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := b.js.Stream(ctx, "TOOLS_CANCEL")
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, cancels, "the cancel")
	msg, err := s.GetLastMsgForSubject(ctx, protocol.Subjects{}.Cancel(task.ConversationID, task.TaskID, task.Tool))
	if err != nil {
		t.Fatalf("no cancel stored: %v", err)
	}
	var c protocol.Cancel
	if err := json.Unmarshal(msg.Data, &c); err != nil || c.TaskID != task.TaskID {
		t.Fatalf("cancel %s: %v", msg.Data, err)
	}

	// A result after that is late.
	if err := b.nc.Publish(protocol.Subjects{}.Result(task.ConversationID, task.TaskID, task.Tool), []byte(`{"content":"at last"}`)); err != nil {
		t.Fatal(err)
	}
	if got := offloadtest.WaitOrTimeout(t, refused, "the late result's refusal"); got != string(metrics.RefuseLate) {
		t.Fatalf("late result refused as %q", got)
	}
}

// A result within the grace wins: the worker's own DeadlineExceeded (or
// its result) is what the call reports.
func TestResultWithinGraceWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{DeadlineGrace: time.Minute})
	tasks := make(chan *nats.Msg, 1)
	sub, err := b.nc.ChanSubscribe("tools.task.slow", tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	task := jstest.NewTask("slow", protocol.NewID(), `{}`)
	task.Deadline = time.Now().Add(-time.Second) // passed: the worker answers DeadlineExceeded
	ch := jstest.GoCall(context.Background(), d, task)
	offloadtest.WaitOrTimeout(t, tasks, "the task")
	if err := b.nc.Publish(protocol.Subjects{}.Result(task.ConversationID, task.TaskID, task.Tool),
		[]byte(`{"status":"error","error_type":"DeadlineExceeded","message":"the worker's own","worker":"w1"}`)); err != nil {
		t.Fatal(err)
	}
	cr := offloadtest.WaitOrTimeout(t, ch, "the call")
	if cr.Err != nil || cr.Res.Worker != "w1" {
		t.Fatalf("call: %+v, %v; want the worker's result", cr.Res, cr.Err)
	}
}

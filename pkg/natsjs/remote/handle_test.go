package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

func TestDispatchReturnsAHandle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, am := b.dispatcher(t, remote.DispatcherConfig{})
	tasks := b.taskTap(t, "job")
	ctx := context.Background()
	conv := protocol.NewID()

	task := jstest.NewTask("job", conv, `{"n":1}`)
	task.Mode = protocol.ModeBackground
	h, err := d.Dispatch(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	m := offloadtest.WaitOrTimeout(t, tasks, "the task")
	if got := m.Header.Get(jetstream.MsgIDHeader); got != task.TaskID {
		t.Errorf("Nats-Msg-Id %q, want the task ID", got)
	}
	var sent protocol.Task
	if err := json.Unmarshal(m.Data, &sent); err != nil {
		t.Fatal(err)
	}
	// Without its tool's timeout, a background task's deadline is the
	// dispatcher's default (SPEC §20: no background wait is unbounded).
	if until := time.Until(sent.Deadline); until < remote.DefaultInlineDeadline-time.Minute || until > remote.DefaultInlineDeadline {
		t.Errorf("background task's deadline %v, want %v from now", sent.Deadline, remote.DefaultInlineDeadline)
	}
	if _, err := h.Result(); !errors.Is(err, natsjs.ErrPending) {
		t.Fatalf("Result before the result: %v", err)
	}
	if got := testutil.ToFloat64(am.PendingCalls.WithLabelValues("background")); got != 1 {
		t.Errorf("pending{background} = %v", got)
	}
	if err := b.nc.Publish(protocol.Subjects{}.Result(conv, task.TaskID, task.Tool), []byte(`{"content":7}`)); err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, h.Done(), "the handle to be done")
	res, err := h.Result()
	if err != nil || string(res.Content) != "7" {
		t.Fatalf("result %+v, %v", res, err)
	}
	if got := testutil.ToFloat64(am.ToolCallsTotal.WithLabelValues("job", "background", "ok")); got != 1 {
		t.Errorf("tool_calls_total{job,background,ok} = %v", got)
	}

	// An inline task always carries a deadline (SPEC §5.2).
	inline := jstest.NewTask("job", conv, `{}`)
	h2, err := d.Dispatch(ctx, inline)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Detach()
	if err := json.Unmarshal(offloadtest.WaitOrTimeout(t, tasks, "the inline task").Data, &sent); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(sent.Deadline); left < remote.DefaultInlineDeadline-time.Minute || left > remote.DefaultInlineDeadline {
		t.Errorf("inline deadline in %v, want about %v", left, remote.DefaultInlineDeadline)
	}
}

// A call dispatched again takes the next attempt and a Nats-Msg-Id of its
// own, so that the server's duplicate window does not drop it; a repeated
// publish of one attempt is dropped.
func TestDispatchAttemptsAreNotDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ctx := context.Background()
	conv := protocol.NewID()
	task := jstest.NewTask("job", conv, `{}`)
	for attempt := range 2 {
		task.Attempt = attempt
		h, err := d.Dispatch(ctx, task)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		h.Detach()
	}
	// The same attempt again: the server drops it as a duplicate.
	m := nats.NewMsg("tools.task.job")
	m.Header.Set(jetstream.MsgIDHeader, task.TaskID+":1")
	m.Data = []byte(`{}`)
	ack, err := b.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Error("a second publish of attempt 1 was stored")
	}
	s, err := b.js.Stream(ctx, natsjs.NamesFor("tools").Tasks)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("%d tasks stored, want 2 (one per attempt)", n)
	}
}

// A detached task's result is left alone: neither delivered nor refused.
func TestHandleDetach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 4)
	d, am := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused)})
	ctx := context.Background()
	conv := protocol.NewID()
	task := jstest.NewTask("job", conv, `{}`)
	task.Mode = protocol.ModeBackground
	h, err := d.Dispatch(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	h.Detach()
	offloadtest.WaitOrTimeout(t, h.Done(), "the detached handle")
	if _, err := h.Result(); !errors.Is(err, natsjs.ErrDetached) {
		t.Fatalf("Result of a detached handle: %v", err)
	}
	if d.Pending() != 0 {
		t.Fatalf("%d pending after Detach", d.Pending())
	}
	s := protocol.Subjects{}
	if err := b.nc.Publish(s.Result(conv, task.TaskID, task.Tool), []byte(`{"content":1}`)); err != nil {
		t.Fatal(err)
	}
	// Results are handled in order: the next refusal is the unknown task's.
	if err := b.nc.Publish(s.Result(conv, protocol.NewID(), "job"), []byte(`{"content":2}`)); err != nil {
		t.Fatal(err)
	}
	if got := offloadtest.WaitOrTimeout(t, refused, "a refusal"); got != string(metrics.RefuseUnknownTask) {
		t.Fatalf("refused %q first, want unknown_task (the detached task's result was refused)", got)
	}
	if got := testutil.ToFloat64(am.PendingCalls.WithLabelValues("background")); got != 0 {
		t.Errorf("pending{background} = %v after Detach", got)
	}
}

// When the server goes away for good, waiting calls fail with
// ErrServerLost after ServerLostAfter instead of waiting forever, and new
// dispatches fail too.
func TestDispatcherServerLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := b.srv.Conn(t, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	d, am := b.dispatcher(t, remote.DispatcherConfig{Conn: conn, ServerLostAfter: 300 * time.Millisecond})
	tasks := b.taskTap(t, "nobody")
	ctx := context.Background()
	conv := protocol.NewID()
	ch := jstest.GoCall(ctx, d, jstest.NewTask("nobody", conv, `{}`))
	offloadtest.WaitOrTimeout(t, tasks, "the task")

	b.srv.NATS().Shutdown()
	cr := offloadtest.WaitOrTimeout(t, ch, "the call to fail")
	if !errors.Is(cr.Err, natsjs.ErrServerLost) {
		t.Fatalf("call: %v, want ErrServerLost", cr.Err)
	}
	if got := testutil.ToFloat64(am.ToolCallsTotal.WithLabelValues("nobody", "inline", "server_lost")); got != 1 {
		t.Errorf("tool_calls_total{server_lost} = %v", got)
	}
	if _, err := d.Dispatch(ctx, jstest.NewTask("nobody", conv, `{}`)); !errors.Is(err, natsjs.ErrServerLost) {
		t.Fatalf("dispatch while lost: %v", err)
	}
}

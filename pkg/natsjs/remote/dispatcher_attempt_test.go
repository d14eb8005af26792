package remote_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestDispatcherRefusesWrongAttempt: a call dispatched again (attempt 1,
// after an approval) takes only its own attempt's result. The first
// dispatch's approval_required (attempt 0) arriving again, or a result
// without an attempt, is refused as wrong_attempt, and the call waits on.
func TestDispatcherRefusesWrongAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 16)
	d, am := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused)})
	tasks := make(chan *nats.Msg, 4)
	sub, err := b.nc.ChanSubscribe("tools.task.job", tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	conv := protocol.NewID()
	task := jstest.NewTask("job", conv, `{}`)
	task.Attempt, task.Approved = 1, true
	ch := jstest.GoCall(context.Background(), d, task)
	offloadtest.WaitOrTimeout(t, tasks, "the task")

	subject := protocol.Subjects{}.Result(conv, task.TaskID, task.Tool)
	for _, data := range []string{`{"status":"approval_required","attempt":0}`, `{"content":"no attempt"}`, `{"content":"later","attempt":2}`} {
		if err := b.nc.Publish(subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
		if got := offloadtest.WaitOrTimeout(t, refused, "a refusal"); got != string(metrics.RefuseWrongAttempt) {
			t.Fatalf("%s refused for %q, want wrong_attempt", data, got)
		}
	}
	if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseWrongAttempt))); got != 3 {
		t.Fatalf("refused{wrong_attempt} = %v, want 3", got)
	}
	if err := b.nc.Publish(subject, []byte(`{"content":"42","attempt":1}`)); err != nil {
		t.Fatal(err)
	}
	cr := offloadtest.WaitOrTimeout(t, ch, "the call's result")
	if cr.Err != nil || string(cr.Res.Content) != `"42"` || cr.Res.Attempt != 1 {
		t.Fatalf("call: %+v, %v", cr.Res, cr.Err)
	}
}

// TestDispatcherUnknownTaskBeforePayload: a result for a task no call
// waits for is unknown_task whatever its payload (not JSON, a task_id
// that is not the subject's); malformed is for a waiting call's result.
func TestDispatcherUnknownTaskBeforePayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 16)
	d, am := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused)})
	tasks := make(chan *nats.Msg, 4)
	sub, err := b.nc.ChanSubscribe("tools.task.job", tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	conv := protocol.NewID()
	task := jstest.NewTask("job", conv, `{}`)
	ch := jstest.GoCall(context.Background(), d, task)
	offloadtest.WaitOrTimeout(t, tasks, "the task")

	s := protocol.Subjects{}
	for _, data := range []string{`{not json`, `{"task_id":"` + protocol.NewID() + `","content":"x"}`, `{"status":"done"}`} {
		if err := b.nc.Publish(s.Result(conv, protocol.NewID(), "job"), []byte(data)); err != nil {
			t.Fatal(err)
		}
		if got := offloadtest.WaitOrTimeout(t, refused, "a refusal"); got != string(metrics.RefuseUnknownTask) {
			t.Fatalf("%s refused for %q, want unknown_task", data, got)
		}
	}
	if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseMalformed))); got != 0 {
		t.Fatalf("refused{malformed} = %v, want 0", got)
	}
	// The waiting call's own malformed result is malformed; it waits on.
	if err := b.nc.Publish(s.Result(conv, task.TaskID, task.Tool), []byte(`{not json`)); err != nil {
		t.Fatal(err)
	}
	if got := offloadtest.WaitOrTimeout(t, refused, "a refusal"); got != string(metrics.RefuseMalformed) {
		t.Fatalf("refused for %q, want malformed", got)
	}
	if err := b.nc.Publish(s.Result(conv, task.TaskID, task.Tool), []byte(`{"content":"42"}`)); err != nil {
		t.Fatal(err)
	}
	if cr := offloadtest.WaitOrTimeout(t, ch, "the call's result"); cr.Err != nil || string(cr.Res.Content) != `"42"` {
		t.Fatalf("call: %+v, %v", cr.Res, cr.Err)
	}
}

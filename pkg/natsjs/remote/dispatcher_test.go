package remote_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// refusals is a slog handler that forwards the reason of every "result
// refused" record: the signal that the dispatcher handled a message.
type refusals chan string

func (r refusals) Enabled(context.Context, slog.Level) bool { return true }
func (r refusals) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r refusals) WithGroup(string) slog.Handler            { return r }
func (r refusals) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "result refused" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" {
			r <- a.Value.String()
			return false
		}
		return true
	})
	return nil
}

func TestDispatcherRefusesResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 16)
	d, am := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused), MaxPayload: 1024})

	// No worker serves "job": the tasks stay in flight. A core subscription
	// tells when a task is published (and so registered).
	tasks := make(chan *nats.Msg, 4)
	sub, err := b.nc.ChanSubscribe("tools.task.job", tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conv := protocol.NewID()
	task := jstest.NewTask("job", conv, `{}`)
	ch := jstest.GoCall(ctx, d, task)
	offloadtest.WaitOrTimeout(t, tasks, "the task")

	pub := func(subject, data string) {
		t.Helper()
		if err := b.nc.Publish(subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	s := protocol.Subjects{}
	expectN := func(reason metrics.RefuseReason, n float64) {
		t.Helper()
		if got := offloadtest.WaitOrTimeout(t, refused, "a refusal"); got != string(reason) {
			t.Fatalf("refused for %q, want %q", got, reason)
		}
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(reason))); got != n {
			t.Fatalf("refused{%s} = %v, want %v", reason, got, n)
		}
	}
	expect := func(reason metrics.RefuseReason) { t.Helper(); expectN(reason, 1) }

	pub(s.Result(conv, task.TaskID, task.Tool), `{not json`)
	expect(metrics.RefuseMalformed)
	pub(s.Result(conv, task.TaskID, task.Tool), `{"content":"`+strings.Repeat("x", 2000)+`"}`)
	expect(metrics.RefuseOversize)
	pub(s.Result(protocol.NewID(), task.TaskID, task.Tool), `{"content":"wrong"}`)
	expect(metrics.RefuseWrongConversation)
	pub(s.Result(conv, protocol.NewID(), "job"), `{"content":"who?"}`)
	expect(metrics.RefuseUnknownTask)

	// A worker of another tool may not answer (SPEC §9): refused, and the
	// call waits on for its own tool's result.
	pub(s.Result(conv, task.TaskID, "shell"), `{"content":"forged"}`)
	expect(metrics.RefuseWrongTool)
	pub(s.Result(conv, task.TaskID, task.Tool), `{"content":"42"}`)
	cr := offloadtest.WaitOrTimeout(t, ch, "the call's result")
	if cr.Err != nil || string(cr.Res.Content) != `"42"` || cr.Res.TaskID != task.TaskID {
		t.Fatalf("call: %+v, %v", cr.Res, cr.Err)
	}
	pub(s.Result(conv, task.TaskID, task.Tool), `{"content":"43"}`)
	expect(metrics.RefuseDuplicate)

	// A cancelled call returns at once; its late result is refused, its
	// worker's cancelled confirmation is not.
	late := jstest.NewTask("job", conv, `{}`)
	ch = jstest.GoCall(ctx, d, late)
	offloadtest.WaitOrTimeout(t, tasks, "the second task")
	if err := d.Cancel(ctx, conv, late.TaskID, late.Tool, "enough"); err != nil {
		t.Fatal(err)
	}
	cr = offloadtest.WaitOrTimeout(t, ch, "the cancelled call")
	if cr.Err != nil || cr.Res.Status != protocol.StatusCancelled {
		t.Fatalf("cancelled call: %+v, %v", cr.Res, cr.Err)
	}
	if _, err := cr.Res.Outcome(); !errors.Is(err, tool.ErrCancelled) {
		t.Fatalf("outcome %v", err)
	}
	pub(s.Result(conv, late.TaskID, late.Tool), `{"status":"cancelled"}`)
	pub(s.Result(conv, late.TaskID, late.Tool), `{"content":"too late"}`)
	expect(metrics.RefuseLate)

	// Results of conversations this process never dispatched to belong to
	// other agents: ignored, not refused.
	pub(s.Result(protocol.NewID(), protocol.NewID(), "job"), `{"content":"not mine"}`)
	pub(s.Result(conv, task.TaskID, task.Tool), `{"content":"44"}`)
	expectN(metrics.RefuseDuplicate, 2)
	if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseUnknownTask))); got != 1 {
		t.Errorf("unknown_task = %v, want 1", got)
	}
	if got := testutil.ToFloat64(am.ToolCallsTotal.WithLabelValues("job", "inline", "cancelled")); got != 1 {
		t.Errorf("tool_calls_total{job,inline,cancelled} = %v", got)
	}
	if d.Pending() != 0 {
		t.Errorf("%d calls pending", d.Pending())
	}
}

func TestDispatcherCallErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ctx := context.Background()
	conv := protocol.NewID()
	for name, task := range map[string]protocol.Task{
		"bad task id": {TaskID: "x", Tool: "t", ConversationID: conv},
		"bad conv":    {TaskID: protocol.NewID(), Tool: "t", ConversationID: "y"},
		"no tool":     {TaskID: protocol.NewID(), ConversationID: conv},
		"args":        {TaskID: protocol.NewID(), Tool: "t", ConversationID: conv, Args: []byte(`[1]`)},
		"mode":        {TaskID: protocol.NewID(), Tool: "t", ConversationID: conv, Mode: "sideways"},
	} {
		if _, err := d.Call(ctx, task); !errors.Is(err, natsjs.ErrInvalidTask) {
			t.Errorf("%s: %v, want ErrInvalidTask", name, err)
		}
	}
	// Stop releases waiting calls.
	tasks := make(chan *nats.Msg, 1)
	sub, err := b.nc.ChanSubscribe("tools.task.nobody", tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ch := jstest.GoCall(ctx, d, jstest.NewTask("nobody", conv, `{}`))
	offloadtest.WaitOrTimeout(t, tasks, "the task")
	stopCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := d.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if cr := offloadtest.WaitOrTimeout(t, ch, "the call to end"); !errors.Is(cr.Err, natsjs.ErrStopped) {
		t.Fatalf("call after Stop: %v", cr.Err)
	}
	if _, err := d.Call(ctx, jstest.NewTask("nobody", conv, `{}`)); !errors.Is(err, natsjs.ErrStopped) {
		t.Fatalf("call on a stopped dispatcher: %v", err)
	}
}

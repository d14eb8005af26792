package remote_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// statuses returns the connection's status changes from now on.
func statuses(t *testing.T, nc *nats.Conn) <-chan nats.Status {
	t.Helper()
	ch := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED)
	t.Cleanup(func() { nc.RemoveStatusListener(ch) })
	return ch
}

// waitStatus waits on ch for the connection to be connected (connected
// true) or away.
func waitStatus(t *testing.T, ch <-chan nats.Status, connected bool) {
	t.Helper()
	for {
		if s := offloadtest.WaitOrTimeout(t, ch, "the connection's status"); (s == nats.CONNECTED) == connected {
			return
		}
	}
}

// Issue 37 (a slow consumer never stalls a live run): the server cuts the
// dispatcher's connection (a slow consumer, a network fault, a restart)
// while a worker stores the result of a call it waits for. When the
// connection is back, the call gets that stored result, at once: not
// DeadlineExceeded at its deadline (an inline call) nor nothing ever (a
// background call, which has no deadline). The results consumer, an
// ordered consumer that had delivered nothing yet, is recreated on the
// reconnect from the position it started at, and every call still waiting
// looks its result up in the stream; the result read twice is refused by
// neither (no duplicate counted).
func TestResultStoredWhileCutReachesTheCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		perConversation bool
		mode            protocol.Mode
		restart         bool
	}{
		{name: "process/inline", mode: protocol.ModeInline},
		{name: "process/background", mode: protocol.ModeBackground},
		{name: "conversation/inline", perConversation: true, mode: protocol.ModeInline},
		{name: "conversation/background", perConversation: true, mode: protocol.ModeBackground},
		{name: "conversation/inline/restart", perConversation: true, mode: protocol.ModeInline, restart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			proxy := natstest.NewProxy(t, b.srv.URL())
			nc := natstest.Connect(t, proxy.URL(), natstest.Reconnecting(20*time.Millisecond)...)
			status := statuses(t, nc)
			refused := make(refusals, 8)
			d, _ := b.dispatcher(t, remote.DispatcherConfig{Conn: nc, PerConversation: tc.perConversation, Logger: slog.New(refused),
				DeadlineGrace: 100 * time.Millisecond, ServerLostAfter: time.Minute})

			task := jstest.NewTask("job", protocol.NewID(), `{}`)
			task.Mode = tc.mode
			if tc.mode == protocol.ModeInline {
				// Before the fix the call ended here with
				// DeadlineExceeded; the background call never ended.
				task.Deadline = time.Now().Add(offloadtest.Wait / 2)
			}
			ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
			defer cancel()
			h, err := d.Dispatch(ctx, task)
			if err != nil {
				t.Fatal(err)
			}

			proxy.Cut()
			waitStatus(t, status, false)
			js := b.js
			if tc.restart {
				b.srv.Restart(t)
				js = b.srv.JetStream(t)
			}
			// The worker's result, stored while the dispatcher is away.
			if _, err := js.Publish(ctx, protocol.Subjects{}.Result(task.ConversationID, task.TaskID, task.Tool), []byte(`{"content":"stored"}`)); err != nil {
				t.Fatal(err)
			}
			proxy.Restore()
			waitStatus(t, status, true)

			select {
			case <-h.Done():
			case <-time.After(offloadtest.Wait):
				t.Fatal("the call got nothing after the reconnect: its stored result was lost")
			}
			res, err := h.Result()
			if err != nil || res.Status != protocol.StatusOK || string(res.Content) != `"stored"` {
				t.Fatalf("call: %+v, %v; want the stored result", res, err)
			}
			if d.Pending() != 0 {
				t.Fatalf("%d calls pending", d.Pending())
			}
			// The consumer recreated delivers the result the lookup
			// already gave: the call's answer a second time is no
			// duplicate. Results published after it go the consumer's
			// way, in order: a duplicate refused as one, then one of an
			// unknown task, whose refusal says that every earlier one
			// was made.
			js = b.srv.JetStream(t)
			for _, r := range []struct{ task, content string }{{task.TaskID, "again"}, {protocol.NewID(), "unknown"}} {
				if _, err := js.Publish(ctx, protocol.Subjects{}.Result(task.ConversationID, r.task, task.Tool), []byte(`{"content":"`+r.content+`"}`)); err != nil {
					t.Fatal(err)
				}
			}
			var reasons []string
			for len(reasons) == 0 || reasons[len(reasons)-1] != "unknown_task" {
				reasons = append(reasons, offloadtest.WaitOrTimeout(t, refused, "the unknown task's result refused"))
			}
			if !slices.Equal(reasons, []string{"duplicate", "unknown_task"}) {
				t.Fatalf("refused %v, want [duplicate unknown_task]: the result recovered from the stream was refused too", reasons)
			}
		})
	}
}

// Issue 37: a call whose results consumer never delivers its result (it
// was stored before the call attached, which a consumer of new results
// does not see) does not end with DeadlineExceeded when its deadline
// fires: the deadline first looks the result up in the stream.
func TestDeadlineFindsTheStoredResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 4)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused), DeadlineGrace: 50 * time.Millisecond, PerConversation: true})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	task.Deadline = time.Now().Add(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
	defer cancel()
	if _, err := b.js.Publish(ctx, protocol.Subjects{}.Result(task.ConversationID, task.TaskID, task.Tool), []byte(`{"content":"stored"}`)); err != nil {
		t.Fatal(err)
	}
	h, err := d.Attach(task)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil || res.Status != protocol.StatusOK || string(res.Content) != `"stored"` {
		t.Fatalf("call: %+v, %v; want the stored result, not DeadlineExceeded", res, err)
	}
	select {
	case r := <-refused:
		t.Fatalf("refused %s", r)
	default:
	}
}

package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// A worker advertises its tool's timeout in the registry entry (field
// timeout, seconds), and the agent's tool carries it.
func TestRegistryEntryCarriesTheTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slow := tool.Func("timed", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil }, tool.Timeout(90*time.Second))
	b.worker(t, worker.Config{ID: "w-timed", Tools: []*tool.Tool{slow}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	e, err := b.registry(t).Get(ctx, "timed.w-timed")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(e.Value(), &raw); err != nil || raw["timeout"] != 90.0 {
		t.Fatalf("entry %s: %v, want timeout 90", e.Value(), err)
	}
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	waitTools(t, ts, "timed")
	tools, err := ts.Tools(ctx)
	if err != nil || len(tools) != 1 || tools[0].Timeout != 90*time.Second {
		t.Fatalf("tools %v, %v; want timed with its timeout", tools, err)
	}
}

// A background call whose worker took its task and then neither answers
// nor keeps it (frozen, cut off) ends with DeadlineExceeded by its tool's
// timeout plus the grace (SPEC §20), not never: the task carries the
// deadline, the call's outcome is the error, and the task is cancelled
// over the wire. A tool whose entry states no timeout is bounded by the
// dispatcher's BackgroundDeadline.
func TestBackgroundCallEndsByItsToolsTimeout(t *testing.T) {
	t.Parallel()
	const timeout, grace = 300 * time.Millisecond, 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		stated bool // the entry states the timeout; else the dispatcher's default is it
	}{{"tool's timeout", true}, {"dispatcher's default", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := remote.DispatcherConfig{DeadlineGrace: grace}
			entryTimeout := timeout.Seconds()
			if !tc.stated {
				cfg.BackgroundDeadline, entryTimeout = timeout, 0
			}
			backgroundCallEnds(t, cfg, entryTimeout, timeout, grace)
		})
	}
}

func backgroundCallEnds(t *testing.T, cfg remote.DispatcherConfig, entryTimeout float64, timeout, grace time.Duration) {
	t.Helper()
	b := setup(t)
	// The entry of a worker that took the task and froze: no worker
	// answers it.
	entry := natsjs.RegistryEntry{Name: "frozen", Parameters: json.RawMessage(`{"type":"object","properties":{}}`), Worker: "w-frozen",
		Timeout: entryTimeout, ExpiresAt: time.Now().Add(natsjs.RegistryTTL)}
	tasks := b.taskTap(t, "frozen")
	cancels := make(chan *nats.Msg, 1)
	csub, err := b.nc.ChanSubscribe("tools.cancel.>", cancels)
	if err != nil {
		t.Fatal(err)
	}
	defer csub.Unsubscribe()
	d, _ := b.dispatcher(t, cfg)
	ts := b.toolset(t, d, nil)
	data, _ := json.Marshal(entry)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := b.registry(t).Put(ctx, "frozen.w-frozen", data); err != nil {
		t.Fatal(err)
	}
	waitTools(t, ts, "frozen")
	conv := protocol.NewID()
	call := bgCall(t, ts, "frozen", conv)
	started := time.Now()
	task, err := ts.Executor(nil).Start(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	var sent protocol.Task
	if err := json.Unmarshal(offloadtest.WaitOrTimeout(t, tasks, "the task").Data, &sent); err != nil {
		t.Fatal(err)
	}
	if dl := sent.Deadline.Sub(started); sent.Mode != protocol.ModeBackground || dl < timeout || dl > timeout+time.Second {
		t.Fatalf("task %+v: deadline %v after the start, want %v", sent, dl, timeout)
	}
	offloadtest.WaitOrTimeout(t, task.Done(), "the call ended by its deadline")
	if took := time.Since(started); took < timeout+grace {
		t.Fatalf("ended after %v, before the timeout and the grace", took)
	}
	_, oerr := task.Outcome()
	if oerr == nil || tool.ErrorType(oerr) != protocol.ErrorDeadlineExceeded && !errors.Is(oerr, context.DeadlineExceeded) {
		t.Fatalf("outcome %v (%s), want DeadlineExceeded", oerr, tool.ErrorType(oerr))
	}
	m := offloadtest.WaitOrTimeout(t, cancels, "the cancel")
	var c protocol.Cancel
	if err := json.Unmarshal(m.Data, &c); err != nil || c.TaskID != call.TaskID || m.Subject != (protocol.Subjects{}).Cancel(conv, call.TaskID, "frozen") {
		t.Fatalf("cancel %s on %s: %v", m.Data, m.Subject, err)
	}
}

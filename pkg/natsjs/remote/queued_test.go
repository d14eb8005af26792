package remote_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// queueRecorder records the queued and progress reports relayed to a call.
type queueRecorder struct {
	queued   chan progress.Queued
	mu       sync.Mutex
	progress []string
}

func (r *queueRecorder) Report(message string, _ *float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress = append(r.progress, message)
}

func (r *queueRecorder) ReportQueued(_, message string, q progress.Queued) {
	if want := (protocol.Queued{Reason: q.Reason, Ahead: q.Ahead, Key: q.Key, Until: q.Until}).Text("job"); message != want {
		r.Report("wrong text: "+message, nil)
	}
	r.queued <- q
}

// A call held by a limit reaches the agent as queued (SPEC §19): the
// worker's report of a call waiting behind max_in_flight 1 per tenant is
// relayed as a queued report with its reason, key and place, not as
// progress; the tasks carry their run's tenant, field and header.
func TestHeldCallRelayedQueued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := jstest.NewGate()
	defer g.Open()
	job := g.Tool("job", "done")
	job.Limits = &limits.Limits{MaxInFlight: 1, Key: limits.KeyTenant}
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{job}})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	r, err := remote.NewToolset(remote.ToolsetConfig{Conn: b.srv.Conn(t), Dispatcher: d, Logger: jstest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	waitTools(t, r, "job")
	tools, err := r.Tools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tap := b.taskTap(t, "job")
	run := func(call string, rec *queueRecorder) <-chan error {
		done := make(chan error, 1)
		ctx := progress.WithReporter(t.Context(), rec)
		go func() {
			rc := &tool.RunContext{ConversationID: protocol.NewID(), ToolCallID: call, ToolName: "job", Tenant: "acme"}
			_, err := tools[0].Run(ctx, rc, json.RawMessage(`{}`))
			done <- err
		}()
		return done
	}
	first, second := &queueRecorder{queued: make(chan progress.Queued, 8)}, &queueRecorder{queued: make(chan progress.Queued, 8)}
	done1 := run("call_1", first)
	offloadtest.WaitOrTimeout(t, g.Started, "the first call running")
	done2 := run("call_2", second)
	q := offloadtest.WaitOrTimeout(t, second.queued, "the second call queued")
	if q.Reason != "max_in_flight" || q.Key != "tenant=acme" || q.Ahead != 0 {
		t.Errorf("queued %+v, want max_in_flight for tenant=acme, none ahead", q)
	}
	g.Open()
	for _, done := range []<-chan error{done1, done2} {
		if err := offloadtest.WaitOrTimeout(t, done, "a call's end"); err != nil {
			t.Fatal(err)
		}
	}
	second.mu.Lock()
	if len(second.progress) != 0 {
		t.Errorf("the held call's reports came as progress too: %q", second.progress)
	}
	second.mu.Unlock()
	for range 2 {
		m := offloadtest.WaitOrTimeout(t, tap, "a job task")
		task, err := protocol.DecodeTask(m.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if task.Tenant != "acme" || m.Header.Get(protocol.TenantHeader) != "acme" {
			t.Errorf("task tenant %q, header %q, want acme", task.Tenant, m.Header.Get(protocol.TenantHeader))
		}
	}
}

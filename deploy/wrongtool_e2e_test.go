package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Finding 2 of issue 30, replayed under the shipped users: the http_fetch
// worker's credential answered a shell task while the real worker still
// ran it, and the agent took the forged result. Now it may not publish on
// the task's own subject (tools.result.*.*.sleep is worker_sleep's), and a
// result on its own tool's subject for that task is refused by the agent
// (wrong_tool): the call waits on for its own tool's worker.
func TestForgedResultOfAnotherTool(t *testing.T) {
	t.Parallel()
	d := startDeployServer(t)
	am := metrics.NewAgent(nil)
	d1, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: d.connect(t, "agent", nil), Metrics: am})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := d1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d1.Stop(context.Background()) })
	conv := protocol.NewID()
	h, err := d1.Dispatch(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "sleep", Args: json.RawMessage(`{"seconds":0}`),
		ConversationID: conv, Mode: protocol.ModeBackground})
	if err != nil {
		t.Fatal(err)
	}
	task := h.Task().TaskID
	s := protocol.Subjects{}

	var forge op
	forge.run = func(ctx context.Context, e opEnv) error {
		return e.publishJS(ctx, names.Results, s.Result(conv, task, "sleep"), `{"content":"forged"}`)
	}
	if got, err := outcome(t, d, "worker_http", forge); err != nil || got != "denied" {
		t.Fatalf("worker_http publishing on the sleep task's subject: %s, %v", got, err)
	}
	http := d.connect(t, "worker_http", nil)
	defer http.Close()
	js, _ := jetstream.New(http)
	if _, err := js.Publish(ctx, s.Result(conv, task, "http_fetch"), []byte(`{"content":"forged"}`)); err != nil {
		t.Fatalf("worker_http on its own tool's subject: %v", err)
	}
	offloadtest.Eventually(t, "the forged result's refusal", func() error {
		if n := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseWrongTool))); n != 1 {
			return fmt.Errorf("refused{wrong_tool} = %v", n)
		}
		return nil
	})
	select {
	case <-h.Done():
		r, _ := h.Result()
		t.Fatalf("the call took the forged result %+v", r)
	default:
	}

	// The sleep worker's result settles the call.
	sleep := d.connect(t, "worker_sleep", nil)
	defer sleep.Close()
	sjs, _ := jetstream.New(sleep)
	if _, err := sjs.Publish(ctx, s.Result(conv, task, "sleep"), []byte(`{"content":"slept"}`)); err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, h.Done(), "the sleep worker's result")
	if r, err := h.Result(); err != nil || string(r.Content) != `"slept"` {
		t.Fatalf("result %+v, %v", r, err)
	}
}

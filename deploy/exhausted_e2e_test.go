package deploy

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A task that exhausts its deliveries ends in a DeliveriesExhausted result
// under the shipped users: the worker user of its tool answers it with its
// own consumer's deliveries alone (the server never gives up on the task;
// no worker may load or delete a stored task). Under the old mechanism
// the worker needed the advisory stream and a message get and delete over
// the whole task stream, which no worker user has.
func TestDeliveriesExhaustedWithWorkerUser(t *testing.T) {
	t.Parallel()
	_, workerBin := binaries(t)
	d := startDeployServer(t)
	start := func(id string) *proctest.Process {
		w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL("worker_sleep"), "--inbox-prefix", inboxPrefix("worker_sleep"),
			"--tools", "sleep", "--id", id, "--ack-wait", "1s", "--max-deliver", "1", "-v")
		w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)
		return w
	}
	first := start("first")
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	conv, task := protocol.NewID(), protocol.NewID()
	data, _ := json.Marshal(protocol.Task{TaskID: task, Tool: "sleep", Args: json.RawMessage(`{"seconds":60}`), ConversationID: conv})
	if _, err := js.Publish(ctx, protocol.Subjects{}.Task("sleep"), data); err != nil {
		t.Fatal(err)
	}
	first.WaitLog(t, `"task_id":"`+task, 30*time.Second) // "task started", on its only delivery
	first.Kill()
	start("second")
	oc, err := js.OrderedConsumer(ctx, names.Results, jetstream.OrderedConsumerConfig{FilterSubjects: []string{protocol.Subjects{}.Result(conv, task, "sleep")}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := oc.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("no result: %v", err)
	}
	if r, err := protocol.DecodeResult(m.Data(), task, nil); err != nil || r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeliveriesExhausted || r.Worker != "second" {
		t.Fatalf("result %s: %v", m.Data(), err)
	}
}

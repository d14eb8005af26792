package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A harness for end-to-end fault tests: a nats-server process that can be
// SIGKILLed and restarted on its store, toolworker processes that can be
// SIGKILLed and restarted, and an agent side that publishes tasks and reads
// the results stream.

var (
	natsServerOnce sync.Once
	natsServerBin  string
	natsServerDir  string
)

// natsServerBinary builds nats-server (the module's dependency) once.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	natsServerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "offload-nats-server") //nolint:usetesting // built once for every test of the process: t.TempDir would go with the first test
		if err != nil {
			t.Fatal(err)
		}
		natsServerDir = dir
		natsServerBin = natstest.BuildNATSServer(t, dir)
	})
	if natsServerBin == "" {
		t.Fatal("nats-server was not built")
	}
	return natsServerBin
}

// startToolworker starts a toolworker process serving the built-in sleep
// tool and waits until it serves.
func startToolworker(t *testing.T, bin, url, id string, extra ...string) *proctest.Process {
	t.Helper()
	args := append([]string{"--nats", url, "--tools", "sleep", "--id", id, "-v"}, extra...)
	p := proctest.StartProcess(t, bin, args...)
	p.WaitLog(t, `"msg":"toolworker started"`, 60*time.Second)
	return p
}

// agentConn connects as an agent does: reconnecting forever.
func agentConn(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := natstest.Connect(t, url, natstest.Reconnecting(50*time.Millisecond)...)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// sleepTask is a task of the built-in sleep tool.
func sleepTask(conv string, seconds float64) protocol.Task {
	args, _ := json.Marshal(map[string]any{"seconds": seconds, "message": "done"})
	return protocol.Task{
		TaskID:         protocol.NewID(),
		Tool:           "sleep",
		Args:           args,
		ConversationID: conv,
		Deadline:       time.Now().Add(10 * time.Minute),
	}
}

// publishTask stores task, retrying (with the same Nats-Msg-Id, so that the
// stream keeps one copy) until the server takes it or ctx ends.
func publishTask(ctx context.Context, js jetstream.JetStream, task protocol.Task) error {
	data, err := json.Marshal(task)
	if err != nil {
		return err
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.Publish(pctx, "tools.task."+task.Tool, data, jetstream.WithMsgID(task.TaskID))
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// resultCount returns how many tasks of conv have at least one stored
// result, retrying while the server is away.
func resultCount(ctx context.Context, js jetstream.JetStream, conv string) (int, error) {
	s, err := js.Stream(ctx, natsjs.NamesFor("").Results)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("tools.result."+conv+".>"))
	if err != nil {
		return 0, err
	}
	return len(info.State.Subjects), nil
}

// awaitResults waits until n tasks of conv have a stored result. The
// results stream sends no signal for "n subjects", and a consumer would
// have to outlive the server's restarts: the stream's state is polled.
func awaitResults(t *testing.T, js jetstream.JetStream, conv string, n int, timeout time.Duration) {
	t.Helper()
	offloadtest.EventuallyWithin(t, timeout, fmt.Sprintf("%d tasks with a result", n), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := resultCount(ctx, js, conv)
		if err != nil {
			return err
		}
		if got < n {
			return fmt.Errorf("%d of %d tasks have a result", got, n)
		}
		return nil
	})
}

// storedResult is one result message in the results stream.
type storedResult struct {
	res protocol.Result
	at  time.Time // when the stream stored it
}

// readResults reads every stored result of conv, by task ID.
func readResults(t *testing.T, js jetstream.JetStream, conv string) map[string][]storedResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	oc, err := js.OrderedConsumer(ctx, natsjs.NamesFor("").Results, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"tools.result." + conv + ".>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]storedResult{}
	for {
		msg, err := oc.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			break // nothing more within 2 s: all read
		}
		var r protocol.Result
		if err := json.Unmarshal(msg.Data(), &r); err != nil {
			t.Fatalf("result %s: %v", msg.Data(), err)
		}
		md, _ := msg.Metadata()
		at := time.Time{}
		if md != nil {
			at = md.Timestamp
		}
		out[r.TaskID] = append(out[r.TaskID], storedResult{res: r, at: at})
	}
	return out
}

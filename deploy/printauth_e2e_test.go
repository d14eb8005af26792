package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/authconf"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The entry `toolworker --print-auth USER` prints, pasted into the users
// list of the shipped auth.conf, is the documented way to add a worker
// user for one's own tools: a worker started as that user serves its
// tool end to end (consumer, cancels, registry, results), and the user
// reaches no other tool's consumer.
func TestPrintedWorkerUserServesItsTools(t *testing.T) {
	_, workerBin := binaries(t)
	out, err := exec.Command(workerBin, "--tools", "read_file", "--print-auth", "worker_mine").Output()
	if err != nil || !strings.Contains(string(out), "user: worker_mine, password: $OFFLOAD_WORKER_MINE_PASSWORD") {
		t.Fatalf("toolworker --print-auth: %v\n%s", err, out)
	}
	t.Setenv(authconf.PasswordEnv("worker_mine"), password("worker_mine"))
	dir := t.TempDir()
	shipped := authconf.Shipped().Render()
	end := strings.LastIndex(shipped, "  ]\n}\n")
	auth := shipped[:end] + string(out) + shipped[end:]
	conf, err := os.ReadFile("nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"auth.conf": []byte(auth), "nats-server.conf": conf} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := startDeployServerFrom(t, filepath.Join(dir, "nats-server.conf"), nil)
	d.provision(t)

	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "note.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL("worker_mine"), "--inbox-prefix", inboxPrefix("worker_mine"),
		"--tools", "read_file", "--root", root, "--id", "mine")
	w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)

	// A task of its tool, published as an agent would, is answered.
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conv, task := protocol.NewID(), protocol.NewID()
	data, _ := json.Marshal(protocol.Task{TaskID: task, Tool: "read_file", Args: json.RawMessage(`{"path":"note.txt"}`), ConversationID: conv})
	if _, err := js.Publish(ctx, protocol.Subjects{}.Task("read_file"), data); err != nil {
		t.Fatal(err)
	}
	oc, err := js.OrderedConsumer(ctx, names.Results, jetstream.OrderedConsumerConfig{FilterSubjects: []string{protocol.Subjects{}.Result(conv, task, "read_file")}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := oc.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("no result of the read_file task: %v\n%s", err, w.Logs())
	}
	if r, err := protocol.DecodeResult(m.Data(), task, nil); err != nil || r.Status != protocol.StatusOK || !strings.Contains(string(r.Content), "mine") {
		t.Fatalf("result %s: %v", m.Data(), err)
	}

	// Another tool's consumer is out of its reach.
	var sleep op
	for _, o := range ops(d) {
		if o.name == "bind sleep's task consumer" {
			sleep = o
		}
	}
	if got, err := outcome(t, d, "worker_mine", sleep); err != nil || got != "denied" {
		t.Errorf("worker_mine binding sleep's consumer: %s, %v", got, err)
	}
}

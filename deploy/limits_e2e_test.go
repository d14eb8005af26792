package deploy

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestStoreFillingRefused replays finding 5 of issue 30 against the
// shipped deployment: with the approver's credentials of auth.conf,
// one-megabyte decisions to made-up conversations, until the server
// refuses one. The run (315 of them into a 300 MB store) stopped
// every agent. Scaled to the definitions: the server's store is what the
// limited streams reserve (the sum of their max_bytes, which JetStream
// sets aside for each) plus 64 MiB for the rest, and the loop is allowed
// one message more than the store holds. The decisions stream refuses the
// flood at its max_bytes long before that, named as such; agent run (as
// the agent) still works; agent approve prints the refusal.
func TestStoreFillingRefused(t *testing.T) {
	t.Parallel()
	agentBin, workerBin := binaries(t)
	cfgs, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reserved, decisionsMax int64
	for _, c := range cfgs {
		reserved += max(c.MaxBytes, 0)
		if c.Name == names.Decisions {
			decisionsMax = c.MaxBytes
		}
	}
	const rest = 64 << 20
	store := reserved + rest
	d := startBareDeployServerWith(t, func(o *server.Options) { o.JetStreamMaxStore = store })
	d.provision(t)
	t.Logf("store %d MiB, %d MiB of it reserved by the streams' max_bytes", store>>20, reserved>>20)

	for _, pool := range []struct{ user, tools string }{{"worker_sleep", "sleep"}, {"worker_shell", "shell"}} {
		w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL(pool.user), "--inbox-prefix", inboxPrefix(pool.user), "--tools", pool.tools, "--root", proctest.ToolDir(t), "--id", "limits-e2e-"+pool.tools)
		w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)
	}
	dir := t.TempDir()
	// A conversation paused on an approval, before the flood.
	r := d.agentAs(t, agentBin, dir, "agent", "run", "--model", "test", "--tools", "shell", "--json", "run it")
	if r.code != 3 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	conv, approval := pausedOn(t, r.stdout)

	// The flood, as the approver.
	nc := d.connect(t, "approver", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	payload := []byte(`{"approved":true,"message":"` + strings.Repeat("x", 1_000_000-40) + `"}`)
	sent, allowed := 0, int(store/int64(len(payload)))+1
	var refusal error
	for ; sent < allowed; sent++ {
		if _, err := js.Publish(t.Context(), protocol.Subjects{}.Decision(protocol.NewID(), protocol.NewID()), payload); err != nil {
			refusal = natsjs.Limited(err)
			break
		}
	}
	var le *natsjs.LimitError
	if !errors.As(refusal, &le) || le.Limit != natsjs.LimitBytes {
		t.Fatalf("after %d decisions of 1 MB (store %d MiB): %v, want a refusal at max_bytes", sent, store>>20, refusal)
	}
	if stored := d.streamBytes(t, names.Decisions); stored > uint64(decisionsMax) {
		t.Errorf("decisions hold %d bytes, more than their max_bytes %d", stored, decisionsMax)
	}
	t.Logf("refused after %d decisions of 1 MB: %v", sent, refusal)
	// What room is left, smaller decisions fill.
	for size := len(payload) / 2; size >= 16; size /= 2 {
		for {
			_, err := js.Publish(t.Context(), protocol.Subjects{}.Decision(protocol.NewID(), protocol.NewID()), bytes.Repeat([]byte(" "), size))
			if errors.As(natsjs.Limited(err), &le) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	// Agents still work.
	r = d.agentAs(t, agentBin, dir, "agent", "run", "--model", "test", "--tools", "sleep", "--json", "nap")
	if r.code != 0 || !strings.Contains(r.stdout, `"status":"finished"`) {
		t.Fatalf("agent run after the flood: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// A person's decision is refused too (the decisions stream is full),
	// and agent approve says which limit.
	r = d.agentAs(t, agentBin, dir, "approver", "approve", "--conversation", conv, approval)
	if r.code != 1 || !strings.Contains(r.stderr, "max_bytes limit") || !strings.Contains(r.stderr, "maximum bytes exceeded") {
		t.Fatalf("approve once the decisions are full: exit %d: %s", r.code, r.stderr)
	}
	t.Logf("agent approve: %s", strings.TrimSpace(r.stderr))
}

// pausedOn returns the conversation and the approval's task of a paused
// run's --json output.
func pausedOn(t *testing.T, stdout string) (conv, task string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	i := strings.Index(last, `"task_id":"`)
	j := strings.Index(last, `"conversation_id":"`)
	if i < 0 || j < 0 || !strings.Contains(last, `"kind":"approval"`) {
		t.Fatalf("not paused on an approval: %s", last)
	}
	return last[j+19 : j+19+26], last[i+11 : i+11+26]
}

// streamBytes returns the bytes a stream holds, read as admin.
func (d *deployServer) streamBytes(t *testing.T, stream string) uint64 {
	t.Helper()
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Bytes
}

package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// The approval timeouts of `agent run` and `agent resume` (SPEC §12,
// issue 27 item 2): the run that pauses schedules the timeout's decision
// with its announcement, and the server writes it while no agent runs.

// expirySpec is a spec whose approvals expire after 2 s.
const expirySpec = "approval: {timeout: 2s, message: nobody came}\n"

// decisionsOn returns the first n messages stored on the decision
// subject of task, waiting for each (an ordered consumer: a signal, no
// sleep).
func (d *durable) decisionsOn(conv, task string, n int) []jetstream.Msg {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
	defer cancel()
	oc, err := d.nats.JetStream(d.t).OrderedConsumer(ctx, "TOOLS_DECISIONS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.decision." + conv + "." + task}})
	if err != nil {
		d.t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < n {
		m, err := oc.Next(jetstream.FetchMaxWait(offloadtest.Wait))
		if err != nil {
			d.t.Fatalf("decision %d of %s: %v", len(out)+1, task, err)
		}
		out = append(out, m)
	}
	return out
}

// storedDecision reads the first decision stored for task back with the
// real nats CLI (nats stream get), its data and when it was stored.
func (d *durable) storedDecision(conv, task string) (protocol.Decision, time.Time) {
	d.t.Helper()
	out, err := exec.CommandContext(d.t.Context(), natsCLIPath(d.t), "--no-context", "--server", d.nats.URL(),
		"stream", "get", "TOOLS_DECISIONS", "1", "--json").CombinedOutput()
	if err != nil {
		d.t.Fatalf("nats stream get: %v: %s", err, out)
	}
	var m struct {
		Subject string    `json:"subject"`
		Data    []byte    `json:"data"`
		Time    time.Time `json:"time"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		d.t.Fatalf("nats stream get: %v: %s", err, out)
	}
	if m.Subject != "tools.decision."+conv+"."+task {
		d.t.Fatalf("first decision on %s, want the task's", m.Subject)
	}
	var dec protocol.Decision
	if err := json.Unmarshal(m.Data, &dec); err != nil {
		d.t.Fatalf("decision %s: %v", m.Data, err)
	}
	return dec, m.Time
}

// agent run --spec with approval: {timeout: 2s} pauses (exit 3); with no
// agent process running, the server stores the timeout's decision at the
// timeout; agent resume shows the model the expiry's text, the tool not
// run.
func TestRunApprovalExpiresWithNoProcess(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := writeFile(t, d.dir, "spec.yaml", expirySpec)
	conv, pending := d.paused("--spec", spec, deployProd)
	task := only(t, pending, "approval deploy")
	// Nothing runs now: the decision is the server's.
	d.decisionsOn(conv, task, 1)
	dec, at := d.storedDecision(conv, task)
	if dec.By != "timeout" || dec.Reason != protocol.ReasonExpired || dec.Approved || dec.Message != "nobody came" {
		t.Errorf("stored decision %+v, want the timeout's denial", dec)
	}
	tid, err := protocol.ParseID(task)
	if err != nil {
		t.Fatal(err)
	}
	if at.Before(tid.Timestamp().Add(2 * time.Second)) {
		t.Errorf("decision stored at %s, before the timeout (%s + 2s)", at, tid.Timestamp())
	}
	r := d.agent("resume", "--conversation", conv)
	want := "seen deploy:Tool 'deploy' (task " + task + ") was not approved in time: nobody came"
	if r.code != 0 || r.final["output"] != want {
		t.Errorf("resume: %v\nwant output %q", r, want)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Errorf("deployed %v after the expiry", got)
	}
}

// A person's decision stored before the timeout wins: the timeout's
// decision still lands, second, and is refused; agent resume runs the
// tool.
func TestRunApprovalPersonBeforeTimeoutWins(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := writeFile(t, d.dir, "spec.yaml", expirySpec)
	conv, pending := d.paused("--spec", spec, deployProd)
	task := only(t, pending, "approval deploy")
	d.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	ms := d.decisionsOn(conv, task, 2) // the person's, then the timeout's
	if !strings.Contains(string(ms[1].Data()), `"by":"timeout"`) {
		t.Fatalf("second decision %s, want the timeout's", ms[1].Data())
	}
	r := d.agent("resume", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen deploy:deployed prod" {
		t.Errorf("resume: %v", r)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want prod once", got)
	}
}

// With --approve wait the inline wait receives the timeout's decision
// when the server writes it: the run goes on with the expiry's text.
func TestRunApproveWaitReceivesExpiry(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := writeFile(t, d.dir, "spec.yaml", expirySpec)
	r := d.agent("run", "--spec", spec, "--approve", "wait", "--wait", "1m", deployProd)
	if r.code != 0 || !strings.HasPrefix(r.final["output"].(string), "seen deploy:Tool 'deploy' (task ") ||
		!strings.HasSuffix(r.final["output"].(string), ") was not approved in time: nobody came") {
		t.Errorf("run: %v", r)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Errorf("deployed %v after the expiry", got)
	}
}

// A tool's metadata approval (here on_timeout: approve), advertised by
// its worker, applies to agent run without a spec: the server writes the
// timeout's approval while nothing runs, and agent resume runs the tool.
func TestRunToolMetadataApprovalExpires(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	ran := make(chan string, 1)
	release := tool.Func("release", "Release a version.", func(_ context.Context, _ *tool.RunContext, a deployArgs) (string, error) {
		ran <- a.Target
		return "released " + a.Target, nil
	}, tool.NeedsApproval(), tool.Meta(map[string]any{"approval": map[string]any{"timeout": "2s", "on_timeout": "approve"}}))
	w, err := worker.New(worker.Config{Conn: d.nats.Conn(t), ID: "release-worker", Tools: []*tool.Tool{release}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.StopAndCancel(ctx)
	})
	conv, pending := d.paused(`[{"tool":"release","args":{"target":"v2"}}]`)
	task := only(t, pending, "approval release")
	d.decisionsOn(conv, task, 1)
	if dec, _ := d.storedDecision(conv, task); dec.By != "timeout" || !dec.Approved || dec.OnTimeout != "approve" {
		t.Fatalf("stored decision %+v, want the timeout's approval", dec)
	}
	r := d.agent("resume", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen release:released v2" {
		t.Errorf("resume: %v", r)
	}
	if got := offloadtest.WaitOrTimeout(t, ran, "the release"); got != "v2" {
		t.Errorf("released %q", got)
	}
}

// A non-blocking call (--approve background) announced by agent run is
// scheduled the same way: the run pauses with only it pending, the
// server writes the timeout's denial while nothing runs, and agent resume
// tells the model as the follow-up.
func TestRunNonBlockingApprovalExpires(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := writeFile(t, d.dir, "spec.yaml", expirySpec)
	r := d.agent("run", "--spec", spec, "--approve", "background", deployProd)
	if r.code != exitPaused {
		t.Fatalf("run should pause: %v", r)
	}
	conv, task := r.conv(), only(t, r.pending(), "approval deploy")
	d.decisionsOn(conv, task, 1)
	if dec, _ := d.storedDecision(conv, task); dec.By != "timeout" || dec.Approved {
		t.Fatalf("stored decision %+v, want the timeout's denial", dec)
	}
	done := d.agent("resume", "--conversation", conv)
	if want := "seen user:Tool 'deploy' (task " + task + ") was not approved in time: nobody came"; done.code != 0 || done.final["output"] != want {
		t.Errorf("resume: %v\nwant output %q", done, want)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Errorf("deployed %v after the expiry", got)
	}
}

package web_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/natsjs/toolctl"
)

// /v1/tools is the operator's hands (SPEC §19): the roles operator and
// admin list, pause and resume a tool, each action taken and audited in
// the token holder's name (a by in the body is not heard); a viewer or an
// approver is refused; a bad tool name is 400, an unknown dead letter 404.
func TestToolsRoutes(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, opToken+" operator ops\n"+approverToken+" approver ann\n"+viewerToken+" viewer val\n"+adminToken+" admin root\n",
		agentproc.FaceOptions{})
	for _, tok := range []string{viewerToken, approverToken} {
		if code, m := call(t, srv, "GET", "/v1/tools", tok, ""); code != 403 {
			t.Errorf("GET /v1/tools as a non-operator: %d %v", code, m)
		}
		if code, m := call(t, srv, "POST", "/v1/tools/deploy/pause", tok, ""); code != 403 {
			t.Errorf("a pause by a non-operator: %d %v", code, m)
		}
	}
	if code, m := call(t, srv, "POST", "/v1/tools/deploy/pause", opToken, `{"for":"1h","by":"mallory"}`); code != 200 || m["by"] != "ops" || m["paused"] != true {
		t.Fatalf("pause: %d %v", code, m)
	}
	code, m := call(t, srv, "GET", "/v1/tools", opToken, "")
	tools, _ := m["tools"].([]any)
	if code != 200 || len(tools) != 1 {
		t.Fatalf("list: %d %v", code, m)
	}
	deploy, _ := tools[0].(map[string]any)
	paused, _ := deploy["paused"].(map[string]any)
	if deploy["name"] != "deploy" || paused["by"] != "ops" {
		t.Errorf("listed %v", deploy)
	}
	if until, err := time.Parse(time.RFC3339Nano, paused["until"].(string)); err != nil || time.Until(until) < 59*time.Minute {
		t.Errorf("paused until %v (%v), want in an hour", paused["until"], err)
	}
	if code, m := call(t, srv, "POST", "/v1/tools/deploy/resume", adminToken, ""); code != 200 || m["by"] != "root" {
		t.Fatalf("resume by admin: %d %v", code, m)
	}
	if code, m := call(t, srv, "GET", "/v1/tools", opToken, ""); code != 200 || m["tools"].([]any)[0].(map[string]any)["paused"] != nil {
		t.Errorf("list after the resume: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/tools/deploy/pause", opToken, `{"for":"-1m"}`); code != 400 {
		t.Errorf("a pause for a negative time: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/tools/de.ploy/pause", opToken, ""); code != 400 {
		t.Errorf("a pause of a bad name: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/tools/deploy/dead/7/replay", opToken, ""); code != 404 || errCode(m) != "no_dead_letter" {
		t.Errorf("replay of an unknown dead letter: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/tools/deploy/cancel", opToken, `{"tenant":"acme"}`); code != 200 || len(m["cancelled"].([]any)) != 0 {
		t.Errorf("cancel with nothing queued: %d %v", code, m)
	}
	// The audit: pause by ops, resume by root, cancel by ops (the refused
	// requests left none).
	js := b.Srv.JetStream(t)
	c, err := js.OrderedConsumer(t.Context(), "TOOLS_AUDIT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{natsjs.AuditSubject("", "deploy")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		msg, err := c.Next(jetstream.FetchMaxWait(servetest.Wait))
		if err != nil {
			t.Fatal(err)
		}
		var rec toolctl.Record
		if err := json.Unmarshal(msg.Data(), &rec); err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Action+" by "+rec.By)
	}
	if want := "[pause by ops resume by root cancel by ops]"; fmt.Sprint(got) != want {
		t.Errorf("audit %s, want %s", fmt.Sprint(got), want)
	}
	info, err := js.Stream(t.Context(), "TOOLS_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 3 {
		t.Errorf("%d audit records, want 3", n)
	}
}

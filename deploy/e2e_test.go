package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

var bins proctest.Binaries

// binaries builds cmd/agent and cmd/toolworker once.
func binaries(t *testing.T) (agent, toolworker string) {
	t.Helper()
	dir := bins.Dir(t, "../cmd/agent", "../cmd/toolworker")
	return filepath.Join(dir, "agent"), filepath.Join(dir, "toolworker")
}

// natsCLI returns the path of the nats CLI (see natstest.NATSCLI).
func natsCLI(t *testing.T) string { return natstest.NATSCLI(t) }

// roleURL is the server's URL with role's user and password, as the README
// tells operators to pass it.
func (d *deployServer) roleURL(role string) string {
	return strings.Replace(d.srv.ClientURL(), "nats://", "nats://"+role+":"+password(role)+"@", 1)
}

// TestDeploymentWithRoles runs the binaries as the README's deployment
// section does, each with its role: admin provisions, a worker and an agent
// run a call end to end, an approver decides with the nats CLI and cannot
// publish a task.
func TestDeploymentWithRoles(t *testing.T) {
	t.Parallel()
	agentBin, workerBin := binaries(t)
	cli := natsCLI(t)
	d := startBareDeployServer(t)

	// The agent may not provision: it is told what is missing.
	if out, err := exec.Command(agentBin, "provision", "--nats", d.roleURL("agent"), "--inbox-prefix", inboxPrefix("agent")).CombinedOutput(); err == nil || !strings.Contains(string(out), "is missing and this user may not create it") {
		t.Fatalf("agent provision as agent: %v\n%s", err, out)
	}
	out, err := exec.Command(agentBin, "provision", "--nats", d.roleURL("admin"), "--tools", "sleep").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stream TOOLS_TASKS") || !strings.Contains(string(out), "consumer TOOLS_TASKS task_sleep") ||
		strings.Contains(string(out), "EXHAUSTED") {
		t.Fatalf("agent provision: %v\n%s", err, out)
	}

	// A deployment of a release that kept max-deliveries advisories in
	// TOOLS_EXHAUSTED is told the stream is no longer used.
	admin := d.connect(t, "admin", nil)
	ajs, _ := jetstream.New(admin)
	if _, err := ajs.CreateStream(t.Context(), jetstream.StreamConfig{Name: "TOOLS_EXHAUSTED", Subjects: []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TOOLS_TASKS.>"}}); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	if out, err := exec.Command(agentBin, "provision", "--nats", d.roleURL("admin"), "--tools", "sleep").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "stream TOOLS_EXHAUSTED is no longer used") || !strings.Contains(string(out), "nats stream rm -f TOOLS_EXHAUSTED") {
		t.Fatalf("agent provision over an old deployment: %v\n%s", err, out)
	}

	w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL("worker_sleep"), "--inbox-prefix", inboxPrefix("worker_sleep"), "--tools", "sleep", "--id", "deploy-e2e")
	w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)

	run := exec.CommandContext(t.Context(), agentBin, "run", "--nats", d.roleURL("agent"), "--inbox-prefix", inboxPrefix("agent"), "--model", "test", "--tools", "sleep", "--json", "nap")
	run.Dir = t.TempDir()
	var runErr bytes.Buffer
	run.Stderr = &runErr
	stdout, err := run.Output()
	if err != nil {
		t.Fatalf("agent run: %v\n%s", err, runErr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	var final struct{ Type, Status string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil || final.Status != "finished" {
		t.Fatalf("final %q: %v\nstderr: %s", lines[len(lines)-1], err, runErr.String())
	}
	if strings.Contains(runErr.String(), password("agent")) {
		t.Errorf("the agent printed its password:\n%s", runErr.String())
	}

	// The approver with the nats CLI, as the README shows.
	nats := func(role string, args ...string) (string, error) {
		// The credentials in the environment, not in argv (which any
		// local user reads in /proc), as an operator should pass them.
		cmd := exec.Command(cli, append([]string{"--server", d.srv.ClientURL(), "--inbox-prefix", inboxPrefix(role), "--no-context"}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_USER="+role, "NATS_PASSWORD="+password(role))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	conv, task := protocol.NewID(), protocol.NewID()
	if out, err := nats("approver", "pub", "-J", "tools.decision."+conv+"."+task, `{"approved":true,"by":"alice"}`); err != nil {
		t.Errorf("approver decision: %v\n%s", err, out)
	}
	before := d.lastSeq(t, names.Tasks)
	evil := fmt.Sprintf(`{"task_id":%q,"tool":"sleep","args":{"seconds":0},"conversation_id":%q,"approved":true}`, protocol.NewID(), conv)
	for _, role := range []string{"approver", "answerer"} {
		if out, err := nats(role, "pub", "-J", "tools.task.sleep", evil); err == nil {
			t.Errorf("%s published a task:\n%s", role, out)
		}
		if out, err := nats(role, "pub", "tools.task.sleep", evil); err == nil && !strings.Contains(strings.ToLower(out), "permissions violation") {
			t.Logf("%s core publish: %s", role, out)
		}
	}
	if after := d.lastSeq(t, names.Tasks); after != before {
		t.Errorf("the task stream changed: last sequence %d -> %d", before, after)
	}
	if out, err := nats("answerer", "pub", "-J", "tools.answer."+conv+"."+task, `{"content":"42"}`); err != nil {
		t.Errorf("answerer answer: %v\n%s", err, out)
	}
	if out, err := nats("answerer", "pub", "-J", "tools.result."+conv+"."+task+".shell", `{"content":"forged"}`); err == nil {
		t.Errorf("answerer forged a worker's result:\n%s", out)
	}
}

package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/proctest"
)

// ran is how one run of the agent binary ended.
type ran struct {
	code           int
	stdout, stderr string
}

// agentAs runs the agent binary as role of auth.conf (its user, password
// and inbox prefix) in dir.
func (d *deployServer) agentAs(t *testing.T, bin, dir, role string, args ...string) ran {
	t.Helper()
	args = append(args, "--nats", d.roleURL(role), "--inbox-prefix", inboxPrefix(role))
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := ran{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("agent %v as %s: %v", args, role, err)
	}
	return r
}

// TestPeopleCommandsWithRoles runs agent pending, approve, deny and answer
// as the approver and answerer users of the shipped auth.conf (finding 6
// of issue 30: they failed with "this user may not look stream
// TOOLS_DECISIONS up"): each lists the paused conversation's calls from
// the pending records and resolves its own kind, first wins; resume, as
// the agent, finishes the conversation; neither person can read its
// history.
func TestPeopleCommandsWithRoles(t *testing.T) {
	t.Parallel()
	agentBin, workerBin := binaries(t)
	d := startDeployServer(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte(`external_tools:
  - name: ask_human
    description: Ask a person.
    parameters: {type: object, properties: {question: {type: string}}, required: [question]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL("worker_shell"), "--inbox-prefix", inboxPrefix("worker_shell"), "--tools", "shell", "--root", proctest.ToolDir(t), "--id", "people-e2e")
	w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)

	r := d.agentAs(t, agentBin, dir, "agent", "run", "--model", "test", "--tools", "shell", "--spec", spec, "--json",
		"ask and run")
	if r.code != 3 {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var final struct {
		ConversationID string `json:"conversation_id"`
		Pending        []struct {
			TaskID string `json:"task_id"`
			Kind   string `json:"kind"`
		} `json:"pending"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil || len(final.Pending) != 2 {
		t.Fatalf("final %s: %v", lines[len(lines)-1], err)
	}
	conv := final.ConversationID
	var approval, external string
	for _, p := range final.Pending {
		if p.Kind == "approval" {
			approval = p.TaskID
		} else {
			external = p.TaskID
		}
	}

	for _, role := range []string{"approver", "answerer", "agent"} {
		for _, args := range [][]string{{"pending", "--conversation", conv}, {"pending"}} {
			r := d.agentAs(t, agentBin, dir, role, args...)
			// Nothing refused on the way: stderr stays empty.
			if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, approval+" approval shell ") || !strings.Contains(r.stdout, external+" external ask_human ") {
				t.Fatalf("%v as %s: exit %d\nstdout:\n%s\nstderr:\n%s", args, role, r.code, r.stdout, r.stderr)
			}
		}
		if role == "agent" {
			continue
		}
		// Neither person reads a conversation's state or history.
		if r := d.agentAs(t, agentBin, dir, role, "history", "--conversation", conv); r.code == 0 || strings.Contains(r.stdout, "ask_human") || !strings.Contains(r.stderr, "permission denied") {
			t.Errorf("history as %s: exit %d: %s", role, r.code, r.stderr)
		}
	}
	if r := d.agentAs(t, agentBin, dir, "approver", "approve", "--conversation", conv, approval, "--by", "alice"); r.code != 0 {
		t.Fatalf("approve as approver: exit %d: %s", r.code, r.stderr)
	}
	if r := d.agentAs(t, agentBin, dir, "approver", "deny", "--conversation", conv, approval); r.code != 1 || !strings.Contains(r.stderr, "already answered") {
		t.Fatalf("a second decision as approver: exit %d: %s", r.code, r.stderr)
	}
	if r := d.agentAs(t, agentBin, dir, "answerer", "approve", "--conversation", conv, approval); r.code != 1 {
		t.Fatalf("approve as answerer: exit %d: %s", r.code, r.stderr)
	}
	if r := d.agentAs(t, agentBin, dir, "answerer", "answer", "--conversation", conv, external, `{"content":"42"}`); r.code != 0 {
		t.Fatalf("answer as answerer: exit %d: %s", r.code, r.stderr)
	}
	// Both are resolved: nothing is listed any more.
	for _, role := range []string{"approver", "answerer"} {
		if r := d.agentAs(t, agentBin, dir, role, "pending", "--conversation", conv); r.code != 0 || r.stdout != "" {
			t.Fatalf("pending as %s once resolved: exit %d\nstdout:\n%s\nstderr:\n%s", role, r.code, r.stdout, r.stderr)
		}
	}
	r = d.agentAs(t, agentBin, dir, "agent", "resume", "--spec", spec, "--conversation", conv, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, "ask_human returned 42") || !strings.Contains(r.stdout, "- shell returned {") {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// Finished, the conversation has no pending record.
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(t.Context(), names.PendingBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(t.Context(), conv); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the finished conversation's pending record: %v", err)
	}
	if r := d.agentAs(t, agentBin, dir, "approver", "pending"); r.code != 0 || r.stdout != "" {
		t.Errorf("pending of all as approver once finished: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

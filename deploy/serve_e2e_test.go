package deploy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
)

// TestServeWithRoles runs agent serve as the agent user of the shipped
// auth.conf (the streams provisioned by admin): it creates its wake
// consumers, a run started over its API pauses on an approval, the
// approver's decision wakes it and it finishes, the approval's
// announcement and resolution are notified (--notify: the notify
// consumer, created and acked as agent); nothing is refused on the way.
func TestServeWithRoles(t *testing.T) {
	t.Parallel()
	agentBin, workerBin := binaries(t)
	d := startDeployServer(t)
	dir := t.TempDir()
	spec, tokens := filepath.Join(dir, "ops.yaml"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(spec, []byte("name: ops\ntools: [shell]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "operator-token-0123456789"
	if err := os.WriteFile(tokens, []byte(token+" operator ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL("worker_shell"), "--inbox-prefix", inboxPrefix("worker_shell"), "--tools", "shell", "--id", "serve-e2e")
	w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)
	notes := make(chan map[string]any, 8)
	recv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var note map[string]any
		_ = json.NewDecoder(r.Body).Decode(&note)
		notes <- note
	}))
	defer recv.Close()
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	s := proctest.StartProcess(t, agentBin, "serve", "--nats", d.roleURL("agent"), "--inbox-prefix", inboxPrefix("agent"), "--model", "test",
		"--spec", spec, "--tokens", tokens, "--http", addr, "--store", filepath.Join(dir, "store"), "--notify", recv.URL)
	s.WaitLog(t, "agent serve: http://", 30*time.Second)

	call := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil || resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s\n%s", method, path, resp.StatusCode, raw, s.Logs())
		}
		return m
	}
	final := call("POST", "/v1/conversations?wait=1", `{"agent":"ops","prompt":"run it"}`)
	pending, _ := final["pending"].([]any)
	if final["status"] != "paused" || len(pending) != 1 {
		t.Fatalf("start: %v\n%s", final, s.Logs())
	}
	conv, task := final["conversation_id"].(string), pending[0].(map[string]any)["task_id"].(string)
	if r := d.agentAs(t, agentBin, dir, "approver", "approve", "--conversation", conv, task, "--by", "alice"); r.code != 0 {
		t.Fatalf("approve as approver: exit %d: %s", r.code, r.stderr)
	}
	// The continuation runs in the serve process: its state is polled.
	offloadtest.Eventually(t, "the conversation finished", func() error {
		if v := call("GET", "/v1/conversations/"+conv, ""); v["status"] != "finished" || !strings.Contains(fmt.Sprint(v["output"]), "shell returned") {
			return fmt.Errorf("%v", v)
		}
		return nil
	})
	// --notify: the notify consumer read and acked as the agent user.
	for _, event := range []string{"approval_requested", "approval_resolved"} {
		if note := offloadtest.WaitOrTimeout(t, notes, event); note["event"] != event || note["task_id"] != task {
			t.Errorf("notification %v, want %s of task %s", note, event, task)
		}
	}
	if logs := s.Logs(); strings.Contains(logs, "ermission") || strings.Contains(logs, "refused") {
		t.Errorf("serve's logs name a refusal:\n%s", logs)
	}
}

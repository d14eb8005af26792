package deploy

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/proctest"
)

// TestServeMCPWithRoles runs agent serve --mcp as the serve user of the
// shipped auth.conf: a task created over MCP is stored, read back and
// listed (the service's bucket: a create, a direct get, batched direct
// gets; no consumer) with nothing refused.
func TestServeMCPWithRoles(t *testing.T) {
	t.Parallel()
	agentBin, _ := binaries(t)
	d := startDeployServer(t)
	dir := t.TempDir()
	spec, tokens := filepath.Join(dir, "ops.yaml"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(spec, []byte("name: ops\ntools: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "operator-token-0123456789"
	if err := os.WriteFile(tokens, []byte(token+" operator ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	s := proctest.StartProcessEnv(t, append(os.Environ(), "NATS_URL="+d.roleURL("serve"), "NATS_INBOX_PREFIX="+inboxPrefix("serve")),
		agentBin, "serve", "--mcp", "--model", "test", "--spec", spec, "--tokens", tokens, "--http", addr, "--store", filepath.Join(dir, "store"))
	s.WaitLog(t, "agent serve: http://", 30*time.Second)
	rpc := func(body string) map[string]any {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out["error"] != nil {
			t.Fatalf("%s: %d %v %v\n%s", body, resp.StatusCode, out, err, s.Logs())
		}
		return out["result"].(map[string]any)
	}
	created := rpc(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ops","arguments":{"prompt":"hello"},"task":{"ttl":60000}}}`)
	id := created["task"].(map[string]any)["taskId"].(string)
	if got := rpc(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"` + id + `"}}`); got["taskId"] != id || got["status"] == nil {
		t.Fatalf("tasks/get: %v", got)
	}
	list := rpc(`{"jsonrpc":"2.0","id":3,"method":"tasks/list"}`)
	if tasks, _ := list["tasks"].([]any); len(tasks) != 1 || tasks[0].(map[string]any)["taskId"] != id {
		t.Fatalf("tasks/list: %v", list)
	}
	if strings.Contains(s.Logs(), "Permissions Violation") {
		t.Fatalf("a permission refused:\n%s", s.Logs())
	}
}

package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/internal/offloadtest"
)

// A replica SIGKILLed while an MCP task waits for a person (SPEC §17):
// the TypeScript SDK's client created the task on it and was reading its
// result there; the task's record and status are the store's, so the
// other replica answers tasks/get and tasks/result, asks the approval as
// an elicitation, and the task completes through it.
func TestServeE2EMCPTaskKilledReplica(t *testing.T) {
	c := mcptest.NewClient(t)
	w := newServeWorld(t)
	const admin = "admin-token-0123456789abc"
	if err := os.WriteFile(w.tokens, []byte(admin+" admin ann\n"+serveViewer+" viewer val\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r1, url1 := w.replica(t, "--mcp")
	_, url2 := w.replica(t, "--mcp")
	mcptest.OK[map[string]any](c, map[string]any{"op": "connect", "client": "one", "url": url1 + "/mcp", "token": admin})
	mcptest.OK[map[string]any](c, map[string]any{"op": "connect", "client": "two", "url": url2 + "/mcp", "token": admin,
		"elicit": map[string]any{"approved": true, "message": "go"}})

	prompt := `[{"tool":"deploy","args":{"target":"prod"}}]`
	created := mcptest.OK[struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}](c, map[string]any{"op": "create", "client": "one", "tool": "ops", "args": map[string]any{"prompt": prompt}})
	id := created.Task.TaskID
	offloadtest.Eventually(t, "the task waiting for a person", func() bool {
		var got struct {
			Status string `json:"status"`
		}
		o := c.Do(map[string]any{"op": "get", "client": "one", "taskId": id})
		return json.Unmarshal(o.OK, &got) == nil && got.Status == "input_required"
	})
	// The client reads its result on the replica, which asks the approval
	// (a client that cannot elicit: the call still waits).
	mcptest.OK[map[string]any](c, map[string]any{"op": "result", "client": "one", "taskId": id, "async": "first"})
	r1.Kill()
	offloadtest.WaitOrTimeout(t, r1.Done(), "the replica killed")
	if o := c.Do(map[string]any{"op": "await", "name": "first"}); o.Error == "" {
		t.Fatalf("the result read on the killed replica: %s", o.OK)
	}

	res := mcptest.OK[struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}](c, map[string]any{"op": "result", "client": "two", "taskId": id})
	if res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "deploy:deployed prod") {
		t.Fatalf("result through the other replica: %+v", res)
	}
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod"}) {
		t.Errorf("deployed %v, want [prod] once", got)
	}
	var done struct {
		Status string `json:"status"`
	}
	if o := c.Do(map[string]any{"op": "get", "client": "two", "taskId": id}); json.Unmarshal(o.OK, &done) != nil || done.Status != "completed" {
		t.Fatalf("tasks/get after: %s %s", o.OK, o.Error)
	}
}

package mcpface_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// tokens of the tests' faces: a host's token given the roles that call
// and answer (admin, as the tests name it, though it is no admin), an
// operator (who calls but decides nothing), an admin, a viewer.
const tokens = "admin-token-0123456789abc operator,approver,answerer alice\n" +
	"operator-token-0123456789 operator ops-team\n" +
	"other-admin-token-0123456 admin mallory\n" +
	"viewer-token-0123456789ab viewer bob\n" +
	"acme-operator-token-0123x operator acme-ops tenant=acme\n"

const (
	admin    = "admin-token-0123456789abc"
	operator = "operator-token-0123456789"
	other    = "other-admin-token-0123456"
	viewer   = "viewer-token-0123456789ab"
	acme     = "acme-operator-token-0123x"
)

// task is an MCP task as the client reads it.
type task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
}

// toolResult is a CallToolResult as the client reads it.
type toolResult struct {
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	Meta              map[string]any `json:"_meta"`
}

func (r toolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// waitStatus polls tasks/get of id on client until its status is want.
func waitStatus(t *testing.T, c *mcptest.Client, client, id, want string) task {
	t.Helper()
	deadline := time.Now().Add(servetest.Wait)
	for {
		got := mcptest.OK[task](c, map[string]any{"op": "get", "client": client, "taskId": id})
		if got.Status == want {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: status %s (%s), want %s", id, got.Status, got.StatusMessage, want)
		}
		time.Sleep(20 * time.Millisecond) // polled, as an MCP client polls
	}
}

// TestTasksTwoReplicas drives two agent serve replicas' MCP faces with
// the TypeScript SDK's client: it lists the agents as tools; runs one as
// a task created on one replica, whose status, result and approval's
// elicitation are served by the other; runs one with the SDK's
// callToolStream end to end; cancels another; and another token finds
// none of the tasks.
func TestTasksTwoReplicas(t *testing.T) {
	c := mcptest.NewClient(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{MCP: true})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{MCP: true})
	approve := map[string]any{"approved": true}
	for _, conn := range []map[string]any{
		{"client": "a", "url": srvA.URL + "/mcp", "token": admin, "elicit": approve},
		{"client": "b", "url": srvB.URL + "/mcp", "token": admin, "elicit": approve},
		{"client": "other", "url": srvB.URL + "/mcp", "token": other, "elicit": approve},
	} {
		conn["op"] = "connect"
		caps := mcptest.OK[map[string]any](c, conn)
		if _, ok := caps["tasks"]; !ok {
			t.Fatalf("server capabilities %v: no tasks", caps)
		}
	}

	// The agents, as tools that may run as tasks.
	tools := mcptest.OK[[]map[string]any](c, map[string]any{"op": "list", "client": "a"})
	if len(tools) != 1 || tools[0]["name"] != "ops" {
		t.Fatalf("tools %v", tools)
	}
	exec, _ := tools[0]["execution"].(map[string]any)
	schema, _ := tools[0]["inputSchema"].(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	if exec["taskSupport"] != "optional" || props["prompt"] == nil || props["conversation_id"] == nil {
		t.Fatalf("tool %v", tools[0])
	}

	// A task created on a; its status, its result and its approval's
	// elicitation on b.
	created := mcptest.OK[struct {
		Task task           `json:"task"`
		Meta map[string]any `json:"_meta"`
	}](c, map[string]any{"op": "create", "client": "a", "tool": "ops", "args": map[string]any{"prompt": "deploy web"}})
	id, conv := created.Task.TaskID, created.Meta["offload/conversation_id"]
	if id == "" || created.Task.Status != "working" || conv == nil {
		t.Fatalf("created %+v", created)
	}
	waiting := waitStatus(t, c, "b", id, "input_required")
	if !strings.Contains(waiting.StatusMessage, "deploy") {
		t.Fatalf("input_required: %+v", waiting)
	}
	if o := c.Do(map[string]any{"op": "get", "client": "other", "taskId": id}); o.Error == "" || !strings.Contains(o.Error, "not found") {
		t.Fatalf("another token's tasks/get: %+v, want not found", o)
	}
	if o := c.Do(map[string]any{"op": "result", "client": "other", "taskId": id}); o.Error == "" || !strings.Contains(o.Error, "not found") {
		t.Fatalf("another token's tasks/result: %+v, want not found", o)
	}
	res := mcptest.OK[toolResult](c, map[string]any{"op": "result", "client": "b", "taskId": id})
	if res.IsError || !strings.Contains(res.text(), "done deployed web") || res.StructuredContent["status"] != "finished" {
		t.Fatalf("result %+v", res)
	}
	related, _ := res.Meta["io.modelcontextprotocol/related-task"].(map[string]any)
	if related["taskId"] != id || res.Meta["offload/conversation_id"] != conv {
		t.Fatalf("result's _meta %v", res.Meta)
	}
	asked := mcptest.OK[[]map[string]any](c, map[string]any{"op": "elicitations", "client": "b"})
	if len(asked) != 1 || !strings.Contains(asked[0]["message"].(string), "deploy") {
		t.Fatalf("elicitations %v", asked)
	}
	meta, _ := asked[0]["_meta"].(map[string]any)
	if rt, _ := meta["io.modelcontextprotocol/related-task"].(map[string]any); rt["taskId"] != id {
		t.Fatalf("elicitation not related to the task: %v", asked[0])
	}
	// The status notifications of the result's stream, in order.
	var told []string
	for _, n := range mcptest.OK[[]map[string]any](c, map[string]any{"op": "statuses", "client": "b"}) {
		if n["taskId"] == id {
			told = append(told, n["status"].(string))
		}
	}
	if strings.Join(told, " ") != "input_required working completed" && strings.Join(told, " ") != "input_required completed" {
		t.Fatalf("status notifications %v", told)
	}
	waitStatus(t, c, "a", id, "completed")
	// The decision: the one path's, by the token's name, channel mcp.
	decision := decisionOf(t, b, conv.(string))
	if decision["by"] != "alice" || decision["channel"] != "mcp" || decision["approved"] != true {
		t.Fatalf("decision %v", decision)
	}
	w.Mu.Lock()
	deploys := w.Deploys["web"]
	w.Mu.Unlock()
	if deploys != 1 {
		t.Fatalf("deploys of web: %d, want 1", deploys)
	}

	// The SDK's own task flow: created, polled, input_required, result
	// with the elicitation answered.
	stream := mcptest.OK[[]map[string]any](c, map[string]any{"op": "stream", "client": "a", "tool": "ops", "args": map[string]any{"prompt": "deploy db"}})
	var types []string
	for _, m := range stream {
		types = append(types, m["type"].(string))
	}
	last := stream[len(stream)-1]
	if types[0] != "taskCreated" || last["type"] != "result" {
		t.Fatalf("stream %v", stream)
	}
	if r, _ := last["result"].(map[string]any); !strings.Contains(toJSON(r), "done deployed db") {
		t.Fatalf("stream's result %v", last)
	}

	// A task cancelled on the other replica: cancelled, its run ended.
	slow := mcptest.OK[struct {
		Task task `json:"task"`
	}](c, map[string]any{"op": "create", "client": "a", "tool": "ops", "args": map[string]any{"prompt": "slow s1"}})
	select {
	case <-w.SlowStarted:
	case <-time.After(servetest.Wait):
		t.Fatal("slow did not start")
	}
	cancelled := mcptest.OK[task](c, map[string]any{"op": "cancel", "client": "b", "taskId": slow.Task.TaskID})
	if cancelled.Status != "cancelled" {
		t.Fatalf("cancel: %+v", cancelled)
	}
	waitStatus(t, c, "a", slow.Task.TaskID, "cancelled")
	if o := c.Do(map[string]any{"op": "cancel", "client": "a", "taskId": slow.Task.TaskID}); o.Error == "" {
		t.Fatalf("a cancelled task cancelled again: %+v", o)
	}

	// tasks/list: the caller's tasks, on either replica; another token's
	// list holds none of them.
	list := mcptest.OK[struct {
		Tasks []task `json:"tasks"`
	}](c, map[string]any{"op": "tasks", "client": "b"})
	statuses := map[string]string{}
	for _, tk := range list.Tasks {
		statuses[tk.TaskID] = tk.Status
	}
	if len(list.Tasks) != 3 || statuses[id] != "completed" || statuses[slow.Task.TaskID] != "cancelled" {
		t.Fatalf("tasks/list %+v", list.Tasks)
	}
	if others := mcptest.OK[struct {
		Tasks []task `json:"tasks"`
	}](c, map[string]any{"op": "tasks", "client": "other"}); len(others.Tasks) != 0 {
		t.Fatalf("another token's tasks/list: %+v", others.Tasks)
	}
}

// TestPlainCallsAndRoles: a plain tools/call runs to the end, asking
// the calls that wait for people as elicitations of a client that may
// answer them, else answering what waits; an operator's answer to an
// approval's elicitation is refused (the call still waits); a viewer
// calls nothing; no token is 401.
func TestPlainCallsAndRoles(t *testing.T) {
	c := mcptest.NewClient(t)
	w := servetest.Setup(t)
	close(w.SlowGate)
	a := w.Replica(t, "a")
	srv, _ := a.Face(t, tokens, agentproc.FaceOptions{MCP: true})
	for _, conn := range []map[string]any{
		{"client": "op", "url": srv.URL + "/mcp", "token": operator, "elicit": map[string]any{"approved": true}},
		{"client": "viewer", "url": srv.URL + "/mcp", "token": viewer},
		{"client": "admin", "url": srv.URL + "/mcp", "token": admin, "elicit": map[string]any{"approved": true}},
		{"client": "acme", "url": srv.URL + "/mcp", "token": acme},
	} {
		conn["op"] = "connect"
		mcptest.OK[map[string]any](c, conn)
	}
	done := mcptest.OK[toolResult](c, map[string]any{"op": "call", "client": "op", "tool": "ops", "args": map[string]any{"prompt": "slow s1"}})
	if done.IsError || !strings.Contains(done.text(), "done slowed s1") || done.StructuredContent["status"] != "finished" {
		t.Fatalf("plain call: %+v", done)
	}
	conv, _ := done.StructuredContent["conversation_id"].(string)
	again := mcptest.OK[toolResult](c, map[string]any{"op": "call", "client": "op", "tool": "ops",
		"args": map[string]any{"prompt": "deploy web", "conversation_id": conv}})
	pending, _ := again.StructuredContent["pending"].([]any)
	if again.IsError || again.StructuredContent["status"] != "paused" || again.StructuredContent["conversation_id"] != conv || len(pending) != 1 {
		t.Fatalf("paused call: %+v", again)
	}
	if p, _ := pending[0].(map[string]any); p["tool"] != "deploy" || p["kind"] != "approval" || p["args_digest"] == "" {
		t.Fatalf("pending %v", pending)
	}

	// An admin's plain call: its approval asked as an elicitation and
	// decided by the answer (channel mcp), the run continued to its end.
	asked := mcptest.OK[toolResult](c, map[string]any{"op": "call", "client": "admin", "tool": "ops", "args": map[string]any{"prompt": "deploy api"}})
	if asked.IsError || !strings.Contains(asked.text(), "done deployed api") {
		t.Fatalf("plain call with an elicitation: %+v", asked)
	}
	if d := decisionOf(t, a, asked.StructuredContent["conversation_id"].(string)); d["by"] != "alice" || d["channel"] != "mcp" {
		t.Fatalf("decision %v", d)
	}
	if e := mcptest.OK[[]map[string]any](c, map[string]any{"op": "elicitations", "client": "op"}); len(e) != 0 {
		t.Fatalf("an operator was asked approvals it may not give: %v", e)
	}

	// An operator's task: its approval is asked, its answer refused.
	created := mcptest.OK[struct {
		Task task           `json:"task"`
		Meta map[string]any `json:"_meta"`
	}](c, map[string]any{"op": "create", "client": "op", "tool": "ops", "args": map[string]any{"prompt": "deploy db"}})
	waitStatus(t, c, "op", created.Task.TaskID, "input_required")
	refused := postMCP(t, srv.URL, operator, `{"jsonrpc":"2.0","id":"offload-mcp/`+created.Task.TaskID+`/01ARZ3NDEKTSV4RRFFQ69G5FAV/x","result":{"action":"accept","content":{"approved":true}}}`)
	if refused != http.StatusAccepted { // a call not pending: nothing to decide
		t.Fatalf("an answer to no call: %d", refused)
	}
	st, err := a.Svc.Get(t.Context(), created.Meta["offload/conversation_id"].(string))
	if err != nil || len(st.Pending) != 1 {
		t.Fatalf("pending: %+v, %v", st, err)
	}
	digest, _ := protocol.ArgsDigest(st.Pending[0].Args)
	answer := `{"jsonrpc":"2.0","id":"offload-mcp/` + created.Task.TaskID + `/` + st.Pending[0].TaskID + `/` + digest + `","result":{"action":"accept","content":{"approved":true}}}`
	if code := postMCP(t, srv.URL, operator, answer); code != http.StatusForbidden {
		t.Fatalf("an operator's approval: %d, want 403", code)
	}
	if code := postMCP(t, srv.URL, other, answer); code != http.StatusNotFound {
		t.Fatalf("another token's answer to the task's elicitation: %d, want 404", code)
	}
	waitStatus(t, c, "op", created.Task.TaskID, "input_required")

	// A token bound to a tenant starts its tenant's conversations and
	// continues no other's (SPEC §19).
	mine := mcptest.OK[toolResult](c, map[string]any{"op": "call", "client": "acme", "tool": "ops", "args": map[string]any{"prompt": "slow s3"}})
	if st, err := a.Svc.State(t.Context(), mine.StructuredContent["conversation_id"].(string)); err != nil || st.Tenant != "acme" {
		t.Fatalf("a tenant's call: tenant %q, %v", st.Tenant, err)
	}
	if o := c.Do(map[string]any{"op": "call", "client": "acme", "tool": "ops", "args": map[string]any{"prompt": "slow s4", "conversation_id": conv}}); !strings.Contains(o.Error, "wrong_tenant") {
		t.Fatalf("a tenant's token continuing another's conversation: %+v", o)
	}

	// A viewer calls nothing; no token: 401; no standalone stream.
	if o := c.Do(map[string]any{"op": "call", "client": "viewer", "tool": "ops", "args": map[string]any{"prompt": "slow s2"}}); !strings.Contains(o.Error, "forbidden") {
		t.Fatalf("a viewer's call: %+v", o)
	}
	if code := postMCP(t, srv.URL, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /mcp: %v %v, want 405", resp, err)
	} else {
		_ = resp.Body.Close()
	}
}

// decisionOf is the decision recorded on conv's only decided call.
func decisionOf(t *testing.T, r *servetest.Replica, conv string) map[string]any {
	t.Helper()
	st, err := r.Svc.State(t.Context(), conv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.History {
		for _, p := range m.Parts {
			if tr, ok := p.(message.ToolReturn); ok {
				if d, ok := tr.Metadata[session.DecisionMetaKey].(map[string]any); ok {
					return d
				}
			}
		}
	}
	t.Fatalf("no decision in %s's history", conv)
	return nil
}

// postMCP posts body to url's /mcp with token ("" none) and returns the
// status.
func postMCP(t *testing.T, url, token, body string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), servetest.Wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDecidedElsewhereNotAsked: of a task's two approvals, the one decided
// in the inbox meanwhile is not asked; the other is, and the task
// completes with both calls run once.
func TestDecidedElsewhereNotAsked(t *testing.T) {
	c := mcptest.NewClient(t)
	w := servetest.Setup(t)
	a := w.Replica(t, "a")
	srv, face := a.Face(t, tokens, agentproc.FaceOptions{MCP: true})
	mcptest.OK[map[string]any](c, map[string]any{"op": "connect", "client": "a", "url": srv.URL + "/mcp", "token": admin,
		"elicit": map[string]any{"approved": true}})
	created := mcptest.OK[struct {
		Task task           `json:"task"`
		Meta map[string]any `json:"_meta"`
	}](c, map[string]any{"op": "create", "client": "a", "tool": "ops", "args": map[string]any{"prompt": "deploys web db"}})
	waitStatus(t, c, "a", created.Task.TaskID, "input_required")
	conv := created.Meta["offload/conversation_id"].(string)
	v, err := a.Svc.Get(t.Context(), conv)
	if err != nil || len(v.Pending) != 2 {
		t.Fatalf("pending %+v, %v", v, err)
	}
	if _, err := face.Desk.Decide(t.Context(), conv, v.Pending[0].TaskID, protocol.Decision{Approved: true, By: "carol", Channel: protocol.ChannelInbox}); err != nil {
		t.Fatal(err)
	}
	res := mcptest.OK[toolResult](c, map[string]any{"op": "result", "client": "a", "taskId": created.Task.TaskID})
	if res.IsError || !strings.Contains(res.text(), "done deployed") {
		t.Fatalf("result %+v", res)
	}
	asked := mcptest.OK[[]map[string]any](c, map[string]any{"op": "elicitations", "client": "a"})
	if len(asked) != 1 || !strings.Contains(toJSON(asked[0]), v.Pending[1].TaskID) {
		t.Fatalf("asked %v, want only %s", asked, v.Pending[1].TaskID)
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if w.Deploys["web"] != 1 || w.Deploys["db"] != 1 {
		t.Fatalf("deploys %v, want each once", w.Deploys)
	}
}

// TestMalformed: the requests the face answers itself, malformed or
// forged, are refused with the protocol's errors and start nothing.
func TestMalformed(t *testing.T) {
	w := servetest.Setup(t)
	a := w.Replica(t, "a")
	srv, _ := a.Face(t, tokens, agentproc.FaceOptions{MCP: true})
	rpc := func(body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code := func(m map[string]any) any {
		e, _ := m["error"].(map[string]any)
		return e["code"]
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"../../x.>"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nobody","arguments":{"prompt":"x"},"task":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ops","arguments":{"prompt":" "},"task":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ops","arguments":{"prompt":"x","conversation_id":"not-one"},"task":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ops","arguments":"a string","task":{}}}`,
	} {
		if status, out := rpc(body); status != http.StatusOK || code(out) != float64(-32602) {
			t.Errorf("%s: %d %v, want a JSON-RPC -32602", body, status, out)
		}
	}
	for body, want := range map[string]int{
		`{"jsonrpc":"2.0","id":"offload-mcp/garbage","result":{"action":"accept"}}`:                                 http.StatusBadRequest,
		`{"jsonrpc":"2.0","id":"offload-mcp/01ARZ3NDEKTSV4RRFFQ69G5FAV/x/y","result":{"action":"accept"}}`:          http.StatusNotFound,
		`{"jsonrpc":"2.0","id":"offload-mcp/not-a-task/01ARZ3NDEKTSV4RRFFQ69G5FAV/y","result":{"action":"accept"}}`: http.StatusNotFound,
	} {
		if status, _ := rpc(body); status != want {
			t.Errorf("%s: %d, want %d", body, status, want)
		}
	}
	statuses, err := a.Svc.StatusCounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range statuses {
		if n != 0 {
			t.Errorf("%d conversations %s: the refusals started some", n, s)
		}
	}
}

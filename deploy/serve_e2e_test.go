package deploy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
)

// TestServeWithRoles runs agent serve as the serve user of the shipped
// auth.conf (the streams provisioned by admin; issue 37, finding 6: as
// the agent user its inbox's and API's decisions failed, 500 after
// 5–10 s): three runs started over its API pause on an approval, one is
// approved through the inbox (a logged-in form), one through the API,
// one by the NATS approver with agent approve; each conversation continues
// and finishes. The approvals' announcements and resolutions are
// notified (--notify: the notify consumer, created and acked as serve);
// nothing is refused on the way. The timeline shows the inbox's
// decision as the service signed it (verified), the approver's as a raw
// NATS claim (finding 4).
func TestServeWithRoles(t *testing.T) {
	t.Parallel()
	agentBin, workerBin := binaries(t)
	d := startDeployServer(t)
	dir := t.TempDir()
	spec, tokens := filepath.Join(dir, "ops.yaml"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(spec, []byte("name: ops\ntools: [shell]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const token, approverToken, adminToken = "operator-token-0123456789", "approver-token-0123456789", "admin-token-0123456789abc"
	if err := os.WriteFile(tokens, []byte(token+" operator ops\n"+approverToken+" approver bob\n"+adminToken+" admin carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL("worker_shell"), "--inbox-prefix", inboxPrefix("worker_shell"), "--tools", "shell", "--root", proctest.ToolDir(t), "--id", "serve-e2e")
	w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)
	notes := make(chan map[string]any, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var note map[string]any
		_ = json.NewDecoder(r.Body).Decode(&note)
		notes <- note
	}))
	defer recv.Close()
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	// The credentials in the environment, as the README tells operators.
	s := proctest.StartProcessEnv(t, append(os.Environ(), "NATS_URL="+d.roleURL("serve"), "NATS_INBOX_PREFIX="+inboxPrefix("serve")),
		agentBin, "serve", "--model", "test", "--spec", spec, "--tokens", tokens, "--http", addr, "--store", filepath.Join(dir, "store"), "--notify", recv.URL, "--a2a")
	s.WaitLog(t, "agent serve: http://", 30*time.Second)
	base := "http://" + addr

	callAs := func(token, method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
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
	call := func(method, path, body string) map[string]any { t.Helper(); return callAs(token, method, path, body) }
	start := func() (conv, task string) {
		t.Helper()
		final := call("POST", "/v1/conversations?wait=1", `{"agent":"ops","prompt":"run it"}`)
		pending, _ := final["pending"].([]any)
		if final["status"] != "paused" || len(pending) != 1 {
			t.Fatalf("start: %v\n%s", final, s.Logs())
		}
		return final["conversation_id"].(string), pending[0].(map[string]any)["task_id"].(string)
	}
	finished := func(conv string) {
		t.Helper()
		// The continuation runs in the serve process: its state is polled.
		offloadtest.Eventually(t, "conversation "+conv+" finished", func() error {
			if v := call("GET", "/v1/conversations/"+conv, ""); v["status"] != "finished" || !strings.Contains(fmt.Sprint(v["output"]), "shell returned") {
				return fmt.Errorf("%v", v)
			}
			return nil
		})
	}

	// Through the inbox: logged in, the form of the call as the page
	// shows it.
	inboxConv, inboxTask := start()
	browser := inboxSession(t, base, approverToken)
	form := browser.form(t, "/", "/conversations/"+inboxConv+"/calls/"+inboxTask+"/decide")
	form.Set("action", "approve")
	if code, body := browser.post(t, "/conversations/"+inboxConv+"/calls/"+inboxTask+"/decide", form); code >= 400 {
		t.Fatalf("inbox decision: %d %s\n%s", code, body, s.Logs())
	}
	finished(inboxConv)

	// Through the API.
	apiConv, apiTask := start()
	if r := callAs(approverToken, "POST", "/v1/conversations/"+apiConv+"/calls/"+apiTask+"/decision", `{"approved":true}`); r["by"] != "bob" {
		t.Fatalf("API decision: %v", r)
	}
	finished(apiConv)

	// By the approver, with raw NATS (agent approve).
	cliConv, cliTask := start()
	if r := d.agentAs(t, agentBin, dir, "approver", "approve", "--conversation", cliConv, cliTask, "--by", "alice"); r.code != 0 {
		t.Fatalf("approve as approver: exit %d: %s", r.code, r.stderr)
	}
	finished(cliConv)

	// The service's faces' decisions are verified, the raw one is not.
	if page := browser.get(t, "/conversations/"+inboxConv); !strings.Contains(page, `class="channel">inbox<`) || strings.Contains(page, "unverified") {
		t.Errorf("the inbox's decision is not shown verified:\n%s", page)
	}
	if page := browser.get(t, "/conversations/"+cliConv); !strings.Contains(page, `class="by">alice<`) || !strings.Contains(page, "(unverified, claimed cli)") ||
		!strings.Contains(page, `class="channel">nats<`) {
		t.Errorf("the approver's raw decision is not shown unverified:\n%s", page)
	}

	// --a2a: a task paused on the approval, listed, approved by a data
	// part, completed; its records in the service's bucket written and
	// read as the serve user (direct gets, no consumer).
	rpc := func(method, params string) map[string]any {
		t.Helper()
		r := callAs(adminToken, "POST", "/a2a/ops", `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`)
		res, ok := r["result"].(map[string]any)
		if !ok {
			t.Fatalf("%s: %v\n%s", method, r, s.Logs())
		}
		return res
	}
	a2aTask := rpc("SendMessage", `{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"run it"}]}}`)["task"].(map[string]any)
	if st := a2aTask["status"].(map[string]any); st["state"] != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("A2A send: %v", a2aTask)
	}
	if list := rpc("ListTasks", `{}`); fmt.Sprint(list["totalSize"]) != "1" {
		t.Fatalf("A2A list: %v", list)
	}
	parts := a2aTask["status"].(map[string]any)["message"].(map[string]any)["parts"].([]any)
	a2aCall := parts[1].(map[string]any)["data"].(map[string]any)["pending"].([]any)[0].(map[string]any)["task_id"]
	a2aTask = rpc("SendMessage", `{"message":{"messageId":"m2","role":"ROLE_USER","taskId":"`+a2aTask["id"].(string)+
		`","parts":[{"data":{"decisions":[{"task_id":"`+fmt.Sprint(a2aCall)+`","approved":true}]}}]}}`)["task"].(map[string]any)
	if st := a2aTask["status"].(map[string]any); st["state"] != "TASK_STATE_COMPLETED" || !strings.Contains(fmt.Sprint(a2aTask["artifacts"]), "shell returned") {
		t.Fatalf("A2A decision: %v", a2aTask)
	}
	want := map[string]bool{"approval_requested " + fmt.Sprint(a2aCall): true, "approval_resolved " + fmt.Sprint(a2aCall): true}

	// --notify: the notify consumer read and acked as the serve user.
	for _, task := range []string{inboxTask, apiTask, cliTask} {
		want["approval_requested "+task], want["approval_resolved "+task] = true, true
	}
	for len(want) > 0 {
		note := offloadtest.WaitOrTimeout(t, notes, "the notifications")
		delete(want, fmt.Sprint(note["event"], " ", note["task_id"]))
	}
	if logs := s.Logs(); strings.Contains(logs, "ermission") || strings.Contains(logs, "refused") {
		t.Errorf("serve's logs name a refusal:\n%s", logs)
	}
}

// browserSession is a logged-in inbox session: a client with a cookie
// jar.
type browserSession struct {
	base   string
	client *http.Client
}

// inboxSession logs in to the inbox at base with token, as a browser
// does (the login form's fields and the cookie it sets).
func inboxSession(t *testing.T, base, token string) *browserSession {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &browserSession{base: base, client: &http.Client{Jar: jar}}
	form := b.form(t, "/login", "/login")
	form.Set("token", token)
	if code, body := b.post(t, "/login", form); code >= 400 {
		t.Fatalf("login: %d %s", code, body)
	}
	return b
}

// get returns the page at path.
func (b *browserSession) get(t *testing.T, path string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.base+path, nil)
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	return string(raw)
}

// hiddenInput matches a form's hidden field.
var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// form returns the hidden fields of the first form of page whose action
// is action.
func (b *browserSession) form(t *testing.T, page, action string) url.Values {
	t.Helper()
	html := b.get(t, page)
	i := strings.Index(html, `action="`+action+`"`)
	if i < 0 {
		t.Fatalf("%s has no form to %s:\n%s", page, action, html)
	}
	body := html[i:]
	body = body[:strings.Index(body, "</form>")]
	v := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(body, -1) {
		v.Set(m[1], unescapeHTML(m[2]))
	}
	return v
}

// unescapeHTML undoes html/template's escaping of an attribute value.
func unescapeHTML(s string) string {
	return strings.NewReplacer("&amp;", "&", "&#34;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">", "&#43;", "+").Replace(s)
}

// post posts form to path and returns the final status and body.
func (b *browserSession) post(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

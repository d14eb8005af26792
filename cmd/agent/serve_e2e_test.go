package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
)

// The end-to-end tests of agent serve (SPEC §11): replicas of the built
// binary on a real nats-server, decisions published with the nats CLI,
// the fake OpenAI-compatible model of the durable tests.

const (
	serveOperator = "operator-token-0123456789"
	serveViewer   = "viewer-token-0123456789"
)

// serveWorld is one test's replicas and what they share.
type serveWorld struct {
	*durable
	spec, tokens string
}

func newServeWorld(t *testing.T) *serveWorld {
	t.Helper()
	d := newDurable(t)
	// The replicas inherit the test's environment.
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("OPENAI_BASE_URL", d.model.URL())
	t.Setenv("NATS_URL", "")
	w := &serveWorld{durable: d, spec: filepath.Join(d.dir, "ops.yaml"), tokens: filepath.Join(d.dir, "tokens")}
	if err := os.WriteFile(w.spec, []byte("name: ops\nmodel: openai:fake-model\ntools: [deploy, research]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.tokens, []byte(serveOperator+" operator ops\n"+serveViewer+" viewer val\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// replica starts an agent serve replica (with the flags extra) and
// returns it with its API's URL.
func (w *serveWorld) replica(t *testing.T, extra ...string) (*proctest.Process, string) {
	t.Helper()
	return w.replicaAt(t, append([]string{"-v"}, extra...)...)
}

// replicaAt starts an agent serve replica with the flags extra, at its
// default verbosity unless they say -v.
func (w *serveWorld) replicaAt(t *testing.T, extra ...string) (*proctest.Process, string) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	args := append([]string{"serve", "--nats", w.nats.URL(), "--spec", w.spec, "--tokens", w.tokens,
		"--http", addr, "--store", filepath.Join(w.dir, "store")}, extra...)
	p := proctest.StartProcess(t, agentBinary(t), args...)
	p.WaitLog(t, "agent serve: http://", 30*time.Second)
	return p, "http://" + addr
}

// api makes a request with token and decodes the JSON answer.
func api(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// startPaused starts a conversation deploying target over the API and
// returns it with the task of its approval.
func startPaused(t *testing.T, url, target string) (conv, task string) {
	t.Helper()
	prompt := fmt.Sprintf(`[{"tool":"deploy","args":{"target":%q}}]`, target)
	body, _ := json.Marshal(map[string]string{"agent": "ops", "prompt": prompt})
	code, final := api(t, "POST", url+"/v1/conversations?wait=1", serveOperator, string(body))
	pending, _ := final["pending"].([]any)
	if code != 200 || final["type"] != "final" || final["status"] != "paused" || len(pending) != 1 {
		t.Fatalf("start: %d %v", code, final)
	}
	return final["conversation_id"].(string), pending[0].(map[string]any)["task_id"].(string)
}

// openEvents opens the conversation's event stream on url and sends its
// last data line once the stream has ended.
func openEvents(t *testing.T, url, conv string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/v1/conversations/"+conv+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+serveViewer)
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // closed by the goroutine that reads it
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %v %v", resp, err)
	}
	out := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		last := ""
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "data: ") {
				last = line
			}
		}
		out <- last
	}()
	return out
}

// awaitFinished waits until the conversation is finished, as url shows it.
func awaitFinished(t *testing.T, url, conv string) map[string]any {
	t.Helper()
	return awaitFinishedWithin(t, offloadtest.Wait, url, conv)
}

func awaitFinishedWithin(t *testing.T, within time.Duration, url, conv string) map[string]any {
	t.Helper()
	var view map[string]any
	// The replica that continues it has no signal outside its process
	// but its state: polled over the API.
	offloadtest.EventuallyWithin(t, within, "conversation "+conv+" finished", func() error {
		var code int
		code, view = api(t, "GET", url+"/v1/conversations/"+conv, serveViewer, "")
		if code != 200 || view["status"] != "finished" {
			return fmt.Errorf("%d %v", code, view)
		}
		return nil
	})
	return view
}

// Two replicas; a run started over the API pauses on an approval; the
// decision published with nats pub wakes it: it finishes with no other
// process started, one continuation model request, the tool run once.
// Missing and insufficient tokens are 401 and 403. A decision published
// while no replica runs is applied when one starts; SIGTERM exits 0.
func TestServeE2E(t *testing.T) {
	w := newServeWorld(t)
	r1, url1 := w.replica(t)
	r2, url2 := w.replica(t)

	start := `{"agent":"ops","prompt":"hello"}`
	if code, m := api(t, "POST", url1+"/v1/conversations", "", start); code != 401 {
		t.Errorf("no token: %d %v", code, m)
	}
	if code, m := api(t, "POST", url1+"/v1/conversations", serveViewer, start); code != 403 {
		t.Errorf("viewer starting: %d %v", code, m)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url1+"/metrics", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Error(err)
	} else {
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !strings.Contains(string(raw), `offload_http_requests_total{code="403",route="POST /v1/conversations"} 1`) {
			t.Errorf("/metrics lacks the 403 counted:\n%s", raw)
		}
	}

	conv, task := startPaused(t, url1, "prod")
	requests := len(w.model.Requests())
	sse := openEvents(t, url2, conv)
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	if last := offloadtest.WaitOrTimeout(t, sse, "the event stream's end"); !strings.Contains(last, `"type":"final"`) {
		t.Errorf("the event stream ended with %s, want the final event", last)
	}
	view := awaitFinished(t, url2, conv)
	if out, _ := view["output"].(string); !strings.Contains(out, "deploy:deployed prod") {
		t.Errorf("output %q", out)
	}
	if n := len(w.model.Requests()) - requests; n != 1 {
		t.Errorf("%d continuation model requests, want 1", n)
	}
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod"}) {
		t.Errorf("deployed %v, want [prod] once", got)
	}
	// The gauge of the replica that started it counts it finished where
	// the other one continued it: both read the store's status index
	// (written after the state's last save: polled).
	offloadtest.Eventually(t, "offload_conversations on r1", func() error {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url1+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(raw), `offload_conversations{status="finished"} 1`) || !strings.Contains(string(raw), `offload_conversations{status="paused"} 0`) {
			return fmt.Errorf("/metrics:\n%s", raw)
		}
		return nil
	})

	// Published while no replica runs: applied when one starts.
	conv, task = startPaused(t, url2, "staging")
	for _, r := range []*proctest.Process{r1, r2} {
		if err := r.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitOrTimeout(t, r.Done(), "a replica exiting on SIGTERM")
		if code := r.ExitCode(); code != 0 {
			t.Fatalf("exit %d on SIGTERM:\n%s", code, r.Logs())
		}
	}
	requests = len(w.model.Requests())
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	_, url3 := w.replica(t)
	awaitFinished(t, url3, conv)
	if n := len(w.model.Requests()) - requests; n != 1 {
		t.Errorf("%d continuation model requests, want 1", n)
	}
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod", "staging"}) {
		t.Errorf("deployed %v, want [prod staging]", got)
	}
}

// SIGKILL of the replica holding a conversation whose background task
// runs: once the lease lapses (15 s), the other replica continues it
// with no message published (its sweep of the running conversations),
// adopting the task, and finishes it with the task's result.
func TestServeE2EKilledReplica(t *testing.T) {
	w := newServeWorld(t)
	r1, url1 := w.replica(t)
	_, url2 := w.replica(t)
	body, _ := json.Marshal(map[string]string{"agent": "ops", "prompt": `[{"tool":"research","args":{"topic":"tides"}}]`})
	code, started := api(t, "POST", url1+"/v1/conversations", serveOperator, string(body))
	if code != 202 {
		t.Fatalf("start: %d %v", code, started)
	}
	conv := started["conversation_id"].(string)
	if got := offloadtest.WaitOrTimeout(t, w.tools.started, "the background task"); got != "research" {
		t.Fatalf("started %s", got)
	}
	// The run waits for the task's outcome after the model's second
	// request: its checkpoint holds the task.
	offloadtest.EventuallyWithin(t, offloadtest.Wait, "the second model request", func() bool { return len(w.model.Requests()) >= 2 })
	r1.Kill()
	offloadtest.WaitOrTimeout(t, r1.Done(), "the replica killed")
	killed := time.Now()
	// Its index entry says running; once the lease lapsed, the other
	// replica's sweep of the running conversations continues it from its
	// checkpoint and adopts the task live, before its result exists: its
	// run writes the entry again (no signal outside its process: polled).
	offloadtest.EventuallyWithin(t, 30*time.Second, "the killed run continued by the other replica", func() error {
		code, list := api(t, "GET", url2+"/v1/conversations?status=running", serveViewer, "")
		convs, _ := list["conversations"].([]any)
		if code != 200 || len(convs) != 1 {
			return fmt.Errorf("%d %v", code, list)
		}
		at, err := time.Parse(time.RFC3339Nano, convs[0].(map[string]any)["updated_at"].(string))
		if err != nil {
			return err
		}
		if !at.After(killed) {
			return fmt.Errorf("%v: not written since the kill", convs[0])
		}
		return nil
	})
	w.tools.open()
	view := awaitFinishedWithin(t, 45*time.Second, url2, conv)
	if out, _ := view["output"].(string); !strings.Contains(out, "found tides") {
		t.Errorf("output %q, want the background result", out)
	}
	select {
	case got := <-w.tools.started:
		t.Errorf("%s started again, want the background task adopted", got)
	default:
	}
}

// A spec's approval timeout (SPEC §12): agent serve schedules it with the
// announcement, the server writes the timeout's decision, and the
// conversation continues with the expiry's text, the tool not run.
func TestServeE2EApprovalTimeout(t *testing.T) {
	w := newServeWorld(t)
	if err := os.WriteFile(w.spec, []byte("name: ops\nmodel: openai:fake-model\ntools: [deploy, research]\napproval: {timeout: 1s, message: nobody came}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := w.replica(t)
	conv, task := startPaused(t, url, "prod")
	view := awaitFinished(t, url, conv)
	if out, _ := view["output"].(string); !strings.Contains(out, "Tool 'deploy' (task "+task+") was not approved in time: nobody came") {
		t.Errorf("output %q", out)
	}
	if got := w.tools.deployed(); len(got) != 0 {
		t.Errorf("deployed %v, want nothing", got)
	}
}

// agent serve logs, at its default verbosity (no -v), one line per
// conversation started, paused, woken, finished and failed, and nothing
// else of its runs (SPEC §21; issue 38: nothing at all before).
func TestServeE2ELifecycleLines(t *testing.T) {
	w := newServeWorld(t)
	limited := filepath.Join(w.dir, "limited.yaml")
	if err := os.WriteFile(limited, []byte("name: limited\nmodel: openai:fake-model\ntools: [research]\nlimits: {requests: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, url := w.replicaAt(t, "--spec", limited)
	conv, task := startPaused(t, url, "prod")
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	awaitFinished(t, url, conv)
	body, _ := json.Marshal(map[string]string{"agent": "limited", "prompt": `[{"tool":"research","args":{"topic":"x"}}]`})
	if code, final := api(t, "POST", url+"/v1/conversations?wait=1", serveOperator, string(body)); code != 200 || final["status"] != "failed" {
		t.Fatalf("the limited agent's run: %d %v", code, final)
	}
	failed := r.WaitLog(t, `msg="conversation failed"`, offloadtest.Wait)
	logs := r.Logs()
	for _, want := range []string{
		`level=INFO msg="conversation started" conversation_id=` + conv + " agent=ops",
		`level=INFO msg="conversation paused" conversation_id=` + conv,
		`level=INFO msg="conversation woken: continuing" conversation_id=` + conv,
		`level=INFO msg="conversation finished" conversation_id=` + conv,
	} {
		if strings.Count(logs, want) != 1 {
			t.Errorf("the logs have %d lines %q, want 1:\n%s", strings.Count(logs, want), want, logs)
		}
	}
	if !strings.Contains(failed, "level=WARN") || !strings.Contains(failed, "request_limit") {
		t.Errorf("the failure's line: %s", failed)
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=DEBUG") || strings.Contains(line, "level=INFO") && !strings.Contains(line, `msg="conversation `) {
			t.Errorf("a line beside the conversations' at the default verbosity: %s", line)
		}
	}
}

package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
)

// The typos a person makes on the path the docs promote (issue 38): the
// nats CLI publishes them as they are.
var decisionTypos = []string{`'{approved:true}'`, `'{"approved":"yes"}'`}

// pubTypos publishes each typo of a decision of conv's task with the real
// nats CLI, as a person pasting a command would.
func (d *durable) pubTypos(t *testing.T, conv, task string) {
	t.Helper()
	for _, typo := range decisionTypos {
		line := "nats --server " + d.nats.URL() + " pub tools.decision." + conv + "." + task + " " + typo
		if code, out := sh(t, d.dir, line); code != 0 {
			t.Fatalf("%s: exit %d: %s", line, code, out)
		}
	}
}

// offered asserts that agent pending lists conv's task, with and without
// --conversation.
func (d *durable) offered(t *testing.T, conv, task string) {
	t.Helper()
	for _, args := range [][]string{{"pending", "--conversation", conv}, {"pending"}} {
		code, stdout, stderr := plain(t, d.dir, nil, append(args, "--nats", d.nats.URL())...)
		if code != 0 || !strings.Contains(stdout, task+" approval deploy ") {
			t.Fatalf("%v after malformed decisions: exit %d, stdout:\n%s\nstderr: %s", args, code, stdout, stderr)
		}
	}
}

// A malformed decision never hides the call it was meant for (SPEC §21;
// issue 38): published with the nats CLI, `{approved:true}` and
// `{"approved":"yes"}` leave the call listed by agent pending, by the
// API's GET /v1/pending and in the inbox, and decidable by agent approve,
// whose decision continues the conversation; the refusals are logged
// and counted.
func TestMalformedDecisionHidesNothing(t *testing.T) {
	natsCLIPath(t)
	w := newServeWorld(t)
	p, url := w.replica(t)
	conv, task := startPaused(t, url, "prod")
	w.pubTypos(t, conv, task)
	// Each wakes the conversation: its run reads the decision, refuses
	// it (logged, counted) and leaves the call waiting.
	p.WaitLog(t, "reason=malformed", offloadtest.Wait)
	w.offered(t, conv, task)
	code, listed := api(t, "GET", url+"/v1/pending", serveViewer, "")
	calls, _ := listed["pending"].([]any)
	if code != 200 || len(calls) != 1 || calls[0].(map[string]any)["task_id"] != task {
		t.Fatalf("GET /v1/pending after malformed decisions: %d %v", code, listed)
	}
	if page := get(t, url+"/", serveViewer); !strings.Contains(page, `id="call-`+task+`"`) {
		t.Fatalf("the inbox after malformed decisions lacks the call:\n%s", page)
	}
	offloadtest.Eventually(t, "the refusals counted", func() error {
		if m := get(t, url+"/metrics", ""); !strings.Contains(m, `offload_refused_messages_total{reason="malformed"} 2`) {
			return errorString("offload_refused_messages_total{malformed} is not 2")
		}
		return nil
	})
	if code, _, stderr := plain(t, w.dir, nil, "approve", "--nats", w.nats.URL(), "--conversation", conv, task, "--by", "bob"); code != 0 {
		t.Fatalf("approve after malformed decisions: exit %d: %s", code, stderr)
	}
	if view := awaitFinished(t, url, conv); view["output"] != "seen deploy:deployed prod" {
		t.Fatalf("the conversation after the approval: %v", view)
	}
}

// As TestMalformedDecisionHidesNothing, for a live run waiting with
// --approve wait, whose approval no pending record holds yet: agent
// pending listed nothing and agent approve said the call was already
// answered before issue 38.
func TestMalformedDecisionHidesNothingLive(t *testing.T) {
	t.Parallel()
	natsCLIPath(t)
	d := newDurable(t)
	run := d.runApproveWait(func(conv, task string) {
		d.waitMessage(natsjs.NamesFor("").Approvals, "tools.approval."+conv+"."+task)
		d.pubTypos(t, conv, task)
		d.offered(t, conv, task)
		if code, _, stderr := plain(t, d.dir, nil, "approve", "--nats", d.nats.URL(), "--conversation", conv, task); code != 0 {
			t.Fatalf("approve after malformed decisions: exit %d: %s", code, stderr)
		}
	})
	if run.err != nil || run.last["output"] != "seen deploy:deployed prod" {
		t.Fatalf("run: %v, last %v\n%s", run.err, run.last, run.stderr)
	}
	if n := strings.Count(run.stderr, "reason=malformed"); n != 2 {
		t.Errorf("%d refusals of reason malformed logged, want 2:\n%s", n, run.stderr)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// get returns the body of a GET of url, logged in with token (a bearer
// token, and the inbox's login cookie) when set.
func get(t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
		req.AddCookie(&http.Cookie{Name: "offload_token", Value: token, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}) // as the login sets it
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, raw)
	}
	return string(raw)
}

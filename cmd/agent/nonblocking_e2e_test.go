package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/message"
)

// expiringSpec is a spec whose approvals expire after 1 s with the
// message the tests look for (SPEC §12): the server writes the timeout's
// decision, the only one a reader admits as the call's timeout.
const expiringSpec = "approval: {timeout: 1s, message: nobody answered within 1h}\n"

// --approve background end to end (SPEC §12, issue 26): the agent binary
// with tools served by a worker, decisions published with the real nats
// CLI.

// A decision published while the run is live (once the acknowledgement
// is saved) is injected without a pause: the model ends its turn while
// research (a background task) runs, the approval arrives, deploy runs
// once on the worker, and both results reach the model as follow-ups;
// the decision is recorded on the acknowledgement; the run exits 0.
func TestNonBlockingDecisionWhileLive(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cmd := d.command("run", "--approve", "background",
		`[{"tool":"deploy","args":{"target":"prod"}},{"tool":"research","args":{"topic":"tides"}}]`)
	p := startPiped(t, cmd)
	var conv, task string
	var types []string
	var acked, published bool
	last := p.events(t, func(ev map[string]any) {
		typ, _ := ev["type"].(string)
		types = append(types, typ)
		conv, _ = ev["conversation_id"].(string)
		switch {
		case typ == "deferred_tool_requests":
			for _, id := range ev["task_ids"].(map[string]any) {
				task = id.(string)
			}
		case typ == "tool_result" && ev["tool"] == "deploy":
			// The acknowledgement is the call's result: the decision
			// comes while the run goes on.
			if c, _ := ev["content"].(string); !strings.Contains(c, "is waiting for a person's approval as task "+task) {
				t.Errorf("deploy's result %q, want the acknowledgement", c)
			}
			if got := d.tools.deployed(); len(got) != 0 {
				t.Errorf("deploy ran before its decision: %v", got)
			}
			acked = true
		case typ == "model_request_started" && acked && !published:
			// The next request's start: the acknowledgement is saved.
			published = true
			d.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
		case typ == "background_task_finished" && ev["tool"] == "deploy":
			d.tools.open() // research finishes after deploy's result
		}
	})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v, last %v\n%s", err, last, p.stderr.String())
	}
	if out, _ := last["output"].(string); last["status"] != "finished" || !strings.Contains(out, "user:Background tool 'research' (task ") {
		t.Errorf("final %v", last)
	}
	if got := d.tools.deployed(); len(got) != 1 || got[0] != "prod" {
		t.Errorf("deployed %v, want [prod] once", got)
	}
	results := 0
	for _, typ := range types {
		if typ == "deferred_tool_results" {
			results++
		}
	}
	if results != 1 {
		t.Errorf("deferred_tool_results events: %d, want 1 (%v)", results, types)
	}
	st := d.state(conv)
	found := false
	for _, m := range st.History {
		for _, part := range m.Parts {
			if u, ok := part.(message.UserPrompt); ok && len(u.Content) > 0 && u.Content[0].Text == "Background tool 'deploy' (task "+task+") completed.\nResult: deployed prod" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("the stored history lacks deploy's follow-up")
	}
	// The decision taken live is recorded like an inline one, on the
	// call's acknowledgement (its only return).
	if n := decisionNote(st, "deploy"); n["by"] != "ann" || n["approved"] != true || n["task_id"] != task {
		t.Errorf("decision note %v, want by ann, approved, task %s", n, task)
	}
	// The decision taken live is not read again as a duplicate when the
	// conversation is continued.
	if r := d.agent("resume", "--conversation", conv, "thanks"); r.code != 0 || strings.Contains(r.stderr, "message refused") {
		t.Errorf("continued: %v", r)
	}
}

// The model ends its turn with only the approval pending: the run pauses
// (exit 3) with it in the pending record, marked non-blocking; the
// decision published then is applied by agent resume: deploy runs once
// and its result reaches the model as a follow-up. A denial and an
// expiry reach it each with its own text.
func TestNonBlockingDecisionAfterPause(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	r := d.agent("run", "--approve", "background", deployProd)
	if r.code != exitPaused || r.final["status"] != "paused" {
		t.Fatalf("run should pause: %v", r)
	}
	conv := r.conv()
	task := only(t, r.pending(), "approval deploy")
	list, _ := r.final["pending"].([]any)
	if nb, _ := list[0].(map[string]any)["nonblocking"].(bool); !nb {
		t.Errorf("pending %v, want nonblocking", list)
	}
	if out := r.final["output"]; out != "" && out != nil {
		t.Errorf("output %v", out)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Fatalf("deploy ran before its decision: %v", got)
	}
	// Resumed before a decision: still paused, nothing ran.
	if again := d.agent("resume", "--conversation", conv); again.code != exitPaused {
		t.Fatalf("resume without a decision: %v", again)
	}
	d.pub("tools.decision."+conv+"."+task, `{"approved":true}`)
	done := d.agent("resume", "--conversation", conv)
	want := "seen user:Background tool 'deploy' (task " + task + ") completed.\nResult: deployed prod"
	if done.code != 0 || done.final["output"] != want {
		t.Fatalf("resume: %v\nwant output %q", done, want)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want once", got)
	}
	if n := decisionNote(d.state(conv), "deploy"); n["approved"] != true || n["task_id"] != task {
		t.Errorf("decision note %v, want approved, task %s", n, task)
	}

	r = d.agent("run", "--approve", "background", deployProd)
	conv, task = r.conv(), only(t, r.pending(), "approval deploy")
	d.pub("tools.decision."+conv+"."+task, `{"approved":false,"message":"freeze"}`)
	denied := d.agent("resume", "--conversation", conv)
	if want := "seen user:Tool 'deploy' (task " + task + ") was denied: freeze"; denied.code != 0 || denied.final["output"] != want {
		t.Fatalf("denied: %v\nwant output %q", denied, want)
	}

	// The expiry's decision (SPEC §12, the scheduled message the server
	// writes at the call's timeout) is told as such, never as a person's
	// denial.
	r = d.agent("run", "--spec", writeFile(t, d.dir, "expiring.yaml", expiringSpec), "--approve", "background", deployProd)
	conv, task = r.conv(), only(t, r.pending(), "approval deploy")
	d.decisionsOn(conv, task, 1)
	expired := d.agent("resume", "--conversation", conv)
	if want := "seen user:Tool 'deploy' (task " + task + ") was not approved in time: nobody answered within 1h"; expired.code != 0 || expired.final["output"] != want {
		t.Fatalf("expired: %v\nwant output %q", expired, want)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want once (the first approval's)", got)
	}
	if n := decisionNote(d.state(conv), "deploy"); n["by"] != "timeout" || n["approved"] != false {
		t.Errorf("expiry's decision note %v, want by timeout", n)
	}
}

// The live view (human mode, stderr) shows the non-blocking call's `?`
// line, then its `!` line once the decision published meanwhile is
// applied, with no pause between them; the run exits 0.
func TestNonBlockingLiveView(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cmd := d.command("run", "--approve", "background",
		`[{"tool":"deploy","args":{"target":"prod"}},{"tool":"research","args":{"topic":"tides"}}]`)
	cmd.Args = slices.DeleteFunc(cmd.Args, func(a string) bool { return a == "--json" })
	var stdout, stderr offloadtest.Output
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start(t, cmd)
	stderr.WaitFor(t, " needs approval")
	m := regexp.MustCompile(`\? deploy task ([0-9A-Z]{26}) needs approval`).FindStringSubmatch(stderr.String())
	c := regexp.MustCompile(`conversation: ([0-9A-Z]{26})`).FindStringSubmatch(stderr.String())
	if m == nil || c == nil {
		t.Fatalf("no approval or conversation line in:\n%s", stderr.String())
	}
	task := m[1]
	d.pub("tools.decision."+c[1]+"."+task, `{"approved":true}`)
	stderr.WaitFor(t, "! deploy task "+task+" approved")
	stderr.WaitFor(t, "⇠ deploy task "+task+" completed") // research finishes after deploy's result
	d.tools.open()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	view := stderr.String()
	asked, decided := strings.Index(view, "? deploy task "+task), strings.Index(view, "! deploy task "+task+" approved")
	if asked < 0 || decided < asked || strings.Contains(view[asked:decided], "paused") {
		t.Errorf("live view, want ? then ! with no pause between:\n%s", view)
	}
	if !strings.Contains(stdout.String(), "user:Background tool 'research' (task ") {
		t.Errorf("stdout %q", stdout.String())
	}
}

// The live view shows an expiry taken live as such, never as a person's
// denial: `! deploy task <task> not approved in time: <message>`.
func TestNonBlockingLiveViewExpired(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cmd := d.command("run", "--spec", writeFile(t, d.dir, "expiring.yaml", expiringSpec), "--approve", "background",
		`[{"tool":"deploy","args":{"target":"prod"}},{"tool":"research","args":{"topic":"tides"}}]`)
	cmd.Args = slices.DeleteFunc(cmd.Args, func(a string) bool { return a == "--json" })
	var stdout, stderr offloadtest.Output
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start(t, cmd)
	stderr.WaitFor(t, " needs approval")
	m := regexp.MustCompile(`\? deploy task ([0-9A-Z]{26}) needs approval`).FindStringSubmatch(stderr.String())
	c := regexp.MustCompile(`conversation: ([0-9A-Z]{26})`).FindStringSubmatch(stderr.String())
	if m == nil || c == nil {
		t.Fatalf("no approval or conversation line in:\n%s", stderr.String())
	}
	task := m[1]
	// The server writes the expiry at the call's timeout.
	stderr.WaitFor(t, "! deploy task "+task+" not approved in time: nobody answered within 1h")
	d.tools.open()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if view := stderr.String(); strings.Contains(view, "denied") {
		t.Errorf("live view shows the expiry as a denial:\n%s", view)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Errorf("deployed %v, want never", got)
	}
}

// --approve wait with a tool made non-blocking by its metadata: each call
// has one waiter, by its mode. deploy's decision is the step's wait's,
// nbdeploy's the non-blocking waiter's; neither refuses (or counts) the
// other's, which it reads from the same stream. Both run once.
func TestNonBlockingWithApproveWait(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cmd := d.command("run", "--approve", "wait", "--wait", "1m",
		`[{"tool":"deploy","args":{"target":"a"}},{"tool":"nbdeploy","args":{"target":"b"}},{"tool":"research","args":{"topic":"tides"}}]`)
	p := startPiped(t, cmd)
	var conv string
	tasks := map[string]string{}
	published := false
	last := p.events(t, func(ev map[string]any) {
		typ, _ := ev["type"].(string)
		conv, _ = ev["conversation_id"].(string)
		switch {
		case typ == "deferred_tool_requests":
			for id, task := range ev["task_ids"].(map[string]any) {
				tasks[id] = task.(string)
			}
			if tasks["call_1"] != "" && tasks["call_2"] != "" && !published {
				published = true
				d.pub("tools.decision."+conv+"."+tasks["call_1"], `{"approved":true,"by":"ann"}`)
				d.pub("tools.decision."+conv+"."+tasks["call_2"], `{"approved":true,"by":"bob"}`)
			}
		case typ == "background_task_finished" && ev["tool"] == "nbdeploy":
			d.tools.open() // research finishes after nbdeploy's result
		}
	})
	if err := cmd.Wait(); err != nil || last["status"] != "finished" {
		t.Fatalf("run: %v, last %v\n%s", err, last, p.stderr.String())
	}
	if got := d.tools.deployed(); !sameElems(got, []string{"a", "b"}) {
		t.Errorf("deployed %v, want a and b once each", got)
	}
	if strings.Contains(p.stderr.String(), "message refused") {
		t.Errorf("a waiter refused the other's decision:\n%s", p.stderr.String())
	}
}

func sameElems(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Two non-blocking calls paused, one of them a worker's own deferral
// (guarded raises ApprovalRequired): the decision of guarded alone lets
// agent resume continue; guarded runs as its task's next attempt, its
// result reaches the model, and the run pauses again on deploy, whose
// decision then finishes it. Each tool runs once.
func TestNonBlockingResumeWithOneOfTwo(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	r := d.agent("run", "--approve", "background", `[{"tool":"deploy","args":{"target":"prod"}},{"tool":"guarded","args":{}}]`)
	if r.code != exitPaused || len(r.pending()) != 2 {
		t.Fatalf("run should pause on two calls: %v", r)
	}
	conv := r.conv()
	tasks := map[string]string{}
	for task, kind := range r.pending() {
		tasks[strings.TrimPrefix(kind, "approval ")] = task
	}
	d.pub("tools.decision."+conv+"."+tasks["guarded"], `{"approved":true}`)
	again := d.agent("resume", "--conversation", conv)
	if again.code != exitPaused || again.final["pending"] == nil || only(t, again.pending(), "approval deploy") != tasks["deploy"] {
		t.Fatalf("resume after one decision: %v", again)
	}
	d.tools.mu.Lock()
	guarded := append([]string(nil), d.tools.guarded...)
	d.tools.mu.Unlock()
	if len(guarded) != 1 || guarded[0] != tasks["guarded"]+":1" {
		t.Errorf("guarded ran %v, want once as attempt 1 of its task", guarded)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Fatalf("deploy ran before its decision: %v", got)
	}
	st := d.state(conv)
	found := false
	for _, m := range st.History {
		for _, part := range m.Parts {
			if u, ok := part.(message.UserPrompt); ok && len(u.Content) > 0 && u.Content[0].Text == "Background tool 'guarded' (task "+tasks["guarded"]+") completed.\nResult: ran attempt 1" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("the stored history lacks guarded's follow-up")
	}
	d.pub("tools.decision."+conv+"."+tasks["deploy"], `{"approved":true}`)
	done := d.agent("resume", "--conversation", conv)
	if want := "seen user:Background tool 'deploy' (task " + tasks["deploy"] + ") completed.\nResult: deployed prod"; done.code != 0 || done.final["output"] != want {
		t.Fatalf("final resume: %v\nwant output %q", done, want)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want once", got)
	}
}

// agent serve with a spec saying approve: background: a run started over
// the API pauses with only the non-blocking approval pending, and the
// decision published with nats pub makes a replica continue it, the tool
// run once and its result the model's follow-up. A second conversation
// whose model keeps working (research runs) gets its decision injected
// while its run is live.
func TestNonBlockingServe(t *testing.T) {
	w := newServeWorld(t)
	if err := os.WriteFile(w.spec, []byte("name: ops\nmodel: openai:fake-model\ntools: [deploy, research]\napprove: background\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := w.replica(t)

	conv, task := startPaused(t, url, "prod")
	if got := w.tools.deployed(); len(got) != 0 {
		t.Fatalf("deploy ran before its decision: %v", got)
	}
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	view := awaitFinished(t, url, conv)
	if want := "seen user:Background tool 'deploy' (task " + task + ") completed.\nResult: deployed prod"; view["output"] != want {
		t.Errorf("output %q, want %q", view["output"], want)
	}
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod"}) {
		t.Errorf("deployed %v, want [prod] once", got)
	}

	prompt := `[{"tool":"deploy","args":{"target":"staging"}},{"tool":"research","args":{"topic":"tides"}}]`
	body, _ := json.Marshal(map[string]string{"agent": "ops", "prompt": prompt})
	code, started := api(t, "POST", url+"/v1/conversations", serveOperator, string(body))
	if code != 202 {
		t.Fatalf("start: %d %v", code, started)
	}
	conv = started["conversation_id"].(string)
	// The pending record the run saves names the approval's task.
	offloadtest.Eventually(t, "the live run's approval in its pending record", func() error {
		_, view = api(t, "GET", url+"/v1/conversations/"+conv, serveViewer, "")
		pending, _ := view["pending"].([]any)
		for _, p := range pending {
			if m := p.(map[string]any); m["tool"] == "deploy" && m["nonblocking"] == true {
				task = m["task_id"].(string)
				return nil
			}
		}
		return fmt.Errorf("%v", view)
	})
	if view["status"] == "paused" {
		t.Fatalf("the run paused while research ran: %v", view)
	}
	w.pub("tools.decision."+conv+"."+task, `{"approved":true}`)
	offloadtest.Eventually(t, "staging deployed while the run is live", func() error {
		if got := w.tools.deployed(); !slices.Contains(got, "staging") {
			return fmt.Errorf("deployed %v", got)
		}
		return nil
	})
	// Deploy's follow-up reaches the model first: its task leaves the
	// pending record at the checkpoint of the request that carries it,
	// and research is released only then (else, under load, research's
	// could come first and the last output be deploy's).
	offloadtest.Eventually(t, "deploy's follow-up taken by the live run", func() error {
		_, view = api(t, "GET", url+"/v1/conversations/"+conv, serveViewer, "")
		pending, _ := view["pending"].([]any)
		for _, p := range pending {
			if m := p.(map[string]any); m["task_id"] == task {
				return fmt.Errorf("deploy still pending: %v", view)
			}
		}
		return nil
	})
	w.tools.open()
	view = awaitFinished(t, url, conv)
	// Research's follow-up comes last (with deploy's, when both arrived
	// before the model's request).
	if out, _ := view["output"].(string); !strings.Contains(out, "user:Background tool 'research' (task ") {
		t.Errorf("output %q", out)
	}
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod", "staging"}) {
		t.Errorf("deployed %v, want [prod staging]", got)
	}
}

// A non-blocking external call (handoff: its worker defers it to a
// person) answered on its answer subject while the run is live: the answer
// is the call's result, as a follow-up, and the run does not pause.
func TestNonBlockingAnswerWhileLive(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cmd := d.command("run", "--approve", "background",
		`[{"tool":"handoff","args":{}},{"tool":"research","args":{"topic":"tides"}}]`)
	p := startPiped(t, cmd)
	var conv, task string
	last := p.events(t, func(ev map[string]any) {
		typ, _ := ev["type"].(string)
		conv, _ = ev["conversation_id"].(string)
		switch {
		case typ == "tool_result" && ev["tool"] == "handoff":
			c, _ := ev["content"].(string)
			m := regexp.MustCompile(`^Tool 'handoff' is waiting for an answer from outside as task ([0-9A-Z]{26})\.`).FindStringSubmatch(c)
			if m == nil {
				t.Errorf("handoff's result %q, want the acknowledgement", c)
				d.tools.open()
				return
			}
			task = m[1]
			d.pub("tools.answer."+conv+"."+task, `{"content":"42"}`)
		case typ == "deferred_tool_results":
			d.tools.open() // research finishes once the answer was applied
		}
	})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v, last %v\n%s", err, last, p.stderr.String())
	}
	if last["status"] != "finished" {
		t.Fatalf("final %v", last)
	}
	found := false
	for _, m := range d.state(conv).History {
		for _, part := range m.Parts {
			if u, ok := part.(message.UserPrompt); ok && len(u.Content) > 0 && u.Content[0].Text == "Background tool 'handoff' (task "+task+") completed.\nResult: 42" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("the stored history lacks the answer's follow-up")
	}
}

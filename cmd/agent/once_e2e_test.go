package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The end-to-end tests of SPEC §20 (steps done once): agent processes,
// toolworker processes serving command tools that count their own runs,
// SIGKILL and SIGSTOP.

// twBins builds the toolworker for these tests.
var twBins proctest.Binaries

func toolworkerBinary(t *testing.T) string {
	t.Helper()
	return filepath.Join(twBins.Dir(t, "../toolworker"), "toolworker")
}

// countScript is a command tool that counts its runs: it appends its
// idempotency key to <name>.log, says it started on the FIFO (its name,
// its toolworker's PID, its key), waits while <name>.hold exists, and
// answers "<name> done". A SIGKILLed toolworker leaves its command
// running: the script also ends when the test's directory is gone.
const countScript = `#!/bin/sh
d="$(dirname "$0")"
n="$(basename "$0" .sh)"
echo "$OFFLOAD_IDEMPOTENCY_KEY" >> "$d/$n.log"
echo "$n $PPID $OFFLOAD_IDEMPOTENCY_KEY" > "$d/events.fifo"
while [ -f "$d/$n.hold" ] && [ -d "$d" ]; do sleep 0.05; done
echo "$n done"
`

// onceWorld is one test's world: a server, a directory of counting
// command tools, a model, and the agent's spec and tokens.
type onceWorld struct {
	*durable
	tools    string         // the tools' directory
	spec     string         // the agent's spec
	tokens   string         // agent serve's tokens
	started  chan toolStart // the tools' starts, from the FIFO
	mu       sync.Mutex
	requests int // the model's requests
}

// toolStart is one start of a counting tool.
type toolStart struct {
	tool string
	pid  int
	key  string
}

// newOnceWorld writes the tools (names) and the spec (tools: names) and
// serves model, which counts its requests.
func newOnceWorld(t *testing.T, model func(req *llm.Request) *llm.Response, names ...string) *onceWorld {
	t.Helper()
	agentBinary(t)
	w := &onceWorld{durable: &durable{t: t, nats: natstest.Start(t), dir: t.TempDir()}, tools: proctest.ToolDir(t), started: make(chan toolStart, 16)}
	for _, n := range names {
		writeTestFile(t, filepath.Join(w.tools, n+".sh"), countScript, 0o755)
	}
	fifo := filepath.Join(w.tools, "events.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o666); err != nil { // the tool user writes it
		t.Fatal(err)
	}
	f, err := os.OpenFile(fifo, os.O_RDWR, 0) // open for reading: writers never block
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var s toolStart
			if _, err := fmt.Sscan(sc.Text(), &s.tool, &s.pid, &s.key); err == nil {
				w.started <- s
			}
		}
	}()
	w.model = openaitest.NewServer(script.New("fake-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		w.mu.Lock()
		w.requests++
		w.mu.Unlock()
		return model(req), nil
	}), openaitest.WithAPIKey("sk-test"))
	t.Cleanup(w.model.Close)
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("OPENAI_BASE_URL", w.model.URL())
	t.Setenv("NATS_URL", "")
	w.spec, w.tokens = filepath.Join(w.dir, "ops.yaml"), filepath.Join(w.dir, "tokens")
	writeTestFile(t, w.spec, "name: ops\nmodel: openai:fake-model\ntools: ["+strings.Join(names, ", ")+"]\n", 0o600)
	writeTestFile(t, w.tokens, serveOperator+" operator ops\n"+serveViewer+" viewer val\n", 0o600)
	return w
}

func writeTestFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// config writes a toolworker configuration serving tools (name → extra
// YAML keys of its entry) and returns its path.
func (w *onceWorld) config(name string, tools map[string]string) string {
	w.t.Helper()
	var b strings.Builder
	b.WriteString("tools:\n")
	for n, extra := range tools {
		fmt.Fprintf(&b, "  - name: %s\n    description: Counts its runs.\n    command: [\"./%s.sh\"]\n", n, n)
		if extra != "" {
			fmt.Fprintf(&b, "    %s\n", extra)
		}
	}
	p := filepath.Join(w.tools, name+".yaml")
	writeTestFile(w.t, p, b.String(), 0o644)
	return p
}

// worker starts a toolworker with config (ack wait 1 s: a killed
// worker's task is redelivered a second after its last in-progress ack).
func (w *onceWorld) worker(id, config string) *proctest.Process {
	w.t.Helper()
	p := proctest.StartProcess(w.t, toolworkerBinary(w.t), "--nats", w.nats.URL(), "--config", config, "--id", id, "--ack-wait", "1s")
	p.WaitLog(w.t, `"msg":"toolworker started"`, 30*time.Second)
	return p
}

// replica starts an agent serve replica and returns it with its URL.
func (w *onceWorld) replica() (*proctest.Process, string) {
	sw := &serveWorld{durable: w.durable, spec: w.spec, tokens: w.tokens}
	return sw.replica(w.t)
}

// hold makes the named tool's runs wait until release.
func (w *onceWorld) hold(name string) {
	writeTestFile(w.t, filepath.Join(w.tools, name+".hold"), "", 0o644)
}

func (w *onceWorld) release(name string) {
	if err := os.Remove(filepath.Join(w.tools, name+".hold")); err != nil {
		w.t.Fatal(err)
	}
}

// runs returns the idempotency keys of the named tool's runs.
func (w *onceWorld) runs(name string) []string {
	w.t.Helper()
	data, err := os.ReadFile(filepath.Join(w.tools, name+".log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// start waits for the next start of a tool.
func (w *onceWorld) start(what string) toolStart {
	w.t.Helper()
	return offloadtest.WaitOrTimeout(w.t, w.started, what)
}

func (w *onceWorld) modelRequests() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests
}

// lastTexts returns the texts of the last message of req: its tool
// returns' contents and its user prompts' texts.
func lastTexts(req *llm.Request) []string {
	var out []string
	for _, p := range req.Messages[len(req.Messages)-1].Parts {
		switch x := p.(type) {
		case message.ToolReturn:
			out = append(out, x.ToolName+": "+message.ContentText(x.Content))
		case message.UserPrompt:
			for _, c := range x.Content {
				out = append(out, c.Text)
			}
		}
	}
	return out
}

// An agent serve replica is SIGKILLed after the model answered with two
// tool calls, one of which ran (SPEC §20), together with the toolworker
// running the other (a host lost): the replica that continues the
// conversation once the lease lapsed makes no model request for that
// step, does not run the finished call again, and the unfinished one, not
// declared idempotent, reaches a person as an unknown effect (SPEC §13);
// approved, it runs once more, as its task's next attempt.
func TestServeE2EKilledMidStepDoneOnce(t *testing.T) {
	w := newOnceWorld(t, func(req *llm.Request) *llm.Response {
		texts := lastTexts(req)
		if len(texts) == 1 && texts[0] == "go" {
			return &llm.Response{Parts: []message.Part{
				message.ToolCall{ToolName: "quick", ToolCallID: "call_1", Args: "{}"},
				message.ToolCall{ToolName: "charge", ToolCallID: "call_2", Args: "{}"},
			}}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "seen " + strings.Join(texts, " | ")}}}
	}, "quick", "charge")
	cfg := w.config("tools", map[string]string{"quick": "", "charge": ""})
	w.hold("charge")
	w1 := w.worker("w1", cfg)
	r1, url1 := w.replica()
	_, url2 := w.replica()

	code, started := api(t, "POST", url1+"/v1/conversations", serveOperator, `{"agent":"ops","prompt":"go"}`)
	if code != 202 {
		t.Fatalf("start: %d %v", code, started)
	}
	conv := started["conversation_id"].(string)
	// quick and charge run side by side on w1; quick's outcome is stored
	// while charge runs.
	for range 2 {
		w.start("the step's calls started")
	}
	w.waitState(conv, "quick's outcome stored while charge runs", func(st *conversation.State) bool {
		last := st.History[len(st.History)-1]
		if last.Role != message.RoleRequest || len(last.Parts) != 1 {
			return false
		}
		r, ok := last.Parts[0].(message.ToolReturn)
		return ok && r.ToolName == "quick" && strings.Contains(message.ContentText(r.Content), "quick done")
	})
	r1.Kill()
	w1.Kill()
	offloadtest.WaitOrTimeout(t, r1.Done(), "the replica killed")
	offloadtest.WaitOrTimeout(t, w1.Done(), "the worker killed")
	w.release("charge")
	w.worker("w2", cfg) // charge's task is redelivered to it: an unknown effect

	// Between r1's lease lapsing and r2's sweep continuing the run, the
	// conversation reads paused with nothing pending and a note (SPEC
	// §11: a running entry with no holder reads as paused): the
	// continuation's pause is the one with charge's call pending.
	var view map[string]any
	// Between the lease's lapse and the continuation, the view says
	// paused with nothing pending and a note (no process holds it): the
	// continuation's pause is the one with a pending call.
	offloadtest.EventuallyWithin(t, 40*time.Second, "the continuation paused on charge", func() error {
		var code int
		code, view = api(t, "GET", url2+"/v1/conversations/"+conv, serveViewer, "")
		if pending, _ := view["pending"].([]any); code != 200 || view["status"] != "paused" || len(pending) == 0 {
			return fmt.Errorf("%d %v", code, view)
		}
		return nil
	})
	pending, _ := view["pending"].([]any)
	if len(pending) != 1 {
		t.Fatalf("pending %v, want charge's call", view["pending"])
	}
	p := pending[0].(map[string]any)
	md, _ := p["metadata"].(map[string]any)
	if p["tool"] != "charge" || md["offload.effect"] != "unknown" || md["worker"] != "w1" {
		t.Fatalf("pending %v, want charge's unknown effect (worker w1)", p)
	}
	task := p["task_id"].(string)
	if n := w.modelRequests(); n != 1 {
		t.Errorf("%d model requests before the decision, want 1: the continuation asked nothing again", n)
	}
	if q, c := w.runs("quick"), w.runs("charge"); len(q) != 1 || len(c) != 1 || c[0] != task+":0" {
		t.Fatalf("runs: quick %v, charge %v; want one each (charge as %s:0)", q, c, task)
	}

	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	view = awaitFinishedWithin(t, 30*time.Second, url2, conv)
	if out, _ := view["output"].(string); !strings.Contains(out, "charge: charge done") || !strings.Contains(out, "quick: quick done") {
		t.Errorf("output %q, want both results", out)
	}
	if q, c := w.runs("quick"), w.runs("charge"); len(q) != 1 || len(c) != 2 || c[1] != task+":1" {
		t.Errorf("runs: quick %v, charge %v; want quick once, charge once more as %s:1", q, c, task)
	}
	if n := w.modelRequests(); n != 2 {
		t.Errorf("%d model requests, want 2 (the step's, its results')", n)
	}
}

// A background call of a tool not declared idempotent whose toolworker
// is SIGKILLed while it runs (SPEC §20): its unknown effect reaches a
// person as a non-blocking approval (announced, offload.effect unknown)
// while the run goes on (another background call's result reaches the
// model meanwhile); approved, it runs once more, as its task's next
// attempt, and its result reaches the model.
func TestServeE2EBackgroundUnknownEffect(t *testing.T) {
	w := newOnceWorld(t, func(req *llm.Request) *llm.Response {
		texts := lastTexts(req)
		if len(texts) == 1 && texts[0] == "go" {
			return &llm.Response{Parts: []message.Part{
				message.ToolCall{ToolName: "charge", ToolCallID: "call_1", Args: "{}"},
				message.ToolCall{ToolName: "report", ToolCallID: "call_2", Args: "{}"},
			}}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "seen " + strings.Join(texts, " | ")}}}
	}, "charge", "report")
	w.hold("charge")
	w.hold("report")
	w1 := w.worker("w1", w.config("charge1", map[string]string{"charge": "metadata: {background: true}"}))
	w.worker("wr", w.config("report", map[string]string{"report": "metadata: {background: true}\n    idempotent: true"}))
	_, url := w.replica()
	approvals := make(chan *nats.Msg, 4)
	sub, err := w.nats.Conn(t).ChanSubscribe("tools.approval.>", approvals)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	code, started := api(t, "POST", url+"/v1/conversations", serveOperator, `{"agent":"ops","prompt":"go"}`)
	if code != 202 {
		t.Fatalf("start: %d %v", code, started)
	}
	conv := started["conversation_id"].(string)
	var charge toolStart
	for range 2 {
		if s := w.start("the background calls started"); s.tool == "charge" {
			charge = s
		}
	}
	if charge.pid != w1.Pid() {
		t.Fatalf("charge started under pid %d, want w1's %d", charge.pid, w1.Pid())
	}
	w1.Kill()
	offloadtest.WaitOrTimeout(t, w1.Done(), "the worker killed")
	w.release("charge")
	w.worker("w2", w.config("charge2", map[string]string{"charge": "metadata: {background: true}"}))

	m := offloadtest.WaitOrTimeoutWithin(t, approvals, 30*time.Second, "charge's approval announced")
	var ap protocol.Approval
	if err := json.Unmarshal(m.Data, &ap); err != nil || ap.Tool != "charge" || ap.Metadata["offload.effect"] != "unknown" || ap.Metadata["worker"] != "w1" {
		t.Fatalf("announcement %s: %v, want charge's unknown effect", m.Data, err)
	}
	task := ap.TaskID
	if !strings.HasPrefix(charge.key, task+":") {
		t.Fatalf("announced task %s, charge ran as %s", task, charge.key)
	}
	// The run goes on: report's result reaches the model while charge
	// waits for a person.
	if _, view := api(t, "GET", url+"/v1/conversations/"+conv, serveViewer, ""); view["status"] != "running" {
		t.Fatalf("conversation %v while charge waits, want running", view)
	}
	before := w.modelRequests()
	w.release("report")
	offloadtest.EventuallyWithin(t, 20*time.Second, "the model got report's result, then paused on charge", func() error {
		_, view := api(t, "GET", url+"/v1/conversations/"+conv, serveViewer, "")
		if view["status"] != "paused" || w.modelRequests() <= before {
			return fmt.Errorf("%v after %d requests", view, w.modelRequests())
		}
		return nil
	})
	if c := w.runs("charge"); len(c) != 1 {
		t.Fatalf("charge ran %v before its decision, want once", c)
	}

	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	view := awaitFinishedWithin(t, 30*time.Second, url, conv)
	if out, _ := view["output"].(string); !strings.Contains(out, "Background tool 'charge' (task "+task+") completed.\nResult: charge done") {
		t.Errorf("output %q, want charge's result", out)
	}
	if c := w.runs("charge"); len(c) != 2 || c[0] != task+":0" || c[1] != task+":1" {
		t.Errorf("charge's runs %v, want %s:0 (killed) and %s:1 (approved)", c, task, task)
	}
}

// A background call whose toolworker took it and was then frozen
// (SIGSTOP) neither answers nor keeps it (SPEC §20): the model gets
// DeadlineExceeded by the tool's timeout (2 s, from the worker's config)
// plus the grace (5 s), and the task is cancelled over the wire.
func TestRunE2EFrozenWorkerBackgroundDeadline(t *testing.T) {
	w := newOnceWorld(t, func(req *llm.Request) *llm.Response {
		texts := lastTexts(req)
		if len(texts) == 1 && texts[0] == "go" {
			return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "stuck", ToolCallID: "call_1", Args: "{}"}}}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "seen " + strings.Join(texts, " | ")}}}
	}, "stuck")
	w.hold("stuck")
	w1 := w.worker("w1", w.config("tools", map[string]string{"stuck": "metadata: {background: true}\n    timeout: 2s"}))
	t.Cleanup(func() { _ = w1.Signal(syscall.SIGCONT) }) // stopped by its cleanup then
	cmd := w.command("run", "--spec", w.spec, "go")
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	s := w.start("stuck started on w1")
	if err := w1.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	if err := offloadtest.WaitOrTimeoutWithin(t, done, 30*time.Second, "agent run's end"); err != nil {
		t.Fatalf("agent run: %v\n%s", err, stdout.String())
	}
	took := time.Since(frozen)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var final map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil {
		t.Fatal(err)
	}
	task, _, _ := strings.Cut(s.key, ":")
	out, _ := final["output"].(string)
	if !strings.Contains(out, "Background tool 'stuck' (task "+task+") failed: DeadlineExceeded") {
		t.Fatalf("output %q, want DeadlineExceeded", out)
	}
	// The timeout runs from the dispatch, a moment before the freeze.
	if took > 7*time.Second+2*time.Second {
		t.Errorf("ended %v after the freeze, want about the timeout and the grace (7 s)", took)
	}
	ctx, cancel := context.WithTimeout(t.Context(), offloadtest.Wait)
	defer cancel()
	stream, err := w.nats.JetStream(t).Stream(ctx, "TOOLS_CANCEL")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, fmt.Sprintf("tools.cancel.%s.%s.stuck", final["conversation_id"], task))
	if err != nil {
		t.Fatalf("no cancel stored for the task: %v", err)
	}
	var c protocol.Cancel
	if err := json.Unmarshal(msg.Data, &c); err != nil || c.TaskID != task {
		t.Fatalf("cancel %s: %v", msg.Data, err)
	}
}

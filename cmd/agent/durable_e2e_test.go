package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// The end-to-end tests of durable conversations (SPEC §5.5, §6.1): the
// built agent binary against a real nats-server (--nats), tools served by
// a worker in the test process, decisions and answers published with the
// real nats CLI, and a fake OpenAI-compatible server whose scripted model
// calls the tools its prompt names and then reports what it saw.

// durable is one test's world.
type durable struct {
	t     *testing.T
	nats  *natstest.Server
	model *openaitest.Server
	tools *testTools
	dir   string
}

// testTools are the worker's tools and what they saw.
type testTools struct {
	mu       sync.Mutex
	deploys  []string // targets deployed
	guarded  []string // "<task>:<attempt>" of each run of guarded
	started  chan string
	gate     chan struct{} // closed to let deploy and research finish
	gateOnce sync.Once
}

func (tt *testTools) open() { tt.gateOnce.Do(func() { close(tt.gate) }) }

func (tt *testTools) deployed() []string {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return append([]string(nil), tt.deploys...)
}

type deployArgs struct {
	Target string `json:"target"`
	Slow   bool   `json:"slow,omitempty"`
}

type noArgs struct{}

type researchArgs struct {
	Topic string `json:"topic"`
}

func newDurable(t *testing.T, natsOpts ...natstest.Option) *durable {
	t.Helper()
	agentBinary(t)
	d := &durable{t: t, nats: natstest.Start(t, natsOpts...), dir: t.TempDir()}
	d.tools = &testTools{started: make(chan string, 16), gate: make(chan struct{})}
	tt := d.tools
	deployFn := func(ctx context.Context, _ *tool.RunContext, a deployArgs) (string, error) {
		tt.started <- "deploy"
		if a.Slow {
			select {
			case <-tt.gate:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		tt.mu.Lock()
		tt.deploys = append(tt.deploys, a.Target)
		tt.mu.Unlock()
		return "deployed " + a.Target, nil
	}
	deploy := tool.Func("deploy", "Deploy a target.", deployFn, tool.NeedsApproval())
	// nbdeploy is deploy made non-blocking by its metadata (SPEC §12).
	nbdeploy := tool.Func("nbdeploy", "Deploy a target, non-blocking.", deployFn, tool.NeedsApproval(),
		tool.Meta(map[string]any{"deferred": "background"}))
	guarded := tool.Func("guarded", "Asks for approval itself.", func(_ context.Context, rc *tool.RunContext, _ noArgs) (string, error) {
		if !rc.ToolCallApproved {
			return "", &tool.ApprovalRequired{Metadata: map[string]any{"why": "production"}}
		}
		tt.mu.Lock()
		tt.guarded = append(tt.guarded, fmt.Sprintf("%s:%d", rc.TaskID, rc.Attempt))
		tt.mu.Unlock()
		return fmt.Sprintf("ran attempt %d", rc.Attempt), nil
	})
	research := tool.Func("research", "Research a topic.", func(ctx context.Context, _ *tool.RunContext, a researchArgs) (string, error) {
		tt.started <- "research"
		select {
		case <-tt.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "found " + a.Topic, nil
	}, tool.Meta(map[string]any{"background": true}))
	handoff := tool.Func("handoff", "Hands the call to a person.", func(context.Context, *tool.RunContext, noArgs) (string, error) {
		return "", &tool.CallDeferred{Metadata: map[string]any{"queue": "ops"}}
	})
	w, err := worker.New(worker.Config{Conn: d.nats.Conn(t), ID: "test-worker", Tools: []*tool.Tool{deploy, nbdeploy, guarded, research, handoff}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tt.open()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.StopAndCancel(ctx)
	})
	d.model = openaitest.NewServer(brain(), openaitest.WithAPIKey("sk-test"))
	t.Cleanup(d.model.Close)
	return d
}

// brain calls the tools listed as a JSON array on the first line of the
// prompt ([{"tool":…,"args":…}]), and otherwise answers with what the
// last request brought: "seen <tool>:<content> | user:<text>".
func brain() *script.FuncModel {
	return script.New("fake-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		var seen []string
		for _, p := range last.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				// The wire carries no outcome: the model sees the text.
				seen = append(seen, fmt.Sprintf("%s:%s", x.ToolName, message.ContentText(x.Content)))
			case message.RetryPrompt:
				seen = append(seen, "retry:"+x.Content)
			case message.UserPrompt:
				var text strings.Builder
				for _, c := range x.Content {
					text.WriteString(c.Text)
				}
				first, _, _ := strings.Cut(text.String(), "\n")
				var calls []struct {
					Tool string          `json:"tool"`
					Args json.RawMessage `json:"args"`
				}
				if strings.HasPrefix(first, "[") && json.Unmarshal([]byte(first), &calls) == nil {
					var parts []message.Part
					for i, c := range calls {
						parts = append(parts, message.ToolCall{ToolName: c.Tool, ToolCallID: fmt.Sprintf("call_%d", i+1), Args: string(c.Args)})
					}
					return &llm.Response{Parts: parts}, nil
				}
				seen = append(seen, "user:"+text.String())
			}
		}
		if len(seen) == 0 {
			seen = []string{"nothing"}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "seen " + strings.Join(seen, " | ")}}}, nil
	})
}

// result is one agent process's outcome.
type result struct {
	code   int
	stdout string
	stderr string
	final  map[string]any
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// pending returns the final event's pending entries as task → kind.
func (r result) pending() map[string]string {
	out := map[string]string{}
	list, _ := r.final["pending"].([]any)
	for _, p := range list {
		m := p.(map[string]any)
		out[m["task_id"].(string)] = m["kind"].(string) + " " + m["tool"].(string)
	}
	return out
}

func (r result) conv() string { s, _ := r.final["conversation_id"].(string); return s }

func (d *durable) command(args ...string) *exec.Cmd {
	args = append(args, "--json", "--nats", d.nats.URL(), "--model", "openai:fake-model")
	// No agent process outlives a minute: a hang fails with its output.
	ctx, cancel := context.WithTimeout(d.t.Context(), time.Minute)
	d.t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, agentBinary(d.t), args...)
	cmd.Args = append(cmd.Args, "-v")
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+d.model.URL(), "NATS_URL=")
	cmd.Dir = d.dir
	return cmd
}

// agent runs the agent binary to its end.
func (d *durable) agent(args ...string) result {
	d.t.Helper()
	cmd := d.command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(d.t, cmd.Run())
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if json.Unmarshal([]byte(lines[len(lines)-1]), &r.final) != nil || r.final["type"] != "final" {
		d.t.Fatalf("%v: the last stdout line is not a final event: %v", args, r)
	}
	return r
}

// pub publishes data on subject with the real nats CLI.
func (d *durable) pub(subject, data string) {
	d.t.Helper()
	out, err := exec.CommandContext(d.t.Context(), natsCLIPath(d.t), "--no-context", "--server", d.nats.URL(), "pub", subject, data).CombinedOutput()
	if err != nil {
		d.t.Fatalf("nats pub %s: %v: %s", subject, err, out)
	}
}

// paused runs PROMPT and expects a pause; it returns the conversation and
// the pending tasks (task → "kind tool").
func (d *durable) paused(args ...string) (string, map[string]string) {
	d.t.Helper()
	r := d.agent(append([]string{"run"}, args...)...)
	if r.code != exitPaused || r.final["status"] != "paused" || r.final["exit_code"] != float64(exitPaused) {
		d.t.Fatalf("run should pause: %v", r)
	}
	if !strings.Contains(r.stderr, "conversation: "+r.conv()) {
		d.t.Errorf("stderr should name the conversation: %s", r.stderr)
	}
	return r.conv(), r.pending()
}

// only returns the single pending task of kind.
func only(t *testing.T, pending map[string]string, want string) string {
	t.Helper()
	if len(pending) != 1 {
		t.Fatalf("pending %v, want one %s", pending, want)
	}
	for task, kind := range pending {
		if kind != want {
			t.Fatalf("pending %v, want %s", pending, want)
		}
		return task
	}
	return ""
}

// state loads the stored conversation.
func (d *durable) state(conv string) *conversation.State {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := convstore.New(ctx, convstore.Config{JetStream: d.nats.JetStream(d.t)})
	if err != nil {
		d.t.Fatal(err)
	}
	st, _, err := store.Load(ctx, conv)
	if err != nil {
		d.t.Fatal(err)
	}
	return st
}

// decisionNote returns the decision recorded on the return of tool.
func decisionNote(st *conversation.State, toolName string) map[string]any {
	for _, m := range st.History {
		for _, p := range m.Parts {
			if tr, ok := p.(message.ToolReturn); ok && tr.ToolName == toolName {
				if n, ok := tr.Metadata[session.DecisionMetaKey].(map[string]any); ok {
					return n
				}
			}
		}
	}
	return nil
}

var regexpConv = regexp.MustCompile(`conversation: [0-9A-Z]{26}`)

const deployProd = `[{"tool":"deploy","args":{"target":"prod"}}]`

// run → exit 3 → a decision published with nats pub → agent resume in a
// new process → exit 0 with the decision applied: approve (with by, kept
// in the history), deny with a message, approve with override_args.
func TestDurableApprovalDecisions(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cases := []struct {
		name, decision, output string
		deployed               []string
		note                   map[string]any
	}{
		{"approve", `{"approved":true,"by":"ann"}`, "seen deploy:deployed prod", []string{"prod"},
			map[string]any{"approved": true, "by": "ann"}},
		{"deny", `{"approved":false,"message":"not on a Friday","by":"bob"}`, "seen deploy:not on a Friday", nil,
			map[string]any{"approved": false, "by": "bob", "message": "not on a Friday"}},
		{"override", `{"approved":true,"override_args":{"target":"staging"}}`, "seen deploy:deployed staging", []string{"staging"},
			map[string]any{"approved": true, "override_args": map[string]any{"target": "staging"}}},
	}
	for _, c := range cases {
		before := len(d.tools.deployed())
		conv, pending := d.paused(deployProd)
		task := only(t, pending, "approval deploy")
		if got := d.tools.deployed(); len(got) != before {
			t.Fatalf("%s: deploy ran before the decision: %v", c.name, got)
		}
		d.pub("tools.decision."+conv+"."+task, c.decision)
		r := d.agent("resume", "--conversation", conv)
		if r.code != 0 || r.final["status"] != "finished" || r.final["output"] != c.output {
			t.Fatalf("%s: resume: %v", c.name, r)
		}
		if got := d.tools.deployed()[before:]; strings.Join(got, ",") != strings.Join(c.deployed, ",") {
			t.Errorf("%s: deployed %v, want %v", c.name, got, c.deployed)
		}
		note := decisionNote(d.state(conv), "deploy")
		for k, v := range c.note {
			if fmt.Sprint(note[k]) != fmt.Sprint(v) {
				t.Errorf("%s: history's decision note %v, want %s=%v", c.name, note, k, v)
			}
		}
		if note["task_id"] != task {
			t.Errorf("%s: decision note %v lacks the task", c.name, note)
		}
		// The pause announced the approval; the resume resolved it.
		resolved := "approved"
		if c.note["approved"] == false {
			resolved = "denied"
		}
		if msgs := d.approvalMessages(conv, task); len(msgs) != 2 || msgs[0]["tool"] != "deploy" || msgs[0]["conversation_id"] != conv || msgs[1]["resolved"] != resolved {
			t.Errorf("%s: approval subject carried %v", c.name, msgs)
		}
		// The conversation has ended: a resume without a prompt is a
		// usage error, one with a prompt continues it.
		if r := d.agent("resume", "--conversation", conv); r.code != exitUsage || r.final["exit_code"] != float64(exitUsage) {
			t.Errorf("%s: resume of an ended conversation: %v", c.name, r)
		}
		if r := d.agent("run", "--conversation", conv, "and now?"); r.code != 0 || r.final["output"] != "seen user:and now?" || r.conv() != conv {
			t.Errorf("%s: run --conversation: %v", c.name, r)
		}
	}
}

// An external call (a --spec external tool no worker serves) is answered
// with nats pub on tools.answer…; an approval and its resume are also
// given by the flags of resume.
func TestDurableExternalAnswer(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := askHumanSpec(t, d.dir)
	conv, pending := d.paused("--spec", spec, `[{"tool":"ask_human","args":{"question":"6x7?"}}]`)
	task := only(t, pending, "external ask_human")
	d.pub("tools.answer."+conv+"."+task, `{"content":"42"}`)
	r := d.agent("resume", "--spec", spec, "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen ask_human:42" {
		t.Fatalf("resume: %v", r)
	}
	// The external tool's schema is enforced: arguments failing it are
	// a retry, and an external tool's retry budget is 0.
	r = d.agent("run", "--spec", spec, `[{"tool":"ask_human","args":{"q":1}}]`)
	if r.code != exitFailed || !strings.Contains(r.stderr, "Tool 'ask_human' exceeded max retries count of 0") {
		t.Fatalf("schema not enforced: %v", r)
	}

	// The same through resume's flags: --result and --deny-task.
	conv, pending = d.paused("--spec", spec, `[{"tool":"ask_human","args":{"question":"?"}},{"tool":"deploy","args":{"target":"prod"}}]`)
	var ext, appr string
	for task, kind := range pending {
		switch kind {
		case "external ask_human":
			ext = task
		case "approval deploy":
			appr = task
		}
	}
	if ext == "" || appr == "" {
		t.Fatalf("pending %v", pending)
	}
	// An unknown conversation is exit 1.
	if r := d.agent("resume", "--conversation", protocol.NewID()); r.code != exitFailed || !strings.Contains(r.stderr, "is unknown") {
		t.Fatalf("unknown conversation: %v", r)
	}
	// A malformed --result is a usage error; an unknown task exit 1.
	if r := d.agent("resume", "--spec", spec, "--conversation", conv, "--result", ext+"={nope"); r.code != exitUsage {
		t.Fatalf("malformed --result: %v", r)
	}
	if r := d.agent("resume", "--spec", spec, "--conversation", conv, "--approve-task", protocol.NewID()); r.code != exitFailed || !strings.Contains(r.stderr, "no pending call") {
		t.Fatalf("unknown --approve-task: %v", r)
	}
	r = d.agent("resume", "--spec", spec, "--conversation", conv, "--result", ext+`={"status":"failed","message":"nobody home"}`, "--deny-task", appr+"=no")
	if r.code != 0 || r.final["output"] != `seen ask_human:{"error":"nobody home"} | deploy:no` {
		t.Fatalf("resume with flags: %v", r)
	}
}

// A decision for an unknown task, malformed JSON, a non-boolean approved
// and a second decision for the same task are refused (logged with their
// reason) and do not disturb the resume; the first decision wins.
func TestDurableRefusedDecisions(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	conv, pending := d.paused(deployProd)
	task := only(t, pending, "approval deploy")
	subj := "tools.decision." + conv + "."
	d.pub(subj+protocol.NewID(), `{"approved":true}`)
	d.pub(subj+task, `{not json`)
	d.pub(subj+task, `{"approved":"yes"}`)
	d.pub(subj+task, `{"approved":true,"by":"first"}`)
	d.pub(subj+task, `{"approved":false,"by":"second"}`)
	r := d.agent("resume", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen deploy:deployed prod" {
		t.Fatalf("resume: %v", r)
	}
	for reason, n := range map[string]int{"unknown_task": 1, "malformed": 2, "duplicate": 1} {
		if got := strings.Count(r.stderr, "reason="+reason); got != n {
			t.Errorf("%d refusals with reason %s, want %d: %s", got, reason, n, r.stderr)
		}
	}
	if note := decisionNote(d.state(conv), "deploy"); note["by"] != "first" {
		t.Errorf("decision note %v: the first decision wins", note)
	}
}

// Two approvals in one step, one decided: the resume records it and
// exits 3 again; a prompt meanwhile exits 2 and is recorded nowhere; the
// second decision finishes the run with both applied.
func TestDurablePartialDecisions(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	conv, pending := d.paused(`[{"tool":"deploy","args":{"target":"a"}},{"tool":"deploy","args":{"target":"b"}}]`)
	if len(pending) != 2 {
		t.Fatalf("pending %v", pending)
	}
	var tasks []string
	for task := range pending {
		tasks = append(tasks, task)
	}
	requests := len(d.model.Requests())
	d.pub("tools.decision."+conv+"."+tasks[0], `{"approved":false}`)
	r := d.agent("resume", "--conversation", conv)
	if r.code != exitPaused || r.final["status"] != "paused" || len(r.pending()) != 1 || r.pending()[tasks[1]] == "" {
		t.Fatalf("partial resume: %v", r)
	}
	r = d.agent("resume", "--conversation", conv, "and then?")
	if r.code != exitUsage || !strings.Contains(r.stderr, "pending calls") {
		t.Fatalf("prompt while pending: %v", r)
	}
	if r := d.agent("run", "--conversation", conv, "and then?"); r.code != exitUsage {
		t.Fatalf("run --conversation with a prompt while pending: %v", r)
	}
	if n := len(d.model.Requests()); n != requests {
		t.Fatalf("the model was asked %d times while calls were pending", n-requests)
	}
	d.pub("tools.decision."+conv+"."+tasks[1], `{"approved":true}`)
	r = d.agent("resume", "--conversation", conv)
	if r.code != 0 || !strings.Contains(r.final["output"].(string), "deploy:The tool call was denied.") || !strings.Contains(r.final["output"].(string), "deploy:deployed ") {
		t.Fatalf("final resume: %v", r)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want one", got)
	}
}

// A worker that raises ApprovalRequired: the call keeps the worker's task
// ID and, approved within the duplicate window, runs again as attempt 1.
func TestDurableWorkerApprovalRunsAgain(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	conv, pending := d.paused(`[{"tool":"guarded","args":{}}]`)
	task := only(t, pending, "approval guarded")
	d.pub("tools.decision."+conv+"."+task, `{"approved":true}`)
	r := d.agent("resume", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen guarded:ran attempt 1" {
		t.Fatalf("resume: %v", r)
	}
	d.tools.mu.Lock()
	defer d.tools.mu.Unlock()
	if len(d.tools.guarded) != 1 || d.tools.guarded[0] != task+":1" {
		t.Errorf("guarded ran as %v, want [%s:1]", d.tools.guarded, task)
	}
}

// A conversation whose history exceeds the server's max payload pauses
// and resumes.
func TestDurableLargeHistory(t *testing.T) {
	t.Parallel()
	d := newDurable(t, natstest.MaxPayload(64<<10))
	prompt := deployProd + "\n" + strings.Repeat("padding ", 12<<10) // ~96 KiB
	conv, pending := d.paused(prompt)
	task := only(t, pending, "approval deploy")
	d.pub("tools.decision."+conv+"."+task, `{"approved":true}`)
	r := d.agent("resume", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen deploy:deployed prod" {
		t.Fatalf("resume: %v", r)
	}
	if st := d.state(conv); len(st.History) < 4 {
		t.Errorf("stored history has %d messages", len(st.History))
	}
	// The history is an object of the histories bucket, not in the key.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := d.nats.JetStream(t).KeyValue(ctx, natsjs.NamesFor("").ConversationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "conv."+conv)
	if err != nil || !bytes.Contains(e.Value(), []byte(`"history_object"`)) || len(e.Value()) > 64<<10 {
		t.Errorf("stored key: %v, %d bytes, no history object", err, len(e.Value()))
	}
}

// Two agent processes resume the same conversation at once: one claims
// it, the other exits 1 with a clear conflict error before any model
// request; the call runs once.
func TestDurableConcurrentResume(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	conv, pending := d.paused(`[{"tool":"deploy","args":{"target":"prod","slow":true}}]`)
	task := only(t, pending, "approval deploy")
	d.pub("tools.decision."+conv+"."+task, `{"approved":true}`)
	first := d.command("resume", "--conversation", conv)
	var out1, err1 bytes.Buffer
	first.Stdout, first.Stderr = &out1, &err1
	start(t, first)
	select {
	case <-d.tools.started: // the first resume holds the conversation
	case <-time.After(30 * time.Second):
		t.Fatalf("the approved deploy did not start: %s", err1.String())
	}
	requests := len(d.model.Requests())
	second := d.agent("resume", "--conversation", conv)
	if second.code != exitFailed || !strings.Contains(second.stderr, "conflict") || !strings.Contains(second.stderr, "claimed by") ||
		second.final["status"] != "failed" || second.conv() != conv {
		t.Fatalf("second resume: %v", second)
	}
	if n := len(d.model.Requests()); n != requests {
		t.Fatalf("the second resume made %d model requests", n-requests)
	}
	d.tools.open()
	if err := first.Wait(); err != nil {
		t.Fatalf("first resume: %v\n%s", err, err1.String())
	}
	if f := lastLine(t, out1.String()); f["output"] != "seen deploy:deployed prod" {
		t.Fatalf("first resume: %v", f)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want once", got)
	}
}

// An agent SIGKILLed while a background task runs: agent resume (a new
// process) delivers the task's result exactly once. SIGTERM instead
// suspends: state saved, the task left running, exit 3.
func TestDurableKilledWhileBackgroundRuns(t *testing.T) {
	t.Parallel()
	for _, sig := range []os.Signal{os.Kill, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			d := newDurable(t)
			cmd := d.command("run", `[{"tool":"research","args":{"topic":"tides"}}]`)
			p := startPiped(t, cmd)
			var conv, task string
			requests := 0
			last := p.events(t, func(ev map[string]any) {
				conv, _ = ev["conversation_id"].(string)
				if ev["type"] == "background_task_started" {
					task = ev["task_id"].(string)
				}
				// Detached, not finished: it runs on for the resume.
				if ev["type"] == "background_task_finished" {
					t.Errorf("%v: the task still running got a finished event: %v", sig, ev)
				}
				// The second request is the model's turn after the
				// acknowledgement: the step is saved, the task runs.
				if ev["type"] == "text_delta" && requests == 2 {
					if err := cmd.Process.Signal(sig); err != nil {
						t.Fatal(err)
					}
				}
				if ev["type"] == "model_request_started" {
					requests++
				}
			})
			err := cmd.Wait()
			var ee *exec.ExitError
			errors.As(err, &ee)
			if sig == os.Kill {
				if ee == nil || ee.ExitCode() != -1 {
					t.Fatalf("killed agent: %v\n%s", err, p.stderr.String())
				}
			} else if ee == nil || ee.ExitCode() != exitPaused || last["status"] != "paused" || len(last["pending"].([]any)) != 1 {
				t.Fatalf("SIGTERM: %v, last %v\n%s", err, last, p.stderr.String())
			}
			if task == "" {
				t.Fatal("no background task started")
			}
			// The task finishes while no agent runs: its result is stored
			// before the resume starts (else the resume may consume it
			// live, which is also right, but not what this tests).
			d.tools.open()
			d.waitMessage(natsjs.NamesFor("").Results, protocol.Subjects{}.Result(conv, task, "research"))
			r := d.agent("resume", "--conversation", conv)
			want := fmt.Sprintf("Background tool 'research' (task %s) completed.\nResult: found tides", task)
			if r.code != 0 || !strings.Contains(r.final["output"].(string), want) {
				t.Fatalf("resume: %v", r)
			}
			reqs := d.model.Requests()
			if n := strings.Count(string(reqs[len(reqs)-1].Body), fmt.Sprintf("(task %s) completed", task)); n != 1 {
				t.Errorf("the outcome reached the model %d times in the last request", n)
			}
			// Nothing is left pending; a second resume has nothing to do.
			st := d.state(conv)
			if st.Pending != nil {
				t.Errorf("still pending: %+v", st.Pending)
			}
			// Its result was read from the stream: a second one is a
			// duplicate, not the result of a live run.
			if !slices.Contains(st.Settled, task) || slices.Contains(st.SettledLive, task) {
				t.Errorf("settled %v, settled live %v: want %s settled from the stream", st.Settled, st.SettledLive, task)
			}
		})
	}
}

// approvalMessages reads what was published on the approval subject of
// task: the announcement, then the resolution.
func (d *durable) approvalMessages(conv, task string) []map[string]any {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := d.nats.JetStream(d.t)
	oc, err := js.OrderedConsumer(ctx, natsjs.NamesFor("").Approvals, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.approval." + conv + "." + task}})
	if err != nil {
		d.t.Fatal(err)
	}
	var out []map[string]any
	for {
		batch, err := oc.FetchNoWait(10)
		if err != nil {
			d.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var v map[string]any
			if err := json.Unmarshal(m.Data(), &v); err != nil {
				d.t.Fatal(err)
			}
			out = append(out, v)
		}
		if n == 0 {
			return out
		}
	}
}

// --approve wait: the run announces the approval and reads the decision
// live (the run goes on in the same process, the approval is resolved);
// without a decision within --wait it pauses as with defer.
func TestDurableApproveWait(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	w := d.runApproveWait(func(conv, task string) {
		d.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	})
	conv, task := w.conv, w.task
	if w.err != nil || w.last["output"] != "seen deploy:deployed prod" {
		t.Fatalf("run: %v, last %v\n%s", w.err, w.last, w.stderr)
	}
	msgs := d.approvalMessages(conv, task)
	if len(msgs) != 2 || msgs[0]["tool"] != "deploy" || msgs[0]["task_id"] != task || msgs[1]["resolved"] != "approved" || msgs[1]["by"] != "ann" {
		t.Errorf("approval subject carried %v, want the announcement then its resolution", msgs)
	}
	if note := decisionNote(d.state(conv), "deploy"); note["by"] != "ann" {
		t.Errorf("decision note %v", note)
	}

	// Nobody decides within --wait: the run pauses.
	r := d.agent("run", "--approve", "wait", "--wait", "300ms", deployProd)
	if r.code != exitPaused || len(r.pending()) != 1 {
		t.Fatalf("undecided wait: %v", r)
	}
}

// Human mode: a pause lists each pending call, then the nats CLI
// commands that resolve it; pasted into a shell as printed, the first
// one approves, and resume finishes the run.
func TestDurablePrintedCommandsWork(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	natsCLIPath(t)
	code, stdout, stderr := plain(t, d.dir, []string{"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL=" + d.model.URL()},
		"run", "--nats", d.nats.URL(), "--model", "openai:fake-model", deployProd)
	if code != exitPaused {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], " approval deploy {\"target\":\"prod\"}") ||
		!strings.HasPrefix(lines[1], "nats --server ") || !strings.HasPrefix(lines[2], "# nats ") || !strings.Contains(lines[3], "override_args") {
		t.Fatalf("pending list:\n%s", stdout)
	}
	conv := strings.TrimSpace(strings.TrimPrefix(regexpConv.FindString(stderr), "conversation: "))
	if code, out := sh(t, d.dir, lines[1]); code != 0 {
		t.Fatalf("%s: exit %d: %s", lines[1], code, out)
	}
	r := d.agent("resume", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen deploy:deployed prod" {
		t.Fatalf("resume: %v", r)
	}
}

// A worker defers a call to a person (CallDeferred): the call is pending
// as external under the worker's task, answered with nats pub on
// tools.answer…; the answer settles it, and the agent cancels any copy
// a worker may still run (a cancel on tools.cancel.<conv>.<task>).
func TestDurableWorkerDeferredAnswered(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	conv, pending := d.paused(`[{"tool":"handoff","args":{}}]`)
	task := only(t, pending, "external handoff")
	d.pub("tools.answer."+conv+"."+task, `{"content":"done by hand"}`)
	r := d.agent("resume", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen handoff:done by hand" {
		t.Fatalf("resume: %v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := d.nats.JetStream(t).Stream(ctx, natsjs.NamesFor("").Cancel)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "tools.cancel."+conv+"."+task+".handoff")
	if err != nil || !bytes.Contains(m.Data, []byte(task)) {
		t.Fatalf("no cancel for the answered call: %v", err)
	}
}

// resume --approve wait: with a call still undecided, the resume waits
// for its decision (published meanwhile) instead of exiting 3.
func TestDurableResumeWaitsForTheRest(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	conv, pending := d.paused(`[{"tool":"deploy","args":{"target":"a"}},{"tool":"deploy","args":{"target":"b"}}]`)
	var tasks []string
	for task := range pending {
		tasks = append(tasks, task)
	}
	d.pub("tools.decision."+conv+"."+tasks[0], `{"approved":true}`)
	cmd := d.command("resume", "--conversation", conv, "--approve", "wait", "--wait", "1m")
	p := startPiped(t, cmd)
	// The resume has claimed the conversation once it saved the first
	// decision as an arrival; the second comes later.
	d.waitState(conv, "the first decision saved as an arrival", func(st *conversation.State) bool { return len(st.Arrivals) == 1 })
	d.pub("tools.decision."+conv+"."+tasks[1], `{"approved":false,"message":"only one"}`)
	last := p.lastEvent()
	if err := cmd.Wait(); err != nil || !strings.Contains(last["output"].(string), "deploy:only one") {
		t.Fatalf("resume: %v, last %v\n%s", err, last, p.stderr.String())
	}
}

// waitMessage waits until stream stores a message on subject: an ordered
// consumer delivers it as soon as it is stored.
func (d *durable) waitMessage(stream, subject string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
	defer cancel()
	oc, err := d.nats.JetStream(d.t).OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := oc.Next(jetstream.FetchMaxWait(offloadtest.Wait)); err != nil {
		d.t.Fatalf("no message on %s in %s: %v", subject, stream, err)
	}
}

// waitState waits until the stored state of conv satisfies cond, reading
// it again on each update of its key (a KV watch).
func (d *durable) waitState(conv, what string, cond func(*conversation.State) bool) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
	defer cancel()
	kv, err := d.nats.JetStream(d.t).KeyValue(ctx, natsjs.NamesFor("").ConversationsBucket)
	if err != nil {
		d.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "conv."+conv)
	if err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-w.Updates(): // the current value, the end of those, then each update
			if cond(d.state(conv)) {
				return
			}
		case <-ctx.Done():
			d.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A resume whose conversation lease is taken by another process while a
// call runs stops: exit 1 naming the lost lease, and it saves nothing
// more, so the new holder's state is not overwritten.
func TestDurableLeaseLostStopsRun(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	conv, pending := d.paused(`[{"tool":"deploy","args":{"target":"prod","slow":true}}]`)
	task := only(t, pending, "approval deploy")
	d.pub("tools.decision."+conv+"."+task, `{"approved":true}`)
	cmd := d.command("resume", "--conversation", conv)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start(t, cmd)
	defer d.tools.open()
	select {
	case <-d.tools.started: // the resume holds the conversation
	case <-time.After(30 * time.Second):
		t.Fatalf("the approved deploy did not start: %s", stderr.String())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kv, err := d.nats.JetStream(t).KeyValue(ctx, natsjs.NamesFor("tools").ConversationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	before, err := kv.Get(ctx, "conv."+conv)
	if err != nil {
		t.Fatal(err)
	}
	// Another process takes the lease (as one would after a lapse).
	thief := fmt.Sprintf(`{"holder":"thief","expires_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	if _, err := kv.Put(ctx, "lease."+conv, []byte(thief)); err != nil {
		t.Fatal(err)
	}
	code := exitCode(t, cmd.Wait()) // the next renewal (a third of the lease's 15 s) finds it taken
	if code != exitFailed || !strings.Contains(stderr.String(), "lease lost") {
		t.Fatalf("resume after its lease was taken: exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if f := lastLine(t, stdout.String()); f["status"] != "failed" || !strings.Contains(fmt.Sprint(f["error"]), "lease lost") {
		t.Fatalf("final event %v", f)
	}
	after, err := kv.Get(ctx, "conv."+conv)
	if err != nil || after.Revision() != before.Revision() {
		t.Fatalf("the conversation was written after the lease was lost: revision %d → %d (%v)", before.Revision(), after.Revision(), err)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Fatalf("deployed %v although the run stopped while the call ran", got)
	}
}

// A background result the run consumed live is not refused when the
// conversation is read again: it is neither an arrival nor a duplicate.
func TestDurableLiveResultNotRefusedLater(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cmd := d.command("run", `[{"tool":"research","args":{"topic":"tides"}}]`)
	p := startPiped(t, cmd)
	requests := 0
	last := p.events(t, func(ev map[string]any) {
		// The second request is the model's turn after the
		// acknowledgement: the step is saved with the task pending.
		if ev["type"] == "model_request_started" {
			if requests++; requests == 2 {
				d.tools.open()
			}
		}
	})
	if err := cmd.Wait(); err != nil || last["status"] != "finished" || !strings.Contains(last["output"].(string), "found tides") {
		t.Fatalf("run: %v, last %v\n%s", err, last, p.stderr.String())
	}
	conv := last["conversation_id"].(string)
	for _, args := range [][]string{{"run", "--conversation", conv, "again"}, {"run", "--conversation", conv, "and again"}} {
		r := d.agent(args...)
		if r.code != 0 || strings.Contains(r.stderr, "message refused") {
			t.Fatalf("%v: %v", args, r)
		}
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The end-to-end tests of agent pending, approve, deny, answer and
// history (SPEC §6.1): what pending prints is run verbatim by a shell.

// pendingBlocks splits pending's output into each call's line and the
// commands under it (alternatives, "# …", left out).
func pendingBlocks(t *testing.T, out string) map[string][]string {
	t.Helper()
	blocks := map[string][]string{}
	var cur string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.HasPrefix(line, "# "):
		case len(line) > 26 && line[26] == ' ' && !strings.Contains(line[:26], "/"):
			cur = line
			blocks[cur] = nil
		case cur == "":
			t.Fatalf("a command before any pending call:\n%s", out)
		default:
			blocks[cur] = append(blocks[cur], line)
		}
	}
	return blocks
}

// With --nats: an approval and an external call (declared in --spec) are
// listed by agent pending with nats pub commands; pasted into a shell as
// printed they resolve both, and resume finishes the conversation.
func TestPendingNATSCommandsPasted(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	natsCLIPath(t)
	spec := askHumanSpec(t, d.dir)
	conv, pending := d.paused("--spec", spec, `[{"tool":"ask_human","args":{"question":"it's 6x7?"}},{"tool":"deploy","args":{"target":"prod"}}]`)
	if len(pending) != 2 {
		t.Fatalf("pending %v", pending)
	}
	nats := []string{"--nats", d.nats.URL()}
	code, out, stderr := plain(t, d.dir, nil, append([]string{"pending", "--conversation", conv}, nats...)...)
	if code != 0 {
		t.Fatalf("pending: exit %d: %s", code, stderr)
	}
	blocks := pendingBlocks(t, out)
	if len(blocks) != 2 {
		t.Fatalf("pending output:\n%s", out)
	}
	for call, cmds := range blocks {
		task := call[:26]
		switch {
		case strings.Contains(call, " approval deploy "):
			want := "nats --server " + d.nats.URL() + " pub tools.decision." + conv + "." + task + ` '{"approved":true}'`
			if len(cmds) != 1 || cmds[0] != want {
				t.Fatalf("approval's command %q, want %q", cmds, want)
			}
		case strings.Contains(call, ` external ask_human {"question":"it's 6x7?"}`):
			if len(cmds) != 1 || !strings.Contains(cmds[0], " pub tools.answer."+conv+"."+task+" ") {
				t.Fatalf("answer's command %q", cmds)
			}
		default:
			t.Fatalf("pending line %q", call)
		}
		if code, out := sh(t, d.dir, cmds[0]); code != 0 {
			t.Fatalf("%s: exit %d: %s", cmds[0], code, out)
		}
	}
	// Nothing is pending any more: pending prints nothing, exit 0, and a
	// second approval exits 1.
	if code, out, stderr := plain(t, d.dir, nil, append([]string{"pending", "--conversation", conv}, nats...)...); code != 0 || out != "" {
		t.Fatalf("pending once answered: exit %d stdout %q stderr %q", code, out, stderr)
	}
	for call := range blocks {
		if code, _, stderr := plain(t, d.dir, nil, append([]string{"approve", "--conversation", conv, call[:26]}, nats...)...); code != exitFailed || !strings.Contains(stderr, "not pending") {
			t.Fatalf("approve of an answered call: exit %d: %s", code, stderr)
		}
	}
	r := d.agent("resume", "--spec", spec, "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen ask_human:... | deploy:deployed prod" {
		t.Fatalf("resume: %v", r)
	}
	// history prints the stored history as JSON; an unknown conversation
	// is exit 1.
	code, out, _ = plain(t, d.dir, nil, append([]string{"history", "--conversation", conv}, nats...)...)
	var h map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &h) != nil || !strings.Contains(out, "deployed prod") {
		t.Fatalf("history: exit %d\n%s", code, out)
	}
	// --tools naming a tool no worker serves: exit 2 with the available
	// names, as on the embedded default.
	if code, _, stderr := plain(t, d.dir, nil, append([]string{"run", "--model", "test", "--tools", "nope,deploy", "x"}, nats...)...); code != exitUsage ||
		!strings.Contains(stderr, `unknown tool "nope"`) || !strings.Contains(stderr, "available: deploy, guarded, handoff, nbdeploy, research") {
		t.Fatalf("unknown tool with --nats: exit %d: %s", code, stderr)
	}
	if code, _, stderr := plain(t, d.dir, nil, append([]string{"history", "--conversation", protocol.NewID()}, nats...)...); code != exitFailed || !strings.Contains(stderr, "is unknown") {
		t.Fatalf("history of an unknown conversation: exit %d: %s", code, stderr)
	}
	// pending reads the pending records only: an unknown conversation, like
	// a finished one, waits for nothing (exit 0), and it says so.
	for _, id := range []string{protocol.NewID(), conv} {
		if code, out, stderr := plain(t, d.dir, nil, append([]string{"pending", "--conversation", id}, nats...)...); code != 0 || out != "" || !strings.Contains(stderr, "no pending record") {
			t.Fatalf("pending of a conversation with no pending record: exit %d: %q %s", code, out, stderr)
		}
	}
}

// agent approve, deny and answer with --nats: each publishes what the run
// reads; a task of another conversation or kind is exit 1, a malformed
// answer exit 2; pending without --conversation lists every conversation
// with pending calls.
func TestDecideCommands(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := askHumanSpec(t, d.dir)
	conv1, p1 := d.paused(`[{"tool":"deploy","args":{"target":"a"}},{"tool":"deploy","args":{"target":"b"}}]`)
	conv2, p2 := d.paused("--spec", spec, `[{"tool":"ask_human","args":{"question":"?"}}]`)
	nats := []string{"--nats", d.nats.URL()}
	code, out, _ := plain(t, d.dir, nil, append([]string{"pending"}, nats...)...)
	if code != 0 || !strings.Contains(out, "# conversation "+conv1) || !strings.Contains(out, "# conversation "+conv2) || len(pendingBlocks(t, out)) != 3 {
		t.Fatalf("pending of all: exit %d\n%s", code, out)
	}
	ext := only(t, p2, "external ask_human")
	var tasks []string
	for task := range p1 {
		tasks = append(tasks, task)
	}
	run := func(args ...string) (int, string) {
		code, _, stderr := plain(t, d.dir, nil, append(args, nats...)...)
		return code, stderr
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"approve", "--conversation", conv2, tasks[0]}, exitFailed},          // another conversation's
		{[]string{"approve", "--conversation", conv2, ext}, exitFailed},               // not an approval
		{[]string{"answer", "--conversation", conv2, ext, `{nope`}, exitUsage},        // malformed
		{[]string{"approve", "--conversation", conv1, "nope"}, exitUsage},             // not a task ID
		{[]string{"answer", "--conversation", conv1, tasks[0], `{"content":"x"}`}, 1}, // not external
	} {
		if code, stderr := run(c.args...); code != c.code {
			t.Fatalf("%v: exit %d, want %d: %s", c.args, code, c.code, stderr)
		}
	}
	// A bare text is not an answer: exit 2, showing the form it takes
	// (issue 38).
	if code, stderr := run("answer", "--conversation", conv2, ext, "hello"); code != exitUsage || !strings.Contains(stderr, `{"content":"hello"}`) {
		t.Fatalf("answer hello: exit %d: %s", code, stderr)
	}
	if code, stderr := run("approve", "--conversation", conv1, tasks[0], "--by", "alice", "--args", `{"target":"c"}`); code != 0 {
		t.Fatalf("approve: exit %d: %s", code, stderr)
	}
	if code, stderr := run("deny", "--conversation", conv1, tasks[1], "--message", "not today"); code != 0 {
		t.Fatalf("deny: exit %d: %s", code, stderr)
	}
	// Each decision is bound to the call's arguments as pending (SPEC
	// §12): its args_digest is theirs, whatever --args replaced them with.
	decisions, err := d.nats.JetStream(t).Stream(t.Context(), "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range d.state(conv1).Pending.Tasks {
		m, err := decisions.GetLastMsgForSubject(t.Context(), "tools.decision."+conv1+"."+pt.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := protocol.DecodeDecision(m.Data, nil)
		want, _ := protocol.ArgsDigest(pt.Args)
		if err != nil || dec.ArgsDigest != want || dec.Channel != protocol.ChannelCLI {
			t.Errorf("decision of %s: %s, want args_digest %s and channel cli", pt.TaskID, m.Data, want)
		}
	}
	if code, stderr := run("answer", "--conversation", conv2, ext, `{"content":"42"}`); code != 0 {
		t.Fatalf("answer: exit %d: %s", code, stderr)
	}
	if code, out, _ := plain(t, d.dir, nil, append([]string{"pending"}, nats...)...); code != 0 || out != "" {
		t.Fatalf("pending once answered: exit %d\n%s", code, out)
	}
	r := d.agent("resume", "--conversation", conv1)
	if r.code != 0 || !strings.Contains(r.final["output"].(string), "deploy:deployed c") || !strings.Contains(r.final["output"].(string), "deploy:not today") {
		t.Fatalf("resume: %v", r)
	}
	r = d.agent("resume", "--spec", spec, "--conversation", conv2)
	if r.code != 0 || r.final["output"] != "seen ask_human:42" {
		t.Fatalf("resume: %v", r)
	}
}

// On the embedded default no server outlives the run: pending (which
// starts the store's server) prints agent approve commands; pasted as
// printed, the first approves, and resume writes the note.
func TestPendingEmbeddedCommandsPasted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, stderr := plain(t, dir, nil, "run", "--model", "test", "--tools", "write_file", "Write a note")
	if code != exitPaused || !strings.Contains(stderr, "paused: the conversation waits for 1 answer") {
		t.Fatalf("run: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	runOut, conv := out, strings.TrimPrefix(regexpConv.FindString(stderr), "conversation: ")
	code, out, stderr = plain(t, dir, nil, "pending")
	if code != 0 {
		t.Fatalf("pending: exit %d: %s", code, stderr)
	}
	// The run's pause printed the same list.
	if !strings.HasSuffix(out, runOut) {
		t.Fatalf("pending:\n%s\nthe run printed:\n%s", out, runOut)
	}
	blocks := pendingBlocks(t, out)
	if len(blocks) != 1 {
		t.Fatalf("pending:\n%s", out)
	}
	for call, cmds := range blocks {
		if !strings.Contains(call, " approval write_file ") || len(cmds) != 1 || !strings.Contains(cmds[0], " approve --store "+dir) {
			t.Fatalf("pending:\n%s", out)
		}
		if code, out := sh(t, t.TempDir(), cmds[0]); code != 0 {
			t.Fatalf("%s: exit %d: %s", cmds[0], code, out)
		}
	}
	code, out, stderr = plain(t, dir, nil, "resume", "--conversation", conv)
	if code != 0 || !strings.Contains(out, "write_file returned") {
		t.Fatalf("resume: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "note.txt")); err != nil || !strings.HasPrefix(string(b), "A note") {
		t.Fatalf("note.txt: %q %v", b, err)
	}
}

// --json: every stdout line is a JSON event with its type, run and
// conversation, and the last is the final event with the exit code, for a
// run that finishes, one that pauses and one that fails (the interrupted
// one is TestBinaryInterrupt).
func TestJSONLinesEveryExitPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args   []string
		code   int
		status string
	}{
		{[]string{"--tools", "list_dir", "look"}, 0, "finished"},
		{[]string{"--tools", "write_file", "write"}, exitPaused, "paused"},
		{[]string{"--tools", "list_dir", "--tool-calls-limit", "0", "look"}, exitFailed, "failed"},
	} {
		code, out, stderr := plain(t, dir, nil, append([]string{"run", "--json", "--model", "test"}, c.args...)...)
		if code != c.code {
			t.Fatalf("%v: exit %d, want %d: %s", c.args, code, c.code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var ev map[string]any
		for i, line := range lines {
			ev = nil
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("%v: line %d is not JSON: %q", c.args, i, line)
			}
			if ev["type"] == "" || ev["run_id"] == "" || ev["conversation_id"] == "" || ev["at"] == nil {
				t.Fatalf("%v: line %d lacks type, run_id, conversation_id or at: %q", c.args, i, line)
			}
			if ev["type"] == "final" && i != len(lines)-1 {
				t.Fatalf("%v: a final event before the last line", c.args)
			}
		}
		if ev["type"] != "final" || ev["status"] != c.status || ev["exit_code"] != float64(c.code) {
			t.Fatalf("%v: last line %v", c.args, ev)
		}
	}
}

// A run with --approve wait is live and its approval is only announced
// (no stored pending record yet): agent pending lists it, agent approve
// decides it, and the run goes on in its process; once resolved, a second
// approve exits 1 and pending no longer lists it.
func TestApproveWhileRunWaits(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	nats := []string{"--nats", d.nats.URL()}
	w := d.runApproveWait(func(conv, task string) {
		d.waitMessage(natsjs.NamesFor("").Approvals, "tools.approval."+conv+"."+task)
		// agent pending lists it, with or without --conversation.
		for _, args := range [][]string{{"pending", "--conversation", conv}, {"pending"}} {
			code, stdout, stderr := plain(t, d.dir, nil, append(args, nats...)...)
			if code != 0 || !strings.Contains(stdout, task+" approval ") || !strings.Contains(stdout, "decision."+conv+"."+task) {
				t.Fatalf("%v while the run waits: exit %d, stdout:\n%s\nstderr: %s", args, code, stdout, stderr)
			}
		}
		if code, _, stderr := plain(t, d.dir, nil, append([]string{"approve", "--conversation", conv, task, "--by", "bob"}, nats...)...); code != 0 {
			t.Fatalf("approve while the run waits: exit %d: %s", code, stderr)
		}
	})
	conv, task := w.conv, w.task
	if w.err != nil || w.last["output"] != "seen deploy:deployed prod" {
		t.Fatalf("run: %v, last %v\n%s", w.err, w.last, w.stderr)
	}
	if code, _, stderr := plain(t, d.dir, nil, append([]string{"approve", "--conversation", conv, task}, nats...)...); code != exitFailed {
		t.Fatalf("approve once resolved: exit %d: %s", code, stderr)
	}
	// Resolved, it is no longer listed.
	if code, stdout, stderr := plain(t, d.dir, nil, append([]string{"pending", "--conversation", conv}, nats...)...); code != 0 || strings.Contains(stdout, task) {
		t.Fatalf("pending once resolved: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
}

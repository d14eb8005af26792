package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
)

// TestBinaryAgainstOpenAICompatibleServer drives the built agent binary
// against a fake OpenAI-compatible server: a tool call round trip, then a
// streamed answer, with --json output parsed line by line.
func TestBinaryAgainstOpenAICompatibleServer(t *testing.T) {
	t.Parallel()
	brain := script.New("fake-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			if r, ok := p.(message.ToolReturn); ok {
				return &llm.Response{Parts: []message.Part{message.Text{Content: "The tool said " + message.ContentText(r.Content) + " indeed."}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "sleep", ToolCallID: "call_1", Args: `{"seconds":0,"message":"nap"}`}}}, nil
	})
	srv := openaitest.NewServer(brain, openaitest.WithAPIKey("sk-test"))
	defer srv.Close()

	out := runBinary(t, []string{"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL=" + srv.URL()},
		"run", "--json", "--model", "openai:fake-model", "--tools", "sleep", "take a nap")
	if out.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", out.code, out.stderr)
	}
	var types []string
	var deltas strings.Builder
	var final map[string]any
	sc := bufio.NewScanner(strings.NewReader(out.stdout))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("stdout line is not JSON: %q", sc.Text())
		}
		for _, k := range []string{"type", "run_id", "conversation_id", "at"} {
			if _, ok := ev[k]; !ok {
				t.Errorf("line lacks %q: %s", k, sc.Text())
			}
		}
		typ := ev["type"].(string)
		types = append(types, typ)
		switch typ {
		case "text_delta":
			deltas.WriteString(ev["delta"].(string))
		case "tool_result":
			if ev["outcome"] != "success" || ev["tool"] != "sleep" {
				t.Errorf("tool_result = %v", ev)
			}
		case "final":
			final = ev
		}
	}
	if types[len(types)-1] != "final" {
		t.Fatalf("last line is %s", types[len(types)-1])
	}
	want := "run_started model_request_started tool_call tool_result model_request_started"
	if got := strings.Join(types[:5], " "); got != want {
		t.Errorf("events start %q, want %q", got, want)
	}
	if final["status"] != "finished" || final["exit_code"] != float64(0) {
		t.Errorf("final = %v", final)
	}
	if got := final["output"].(string); got != `The tool said {"slept_seconds":0,"message":"nap"} indeed.` || deltas.String() != got {
		t.Errorf("output %q, deltas %q", got, deltas.String())
	}
	if !strings.HasPrefix(out.stderr, "nats: nats://127.0.0.1:") || !strings.Contains(out.stderr, "\nconversation: "+final["conversation_id"].(string)+"\n") {
		t.Errorf("stderr should name the embedded server, then the conversation: %q", out.stderr)
	}
	// The streamed requests went through the real client path.
	var streamed int
	for _, r := range srv.Requests() {
		if bytes.Contains(r.Body, []byte(`"stream":true`)) {
			streamed++
		}
	}
	if streamed != 2 {
		t.Errorf("streamed requests = %d, want 2", streamed)
	}
}

func TestBinaryHumanOutputAndExitCodes(t *testing.T) {
	t.Parallel()
	// Test model, human mode: its readable answer alone on stdout, after a
	// sleep long enough to report progress.
	out := runBinary(t, nil, "run", "--model", "test", "--tools", "sleep", "hello")
	if want := "I called 1 tool.\n- sleep returned {\"slept_seconds\":3,\"message\":\"rested\"}"; out.code != 0 || strings.TrimSpace(out.stdout) != want ||
		!strings.Contains(out.stderr, "… sleep task ") {
		t.Fatalf("exit %d stdout %q stderr %q", out.code, out.stdout, out.stderr)
	}
	// Approval-gated tool without a terminal: the run pauses (exit 3),
	// lists the pending call on stdout and says on stderr that it paused
	// and how to continue.
	out = runBinary(t, nil, "run", "--model", "test", "--tools", "write_file", "write")
	if out.code != 3 || !strings.Contains(out.stdout, ` approval write_file {"content":"A note written by the offload test model.\n","path":"note.txt"}`) ||
		!strings.Contains(out.stderr, "paused: ") || !strings.Contains(out.stderr, " resume --store ") {
		t.Fatalf("exit %d stdout %q stderr %q", out.code, out.stdout, out.stderr)
	}
	// --approve all writes the note the model asked for, named as asked.
	dir0 := t.TempDir()
	out = runBinary(t, nil, "run", "--model", "test", "--tools", "write_file", "--approve", "all", "--root", dir0, "--store", filepath.Join(dir0, ".offload"), "Write a note")
	if b, err := os.ReadFile(filepath.Join(dir0, "note.txt")); out.code != 0 || err != nil || !strings.HasPrefix(string(b), "A note") {
		t.Fatalf("exit %d stderr %q: note.txt %q %v", out.code, out.stderr, b, err)
	}
	// A --tools name nothing offers: exit 2 with the available names.
	out = runBinary(t, nil, "run", "--model", "test", "--tools", "nope", "x")
	if out.code != 2 || !strings.Contains(out.stderr, "available: ") || !strings.Contains(out.stderr, "sleep") {
		t.Fatalf("unknown tool: exit %d stderr %q", out.code, out.stderr)
	}
	// A typo in a spec's tools is said to be there, not in --tools (issue 38).
	spec := writeFile(t, t.TempDir(), "typo.yaml", "tools: [sleep, slep]\n")
	out = runBinary(t, nil, "run", "--model", "test", "--spec", spec, "x")
	if out.code != 2 || !strings.Contains(out.stderr, `unknown tool "slep" in the tools of --spec `+spec+":") {
		t.Fatalf("unknown tool of a spec: exit %d stderr %q", out.code, out.stderr)
	}
	// --json ends with the final event on a pause too.
	out = runBinary(t, nil, "run", "--json", "--model", "test", "--tools", "write_file", "write")
	final := lastLine(t, out.stdout)
	if out.code != 3 || final["type"] != "final" || final["status"] != "paused" || final["exit_code"] != float64(3) {
		t.Fatalf("exit %d final %v", out.code, final)
	}
	// A limit ends the run with exit 1 and a final event.
	out = runBinary(t, nil, "run", "--json", "--model", "test", "--tools", "sleep", "--tool-calls-limit", "0", "x")
	final = lastLine(t, out.stdout)
	if out.code != 1 || final["status"] != "failed" || !strings.Contains(final["error"].(string), "tool_calls_limit of 0") {
		t.Fatalf("exit %d final %v", out.code, final)
	}
	// Usage errors exit 2.
	for _, args := range [][]string{{"run"}, {"run", "--model", "nope", "x"}, {"run", "--bogus", "x"}, {"run", "--approve", "maybe", "x"}, {"frobnicate"}} {
		if out := runBinary(t, nil, args...); out.code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, out.code, out.stderr)
		}
	}
	// An unreachable server fails the run at once (exit 1).
	out = runBinary(t, nil, "run", "--nats", "nats://127.0.0.1:1", "x")
	if out.code != 1 || !strings.Contains(out.stderr, "no servers available") {
		t.Fatalf("unreachable server: exit %d stderr %q", out.code, out.stderr)
	}
	out = runBinary(t, nil, "run", "--json", "--nats", "nats://127.0.0.1:1", "x")
	final = lastLine(t, out.stdout)
	if out.code != 1 || final["type"] != "final" || final["status"] != "failed" || final["exit_code"] != float64(1) {
		t.Fatalf("unreachable server with --json: exit %d stdout %q", out.code, out.stdout)
	}
	// A scripted model that runs out fails loudly (exit 1).
	path := writeFile(t, t.TempDir(), "one.yaml", "turns:\n  - tool_calls: [{tool: sleep, args: {seconds: 0}}]\n")
	out = runBinary(t, nil, "run", "--model", "script:"+path, "--tools", "sleep", "x")
	if out.code != 1 || !strings.Contains(out.stderr, "script exhausted") {
		t.Fatalf("exit %d stderr %q", out.code, out.stderr)
	}
}

// SIGINT while a tool runs: the run ends with exit 130, the --json output
// still ends with the final event, and the running task is cancelled.
func TestBinaryInterrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), agentBinary(t), "run", "--json", "--model", "script:"+sleepScript(t, dir, 60), "--tools", "sleep", "nap")
	cmd.Dir = dir
	p := startPiped(t, cmd)
	signalled := false
	last := p.events(t, func(ev map[string]any) {
		if ev["type"] == "tool_call" && !signalled {
			signalled = true
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
		}
	})
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit: %v\nstderr: %s", err, p.stderr.String())
	}
	if last["type"] != "final" || last["status"] != "interrupted" || last["exit_code"] != float64(130) {
		t.Fatalf("last line %v", last)
	}
	// Both say why, not Go's "context canceled".
	const why = "interrupted by SIGINT: live tasks were cancelled"
	if last["error"] != why {
		t.Errorf("final error %q, want %q", last["error"], why)
	}
	if !strings.Contains(p.stderr.String(), "agent: "+why+"\n") {
		t.Errorf("stderr lacks %q:\n%s", why, p.stderr.String())
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// demoDir is examples/demo, where `make run` finds its script.
const demoDir = "../../examples/demo"

// checkDemo runs examples/demo/check.sh on a transcript of `make run`; it
// returns what the check printed and whether it passed.
func checkDemo(t *testing.T, transcript string) (string, bool) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(demoDir, "check.sh"))
	cmd.Stdin = strings.NewReader(transcript)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out)), err == nil
}

// TestDemo runs the demo of `make run` (examples/demo/demo.sh with the
// scripted model) with the built agent: it tells the whole story, as
// check.sh reads it: background tasks, the approval, the person's answer
// and the resume.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(demoDir, "demo.sh"))
	cmd.Env = append(os.Environ(), "AGENT="+agentBinary(t), "OPENAI_API_KEY=", "NATS_URL=", "TMPDIR="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out.String())
	}
	if verdict, ok := checkDemo(t, out.String()); !ok || verdict != "ok" {
		t.Fatalf("check.sh: %s\ntranscript:\n%s", verdict, out.String())
	}
}

// TestDemoCheckFailsWithoutAPart: check.sh refuses a transcript that lacks
// one part of the story, and says which.
func TestDemoCheckFailsWithoutAPart(t *testing.T) {
	t.Parallel()
	const whole = `$ agent run --spec examples/demo/agent.yaml --approve all --store $DEMO/.offload --root $DEMO --model script:examples/demo/run.yaml "Ship the release."
model: Starting the build and the tests in the background.
⇢ sleep task 01M8PGASRX000000000000A56G running in the background
⇢ sleep task 01M8PGASRX0000000000000J7E running in the background
model: While they run, I am writing the release note.
? write_file task 01M8PGASRZ000000000000073F needs approval
! write_file task 01M8PGASRZ000000000000073F approved
⇠ sleep task 01M8PGASRX0000000000000J7E completed after 2s
⇠ sleep task 01M8PGASRX000000000000A56G completed after 4s
? ask_human task 01M8PGAXP80000000000000CDZ waits for an answer from outside
paused: the conversation waits for 1 answer (listed on stdout).
$ agent answer --store $DEMO/.offload --conversation 01M8PGASRS 01M8PGAXP80000000000000CDZ '{"content":"#releases on the team chat"}'
answer 01M8PGAXP80000000000000CDZ recorded on tools.answer.01M8PGASRS.01M8PGAXP80000000000000CDZ
$ agent resume --spec examples/demo/agent.yaml --conversation 01M8PGASRS
← ask_human success: #releases on the team chat
Built, tested, release note written.
`
	if verdict, ok := checkDemo(t, whole); !ok || verdict != "ok" {
		t.Fatalf("the whole story: %s", verdict)
	}
	lines := strings.Split(whole, "\n")
	for _, tc := range []struct {
		drop string // the lines starting with it are dropped
		want string
	}{
		{"⇢ sleep task 01M8PGASRX0000000000000J7E", "missing: background tasks started"},
		{"⇠ sleep task 01M8PGASRX000000000000A56G", "missing: background tasks completed"},
		{"? write_file", "missing: approval asked"},
		{"! write_file", "missing: approval granted"},
		{"? ask_human", "missing: question for a person, once both tasks are done"},
		{"paused:", "missing: pause"},
		{"$ agent answer", "missing: person's answer"},
		{"answer 01M8", "missing: answer recorded"},
		{"$ agent resume", "missing: resume"},
		{"← ask_human", "missing: answer delivered on resume"},
	} {
		var kept []string
		for _, l := range lines {
			if !strings.HasPrefix(l, tc.drop) {
				kept = append(kept, l)
			}
		}
		if verdict, ok := checkDemo(t, strings.Join(kept, "\n")); ok || verdict != tc.want {
			t.Errorf("without %q: %q (passed %v), want %q", tc.drop, verdict, ok, tc.want)
		}
	}
	// Out of order: the question before the tests are done.
	moved := strings.Replace(whole, "⇠ sleep task 01M8PGASRX0000000000000J7E completed after 2s\n", "", 1)
	moved = strings.Replace(moved, "paused:", "⇠ sleep task 01M8PGASRX0000000000000J7E completed after 2s\npaused:", 1)
	if verdict, ok := checkDemo(t, moved); ok {
		t.Errorf("a question before both tasks were done passed: %s", verdict)
	}
}

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// An MCP tool that elicits, served by two and by three toolworker
// replicas (each with its own server-everything): each of three
// elicitations, answered with `nats pub` or `agent answer`, reaches the
// replica that holds the parked tools/call, whichever replica pulls the
// answer's attempt first (the others hand it back: SPEC §16), and the call
// goes on there: the server's result of the answer reaches the
// conversation, each elicitation answered once, one tools/call per
// elicitation, and no replica answers the effect unknown.
func TestMCPElicitationAcrossReplicas(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d_replicas", replicas), func(t *testing.T) {
			t.Parallel()
			testElicitationAcrossReplicas(t, replicas)
		})
	}
}

func testElicitationAcrossReplicas(t *testing.T, replicas int) {
	node, serverJS := mcptest.EverythingScript(t)
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "tools.yaml"), fmt.Sprintf(`mcp_servers:
  - name: everything
    command: [%q, %q, "stdio"]
    tools: [trigger-elicitation-request]
`, node, serverJS), 0o644)
	writeFile(t, filepath.Join(dir, "run.yaml"), "turns:\n  - tool_calls: [{tool: trigger-elicitation-request}]\n  - text: never reached\n", 0o644)
	writeFile(t, filepath.Join(dir, "resume.yaml"), "turns:\n  - text: thanks\n", 0o644)
	workers := make([]*proctest.Process, replicas)
	for i := range workers {
		workers[i] = startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", fmt.Sprintf("replica-%d", i), "-v")
	}
	logs := func() string {
		var b strings.Builder
		for i, w := range workers {
			fmt.Fprintf(&b, "--- replica-%d\n%s", i, w.Logs())
		}
		return b.String()
	}

	const elicitations = 3
	for i := range elicitations {
		r := startAgent(t, agentBin, dir, "run", "--nats", srv.URL(), "--model", "script:run.yaml", "--approve", "defer", "--tools", "trigger-elicitation-request", "--json", "go")
		call := r.next(t, "tool_call")
		final := r.next(t, "final")
		if code := r.wait(t); code != 3 || final["status"] != "paused" {
			t.Fatalf("elicitation %d: exit %d, final %v; stderr:\n%s\nworkers:\n%s", i, code, final, r.stderr, logs())
		}
		conv, _ := final["conversation_id"].(string)
		task, _ := call["task_id"].(string)
		name := fmt.Sprintf("Ada %d", i)
		answer := fmt.Sprintf(`{"content":{"name":%q,"check":true}}`, name)
		var cmd *exec.Cmd
		if i%2 == 0 {
			cmd = exec.Command(natsCLI(t), "--server", srv.URL(), "pub", "tools.answer."+conv+"."+task, answer)
		} else {
			cmd = exec.Command(agentBin, "answer", "--nats", srv.URL(), "--conversation", conv, task, answer)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("elicitation %d: %s: %v\n%s", i, cmd.Args[0], err, out)
		}
		r2 := startAgent(t, agentBin, dir, "resume", "--nats", srv.URL(), "--model", "script:resume.yaml", "--json", "--conversation", conv)
		final2 := r2.next(t, "final")
		if code := r2.wait(t); code != 0 || final2["output"] != "thanks" {
			t.Fatalf("elicitation %d: resume: exit %d final %v; stderr:\n%s\nworkers:\n%s", i, code, final2, r2.stderr, logs())
		}
		hist, err := exec.Command(agentBin, "history", "--nats", srv.URL(), "--conversation", conv).Output()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(hist), "- Name: "+name) || !strings.Contains(string(hist), "- Agreed to terms: true") {
			t.Fatalf("elicitation %d: the server's result of the answer is not in the history:\n%s\nworkers:\n%s", i, hist, logs())
		}
	}
	all := logs()
	for what, want := range map[string]int{
		`"msg":"tools/call"`: elicitations, // never called again
		`"msg":"elicitation: the MCP call waits for a person's answer"`: elicitations,
		`"msg":"elicitation answered: the MCP call goes on"`:            elicitations, // each answered once, by its holder
		"does not hold the call":                                        0,
		"effect unknown":                                                0,
	} {
		if n := strings.Count(all, what); n != want {
			t.Errorf("%d × %s in the workers' logs, want %d:\n%s", n, what, want, all)
		}
	}
}

// The replica that holds a parked elicitation is SIGKILLed (its server
// and the call die with it; its registry entry outlives it until its TTL):
// the answer's attempt, handed back by the other replica while it could
// still be the holder's, is run there at last and answered as a call not
// held — approval_required, effect unknown, for a person — never looping
// and never calling the tool again.
func TestMCPElicitationHolderKilled(t *testing.T) {
	t.Parallel()
	node, serverJS := mcptest.EverythingScript(t)
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	// Each replica's server has an argument of its own (a marker), so
	// that its processes are told apart.
	var workers []*proctest.Process
	var markers []string
	for i := range 2 {
		marker := "mcp-holder-killed-" + protocol.NewID()
		config := filepath.Join(dir, fmt.Sprintf("tools-%d.yaml", i))
		writeFile(t, config, fmt.Sprintf(`mcp_servers:
  - name: everything
    command: [%q, %q, "stdio", %q]
    tools: [trigger-elicitation-request]
`, node, serverJS, marker), 0o644)
		workers = append(workers, startWorker(t, twBin, "--nats", srv.URL(), "--config", config, "--id", fmt.Sprintf("replica-%d", i), "-v"))
		markers = append(markers, marker)
	}
	writeFile(t, filepath.Join(dir, "run.yaml"), "turns:\n  - tool_calls: [{tool: trigger-elicitation-request}]\n  - text: never reached\n", 0o644)
	writeFile(t, filepath.Join(dir, "resume.yaml"), "turns:\n  - text: never reached\n", 0o644)
	r := startAgent(t, agentBin, dir, "run", "--nats", srv.URL(), "--model", "script:run.yaml", "--approve", "defer", "--tools", "trigger-elicitation-request", "--json", "go")
	call := r.next(t, "tool_call")
	final := r.next(t, "final")
	if code := r.wait(t); code != 3 || final["status"] != "paused" {
		t.Fatalf("exit %d, final %v; stderr:\n%s", code, final, r.stderr)
	}
	conv, _ := final["conversation_id"].(string)
	task, _ := call["task_id"].(string)
	holder, other := workers[0], workers[1]
	holderMarker, otherMarker := markers[0], markers[1]
	if !strings.Contains(holder.Logs(), "the MCP call waits for a person's answer") {
		holder, other = other, holder
		holderMarker, otherMarker = otherMarker, holderMarker
	}
	// The holder's server waits on the elicitation's answer: the EOF of
	// its stdin does not end it. It dies with its worker, its process
	// group with it (issue 39).
	held := serverPIDs(holderMarker)
	if len(held) == 0 {
		t.Fatal("the holder's server does not run")
	}
	groups := map[int]bool{}
	for _, pid := range held {
		if g, err := syscall.Getpgid(pid); err == nil {
			groups[g] = true
		}
	}
	holder.Kill()
	<-holder.Done()
	offloadtest.EventuallyWithin(t, 10*time.Second, "the killed holder's server and its process group gone", func() error {
		if left := serverPIDs(holderMarker); len(left) > 0 {
			return fmt.Errorf("server processes left: %v", left)
		}
		if left := groupMembers(groups); len(left) > 0 {
			return fmt.Errorf("processes left in the server's process groups %v: %v", groups, left)
		}
		return nil
	})
	if len(serverPIDs(otherMarker)) == 0 {
		t.Error("the survivor's server died with the holder")
	}

	if out, err := exec.Command(natsCLI(t), "--server", srv.URL(), "pub", "tools.answer."+conv+"."+task, `{"content":{"name":"Ada","check":true}}`).CombinedOutput(); err != nil {
		t.Fatalf("nats pub: %v\n%s", err, out)
	}
	r2 := startAgent(t, agentBin, dir, "resume", "--nats", srv.URL(), "--model", "script:resume.yaml", "--json", "--conversation", conv)
	final2 := r2.next(t, "final")
	if code := r2.wait(t); code != 3 || final2["status"] != "paused" {
		t.Fatalf("resume: exit %d final %v; stderr:\n%s\nsurvivor:\n%s", code, final2, r2.stderr, other.Logs())
	}
	pending, _ := final2["pending"].([]any)
	p, _ := func() (map[string]any, bool) {
		if len(pending) != 1 {
			return nil, false
		}
		m, ok := pending[0].(map[string]any)
		return m, ok
	}()
	md, _ := p["metadata"].(map[string]any)
	if p["kind"] != "approval" || md["offload.effect"] != "unknown" {
		t.Errorf("pending after the answer %v, want one approval of an unknown effect", final2["pending"])
	}
	logs := other.Logs()
	if !strings.Contains(logs, "answer not taken by the worker that holds its call; run here") && !strings.Contains(logs, "the worker that holds the answer's call is gone; run here") {
		t.Errorf("the survivor did not run the answer for the holder gone:\n%s", logs)
	}
	if n := strings.Count(logs, `"msg":"tools/call"`); n != 0 {
		t.Errorf("the survivor called the tool %d times, want 0: the answer never starts a call", n)
	}
}

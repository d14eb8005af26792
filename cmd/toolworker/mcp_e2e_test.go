package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/conformance"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// mcpYAML serves tools of the real server-everything (stdio): a plain
// tool, one with progress, a task-based one (run in the background), and
// get-env, which shows the server's environment.
const mcpYAML = `mcp_servers:
  - name: everything
    command: [%q, %q, "stdio"]
    env: [PASSED_TO_SERVER]
    tools: [echo, trigger-long-running-operation, simulate-research-query, get-env]
    timeout: 2m
    overrides:
      simulate-research-query: {background: true}
`

// runAgentJSON runs `agent run --json` with the scripted model brain and
// returns its events.
func runAgentJSON(t *testing.T, agentBin, natsURL, dir string, brain llm.Model, tools, prompt string) []map[string]any {
	t.Helper()
	model := openaitest.NewServer(brain, openaitest.WithAPIKey("sk-test"))
	defer model.Close()
	cmd := exec.CommandContext(t.Context(), agentBin, "run", "--nats", natsURL, "--model", "openai:"+brain.Name(), "--tools", tools, "--json", prompt)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent: %v\nstderr: %s", err, stderr.String())
	}
	var events []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		events = append(events, ev)
	}
	return events
}

// An agent run calls the tools of a real MCP server on the fleet: a plain
// tool, a tool with progress (its notifications/progress become progress
// events), a task-based tool as a background call (its result a
// follow-up), and get-env: the server's environment has the variable env:
// lists and none of the worker's secrets.
func TestAgentCallsMCPTools(t *testing.T) {
	t.Parallel()
	node, serverJS := mcptest.EverythingScript(t)
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "tools.yaml"), fmt.Sprintf(mcpYAML, node, serverJS), 0o644)
	secrets := []string{"OPENAI_API_KEY=sk-worker-secret", "NATS_PASSWORD=nats-worker-secret", "PASSED_TO_SERVER=visible"}
	p := proctest.StartProcessEnv(t, append(os.Environ(), secrets...), twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "mcp-e2e", "-v")
	p.WaitLog(t, `"msg":"toolworker started"`, 60*time.Second)

	var followUp, env string
	returns := map[string]string{}
	brain := script.New("mcp-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		for _, p := range lastParts(req) {
			switch x := p.(type) {
			case message.UserPrompt:
				for _, c := range x.Content {
					if strings.HasPrefix(c.Text, "Background tool 'simulate-research-query' (task ") {
						followUp = c.Text
						return &llm.Response{Parts: []message.Part{message.Text{Content: "All done."}}}, nil
					}
				}
			case message.ToolReturn:
				returns[x.ToolName] = message.ContentText(x.Content)
				if x.ToolName == "get-env" {
					env = message.ContentText(x.Content)
				}
			}
		}
		if len(returns) > 0 {
			return &llm.Response{Parts: []message.Part{message.Text{Content: "Waiting for the research."}}}, nil
		}
		return &llm.Response{Parts: []message.Part{
			message.ToolCall{ToolName: "echo", ToolCallID: "c1", Args: `{"message":"hello fleet"}`},
			message.ToolCall{ToolName: "trigger-long-running-operation", ToolCallID: "c2", Args: `{"duration":1,"steps":2}`},
			message.ToolCall{ToolName: "simulate-research-query", ToolCallID: "c3", Args: `{"topic":"owls"}`},
			message.ToolCall{ToolName: "get-env", ToolCallID: "c4", Args: `{}`},
		}}, nil
	})
	events := runAgentJSON(t, agentBin, srv.URL(), dir, brain, "echo,trigger-long-running-operation,simulate-research-query,get-env", "use the tools")
	if !strings.Contains(returns["echo"], "Echo: hello fleet") {
		t.Errorf("echo returned %q", returns["echo"])
	}
	if !strings.Contains(returns["trigger-long-running-operation"], "Long running operation completed") {
		t.Errorf("long-running operation returned %q", returns["trigger-long-running-operation"])
	}
	var progress int
	var final map[string]any
	for _, ev := range events {
		switch ev["type"] {
		case "progress":
			progress++
		case "final":
			final = ev
		}
	}
	if progress < 2 {
		t.Errorf("%d progress events, want the server's 2", progress)
	}
	if !strings.Contains(followUp, "completed.\nResult: ") || !strings.Contains(followUp, "Research Report: owls") {
		t.Errorf("follow-up %q", followUp)
	}
	if final["status"] != "finished" {
		t.Errorf("final %v", final)
	}
	if strings.Contains(env, "secret") || !strings.Contains(env, "visible") {
		t.Errorf("the server's environment: %s", env)
	}
}

// httpEverything starts server-everything over streamable HTTP on a free
// loopback port and returns its URL.
func httpEverything(t *testing.T) string {
	t.Helper()
	node, serverJS := mcptest.EverythingScript(t)
	port := proctest.FreePort(t)
	p := proctest.StartProcessEnv(t, append(os.Environ(), fmt.Sprintf("PORT=%d", port)), node, serverJS, "streamableHttp")
	p.WaitLog(t, "listening on port", 30*time.Second)
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// A worker SIGKILLed while an MCP task runs: the next delivery, on
// another worker, finds the task recorded in the effect ledger and polls it
// (in the session it was created in) instead of calling the tool again;
// the call completes once.
func TestMCPTaskSurvivesWorkerKill(t *testing.T) {
	t.Parallel()
	url := httpEverything(t)
	twBin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	config := filepath.Join(dir, "tools.yaml")
	writeFile(t, config, fmt.Sprintf("mcp_servers:\n  - name: everything\n    url: %s\n    tools: [simulate-research-query]\n", url), 0o644)
	a := startWorker(t, twBin, "--nats", srv.URL(), "--config", config, "--id", "mcp-a", "--ack-wait", "2s", "-v")

	nc, js := agentConn(t, srv.URL())
	_ = nc
	conv := protocol.NewID()
	task := protocol.Task{TaskID: protocol.NewID(), Tool: "simulate-research-query", Args: json.RawMessage(`{"topic":"kill"}`),
		ConversationID: conv, Mode: protocol.ModeBackground, Deadline: time.Now().Add(10 * time.Minute)}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := publishTask(ctx, js, task); err != nil {
		t.Fatal(err)
	}
	a.WaitLog(t, "MCP task created, recorded in the effect ledger", 30*time.Second)
	a.Kill()
	b := startWorker(t, twBin, "--nats", srv.URL(), "--config", config, "--id", "mcp-b", "--ack-wait", "2s", "-v")
	awaitResults(t, js, conv, 1, 60*time.Second)
	results := readResults(t, js, conv)[task.TaskID]
	if len(results) != 1 || results[0].res.Status != protocol.StatusOK || !strings.Contains(string(results[0].res.Content), "Research Report: kill") {
		t.Fatalf("results %+v", results)
	}
	if !strings.Contains(b.Logs(), "resuming the MCP task recorded in the effect ledger") {
		t.Errorf("worker b did not resume the task:\n%s", b.Logs())
	}
	calls := strings.Count(a.Logs(), `"msg":"tools/call"`) + strings.Count(b.Logs(), `"msg":"tools/call"`)
	if calls != 1 {
		t.Errorf("%d tools/call, want 1", calls)
	}
}

// serverPIDs returns the processes whose command line holds needle.
func serverPIDs(needle string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), needle) && !strings.Contains(string(cmdline), "--mcp") {
			out = append(out, pid)
		}
	}
	return out
}

// groupMembers returns the processes (not zombies) whose process group is
// one of groups.
func groupMembers(groups map[int]bool) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			continue
		}
		// pid (comm) state ppid pgrp …
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && groups[g] {
			out = append(out, pid)
		}
	}
	return out
}

// A stdio MCP server runs as the tool user under a root worker and dies
// with its worker, SIGKILLed (no orphan).
func TestMCPServerDiesWithWorker(t *testing.T) {
	t.Parallel()
	node, serverJS := mcptest.EverythingScript(t)
	twBin, _ := binaries(t)
	srv := natstest.Start(t)
	// A copy of the script path no other test's server has.
	marker := "mcp-dies-" + protocol.NewID()
	p := startWorker(t, twBin, "--nats", srv.URL(), "--mcp", "everything="+node+" "+serverJS+" stdio "+marker, "--id", "mcp-dies", "-v")
	var pids []int
	offloadtest.EventuallyWithin(t, 10*time.Second, "the server runs", func() error {
		if pids = serverPIDs(marker); len(pids) == 0 {
			return errors.New("no server process")
		}
		return nil
	})
	if os.Geteuid() == 0 {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pids[0]), "status"))
		if err != nil || strings.Contains(string(status), "\nUid:\t0\t") {
			t.Errorf("the server runs as root under a root worker: %v\n%s", err, status)
		}
	}
	p.Kill()
	offloadtest.EventuallyWithin(t, 10*time.Second, "the server gone", func() error {
		if left := serverPIDs(marker); len(left) > 0 {
			return fmt.Errorf("server processes left: %v", left)
		}
		return nil
	})
}

// TestCheckAgainstMCPTool: toolworker serving a tool of a real MCP server
// (trigger-long-running-operation, declared not idempotent so that every
// rule of the effect ledger applies) passes every rule of toolworker check.
func TestCheckAgainstMCPTool(t *testing.T) {
	t.Parallel()
	node, serverJS := mcptest.EverythingScript(t)
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	config := filepath.Join(dir, "tools.yaml")
	writeFile(t, config, fmt.Sprintf(`mcp_servers:
  - name: everything
    command: [%q, %q, "stdio"]
    tools: [trigger-long-running-operation]
    prefix: ev_
    overrides:
      trigger-long-running-operation: {idempotent: false}
`, node, serverJS), 0o644)
	worker := fmt.Sprintf("%s --nats %s --config %s --ack-wait 1s --id check-mcp", bin, srv.URL(), config)
	code, out, stderr := runBinCheck(t, bin, "--nats", srv.URL(), "--tool", "ev_trigger-long-running-operation",
		"--args", `{"duration":0,"steps":1}`, "--slow-args", `{"duration":1.6,"steps":4}`, "--timeout", "30s", "--exec", worker)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != len(conformance.Rules()) {
		t.Fatalf("check: exit %d, %d lines:\n%s\nstderr: %s", code, len(lines), out, stderr)
	}
	for i, r := range conformance.Rules() {
		if lines[i] != r+": ok" {
			t.Errorf("line %d %q, want %q", i, lines[i], r+": ok")
		}
	}
}

// SIGINT to `agent run` while an MCP task-based tool runs as a background
// call: the agent's cancel reaches the worker, which sends tasks/cancel;
// the server answers that the task is cancelled there, and the worker
// publishes the cancelled result.
func TestAgentInterruptCancelsMCPTask(t *testing.T) {
	t.Parallel()
	node, serverJS := mcptest.EverythingScript(t)
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "tools.yaml"), fmt.Sprintf(mcpYAML, node, serverJS), 0o644)
	w := startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "mcp-int", "-v")
	w.WaitLog(t, `"msg":"toolworker started"`, 60*time.Second)
	results := make(chan *nats.Msg, 8)
	sub, err := srv.Conn(t).ChanSubscribe("tools.result.>", results)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	brain := script.New("mcp-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		for _, p := range lastParts(req) {
			if _, ok := p.(message.ToolReturn); ok {
				return &llm.Response{Parts: []message.Part{message.Text{Content: "Researching; I will wait."}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "simulate-research-query", ToolCallID: "c1", Args: `{"topic":"owls"}`}}}, nil
	})
	model := openaitest.NewServer(brain, openaitest.WithAPIKey("sk-test"))
	defer model.Close()
	cmd := exec.CommandContext(t.Context(), agentBin, "run", "--nats", srv.URL(), "--model", "openai:mcp-model", "--tools", "simulate-research-query", "--json", "research owls")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The server's task takes 4 s; the cancel is sent once it runs.
	w.WaitLog(t, "MCP task created, recorded in the effect ledger", 60*time.Second)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	m := offloadtest.WaitOrTimeout(t, results, "the worker to confirm the cancel")
	var res protocol.Result
	if err := json.Unmarshal(m.Data, &res); err != nil || res.Status != protocol.StatusCancelled {
		t.Fatalf("worker's result %s (%v)", m.Data, err)
	}
	// The server's own answer to tasks/cancel: the task is cancelled there.
	if line := w.WaitLog(t, "MCP task cancelled (tasks/cancel)", 10*time.Second); !strings.Contains(line, `"status":"cancelled"`) {
		t.Errorf("the server's answer to tasks/cancel: %s", line)
	}
}

// An MCP tool that elicits: agent run pauses with the call pending as an
// external call (agent pending lists it, with the server's message), a
// `nats pub` on tools.answer answers it, and agent resume continues the
// run: the answer goes back to the server, which is still in the same
// tools/call, and the call's result (the server's use of the answer)
// reaches the model.
func TestMCPElicitationAnsweredWithNatsPub(t *testing.T) {
	t.Parallel()
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
	w := startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "mcp-elicit", "-v")
	w.WaitLog(t, `"msg":"toolworker started"`, 60*time.Second)

	r := startAgent(t, agentBin, dir, "run", "--nats", srv.URL(), "--model", "script:run.yaml", "--approve", "defer", "--tools", "trigger-elicitation-request", "--json", "go")
	call := r.next(t, "tool_call")
	final := r.next(t, "final")
	if code := r.wait(t); code != 3 || final["status"] != "paused" {
		t.Fatalf("exit %d, final %v; stderr:\n%s\nworker:\n%s", code, final, r.stderr, w.Logs())
	}
	conv, _ := final["conversation_id"].(string)
	task, _ := call["task_id"].(string)
	out, err := exec.Command(agentBin, "pending", "--nats", srv.URL(), "--conversation", conv).Output()
	if err != nil {
		t.Fatalf("agent pending: %v", err)
	}
	if !strings.Contains(string(out), task) || !strings.Contains(string(out), "external") || !strings.Contains(string(out), "Please provide inputs") {
		t.Fatalf("agent pending does not list the elicitation %s as an external call:\n%s", task, out)
	}

	answer := `{"content":{"name":"Ada Lovelace","check":true}}`
	if out, err := exec.Command(natsCLI(t), "--server", srv.URL(), "pub", "tools.answer."+conv+"."+task, answer).CombinedOutput(); err != nil {
		t.Fatalf("nats pub: %v\n%s", err, out)
	}
	r2 := startAgent(t, agentBin, dir, "resume", "--nats", srv.URL(), "--model", "script:resume.yaml", "--json", "--conversation", conv)
	final2 := r2.next(t, "final")
	if code := r2.wait(t); code != 0 || final2["output"] != "thanks" {
		t.Fatalf("resume: exit %d final %v; stderr:\n%s\nworker:\n%s", code, final2, r2.stderr, w.Logs())
	}
	hist, err := exec.Command(agentBin, "history", "--nats", srv.URL(), "--conversation", conv).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(hist), "- Name: Ada Lovelace") || !strings.Contains(string(hist), "- Agreed to terms: true") {
		t.Errorf("the server's result of the answer is not in the history:\n%s", hist)
	}
	if n := strings.Count(w.Logs(), `"msg":"tools/call"`); n != 1 {
		t.Errorf("%d tools/call, want 1: the answer continues the call", n)
	}
	w.WaitLog(t, "elicitation answered: the MCP call goes on", time.Second)
	// The answer is the call's input, not its result: the agent sent no
	// cancel for the worker's copy, as it does for an answered external
	// call (the resume published what it owed before it exited).
	_, js := agentConn(t, srv.URL())
	cancels, err := js.Stream(t.Context(), "TOOLS_CANCEL")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := cancels.GetLastMsgForSubject(t.Context(), "tools.cancel."+conv+"."+task+".trigger-elicitation-request"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		if err == nil {
			t.Errorf("the agent cancelled the answered call: %s", m.Data)
		} else {
			t.Error(err)
		}
	}
}

// An MCP tool that elicits, non-blocking (--approve background): the
// model gets the acknowledgement and works on; its turn ends with the
// call still pending, so agent run pauses; a `nats pub` answer and agent
// resume deliver it to the server in the same tools/call, and the call's
// result comes to the model as a follow-up.
func TestMCPElicitationNonBlocking(t *testing.T) {
	t.Parallel()
	node, serverJS := mcptest.EverythingScript(t)
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "tools.yaml"), fmt.Sprintf(`mcp_servers:
  - name: everything
    command: [%q, %q, "stdio"]
    tools: [trigger-elicitation-request]
`, node, serverJS), 0o644)
	w := startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "mcp-elicit-nb", "-v")
	w.WaitLog(t, `"msg":"toolworker started"`, 60*time.Second)

	var mu sync.Mutex
	var ack, followUp string
	brain := script.New("mcp-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range lastParts(req) {
			switch x := p.(type) {
			case message.UserPrompt:
				for _, c := range x.Content {
					if strings.HasPrefix(c.Text, "Background tool 'trigger-elicitation-request' (task ") {
						followUp = c.Text
						return &llm.Response{Parts: []message.Part{message.Text{Content: "All done."}}}, nil
					}
				}
			case message.ToolReturn:
				ack = message.ContentText(x.Content)
				return &llm.Response{Parts: []message.Part{message.Text{Content: "Working on other things meanwhile."}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "trigger-elicitation-request", ToolCallID: "c1", Args: `{}`}}}, nil
	})
	model := openaitest.NewServer(brain, openaitest.WithAPIKey("sk-test"))
	defer model.Close()
	agent := func(args ...string) (code int, events []map[string]any, stderr string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), agentBin, append(args, "--nats", srv.URL(), "--model", "openai:mcp-model", "--approve", "background", "--json")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL())
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var ev map[string]any
			if json.Unmarshal([]byte(l), &ev) == nil {
				events = append(events, ev)
			}
		}
		return code, events, errb.String()
	}
	code, events, stderr := agent("run", "--tools", "trigger-elicitation-request", "ask me")
	final := events[len(events)-1]
	if code != 3 || final["status"] != "paused" {
		t.Fatalf("agent run: exit %d, final %v\nstderr: %s\nworker:\n%s", code, final, stderr, w.Logs())
	}
	conv, _ := final["conversation_id"].(string)
	var task string
	for _, ev := range events {
		if ev["type"] == "tool_call" {
			task, _ = ev["task_id"].(string)
		}
	}
	mu.Lock()
	if !strings.Contains(ack, "is waiting for an answer from outside as task "+task) {
		t.Errorf("acknowledgement %q", ack)
	}
	mu.Unlock()
	answer := `{"content":{"name":"Grace Hopper","check":false}}`
	if out, err := exec.Command(natsCLI(t), "--server", srv.URL(), "pub", "tools.answer."+conv+"."+task, answer).CombinedOutput(); err != nil {
		t.Fatalf("nats pub: %v\n%s", err, out)
	}
	code, events, stderr = agent("resume", "--conversation", conv)
	if final := events[len(events)-1]; code != 0 || final["output"] != "All done." {
		t.Fatalf("agent resume: exit %d, final %v\nstderr: %s\nworker:\n%s", code, final, stderr, w.Logs())
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(followUp, "completed.") || !strings.Contains(followUp, "- Name: Grace Hopper") {
		t.Errorf("follow-up %q", followUp)
	}
	if n := strings.Count(w.Logs(), `"msg":"tools/call"`); n != 1 {
		t.Errorf("%d tools/call, want 1: the answer continues the call", n)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// backgroundYAML declares command tools that workers run in the
// background (metadata background: true).
const backgroundYAML = `tools:
  - name: research
    description: Research a topic.
    command: ["./research.sh"]
    parameters:
      type: object
      properties: {topic: {type: string}}
      required: [topic]
    metadata: {background: true}
  - name: crawl
    description: Crawl for a long time.
    command: ["./crawl.sh"]
    timeout: 5m
    parameters: {type: object, properties: {}}
    metadata: {background: true}
`

const researchScript = `#!/bin/sh
read -r args
echo "found: $args"
`

// crawlScript announces its process ID on the FIFO %s (made by the
// test), then runs until it is stopped.
const crawlScript = `#!/bin/sh
echo $$ > '%s'
exec sleep 300
`

// lastParts returns the parts of the request's last message.
func lastParts(req *llm.Request) []message.Part {
	return req.Messages[len(req.Messages)-1].Parts
}

var ackRE = regexp.MustCompile(`^Tool '(\w+)' is running in the background as task ([0-9A-Z]{26})\. Its result will arrive later as a follow-up message; continue with other work meanwhile\.$`)

// A command tool with metadata {background: true} runs on a worker while the
// model keeps talking; the acknowledgement and the follow-up name the same
// task ULID, and the run ends after the follow-up was answered.
func TestAgentBackgroundCommandTool(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "research.sh"), researchScript, 0o755)
	writeFile(t, filepath.Join(dir, "crawl.sh"), "#!/bin/sh\nexit 1\n", 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), backgroundYAML, 0o644)
	startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "bg-e2e")

	var ackTask, followTask string
	brain := script.New("bg-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		for _, p := range lastParts(req) {
			switch x := p.(type) {
			case message.UserPrompt:
				for _, c := range x.Content {
					if strings.HasPrefix(c.Text, "Background tool 'research' (task ") {
						followTask = c.Text[len("Background tool 'research' (task "):][:26]
						return &llm.Response{Parts: []message.Part{message.Text{Content: "Done: " + c.Text}}}, nil
					}
				}
			case message.ToolReturn:
				if m := ackRE.FindStringSubmatch(message.ContentText(x.Content)); m != nil {
					ackTask = m[2]
					return &llm.Response{Parts: []message.Part{message.Text{Content: "I am waiting for the research."}}}, nil
				}
			}
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "research", ToolCallID: "call_1", Args: `{"topic":"owls"}`}}}, nil
	})
	model := openaitest.NewServer(brain, openaitest.WithAPIKey("sk-test"))
	defer model.Close()

	cmd := exec.CommandContext(t.Context(), agentBin, "run", "--nats", srv.URL(), "--model", "openai:bg-model", "--tools", "research", "--json", "find out about owls")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent: %v\nstderr: %s", err, stderr.String())
	}
	var started, finished map[string]any
	var final map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		switch ev["type"] {
		case "background_task_started":
			started = ev
		case "background_task_finished":
			finished = ev
		case "final":
			final = ev
		}
	}
	if _, err := protocol.ParseID(ackTask); err != nil || ackTask != followTask {
		t.Fatalf("acknowledged task %q, follow-up task %q", ackTask, followTask)
	}
	if started["task_id"] != ackTask || finished["task_id"] != ackTask || finished["status"] != "completed" {
		t.Errorf("started %v, finished %v", started, finished)
	}
	want := "Done: Background tool 'research' (task " + ackTask + ") completed.\nResult: found: {\"topic\":\"owls\"}"
	if final["status"] != "finished" || final["output"] != want {
		t.Errorf("final %v, want output %q", final, want)
	}
}

// SIGINT to `agent run` while a background command runs on a worker: the
// agent exits 130 and its cancel reaches the worker, which stops the
// command.
func TestAgentInterruptCancelsBackgroundCommand(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	fifo := filepath.Join(dir, "crawl.fifo")
	commandFIFO(t, fifo)
	writeFile(t, filepath.Join(dir, "crawl.sh"), fmt.Sprintf(crawlScript, fifo), 0o755)
	writeFile(t, filepath.Join(dir, "research.sh"), researchScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), backgroundYAML, 0o644)
	startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "bg-int")
	results := make(chan *nats.Msg, 8)
	sub, err := srv.Conn(t).ChanSubscribe("tools.result.>", results)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	brain := script.New("bg-model", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		for _, p := range lastParts(req) {
			if _, ok := p.(message.ToolReturn); ok {
				return &llm.Response{Parts: []message.Part{message.Text{Content: "Crawling; I will wait."}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "crawl", ToolCallID: "call_1", Args: `{}`}}}, nil
	})
	model := openaitest.NewServer(brain, openaitest.WithAPIKey("sk-test"))
	defer model.Close()

	cmd := exec.CommandContext(t.Context(), agentBin, "run", "--nats", srv.URL(), "--model", "openai:bg-model", "--tools", "crawl", "--json", "crawl")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The command announces itself on the FIFO once it runs.
	pidc := make(chan int, 1)
	go func() {
		b, err := os.ReadFile(fifo)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil {
			pidc <- pid
		}
	}()
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the command never started\nstderr: %s", stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var last map[string]any
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("not JSON: %q", sc.Text())
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit: %v\nstderr: %s", err, stderr.String())
	}
	if last["type"] != "final" || last["status"] != "interrupted" {
		t.Fatalf("last line %v", last)
	}
	// The worker answers the cancel with a cancelled result once the
	// command has stopped.
	m := offloadtest.WaitOrTimeout(t, results, "the worker to confirm the cancel")
	var res protocol.Result
	if err := json.Unmarshal(m.Data, &res); err != nil || res.Status != protocol.StatusCancelled {
		t.Fatalf("worker's result %s (%v)", m.Data, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the command (pid %d) still runs after the cancel: %v", pid, err)
	}
}

// onceYAML declares two background command tools and an inline one; each
// notes its run in runs.log.
const onceYAML = `tools:
  - name: research
    description: Research a topic.
    command: ["./note.sh", "research"]
    parameters:
      type: object
      properties: {topic: {type: string}}
      required: [topic]
    metadata: {background: true}
  - name: crawl
    description: Crawl a site.
    command: ["./note.sh", "crawl"]
    parameters: {type: object, properties: {}}
    metadata: {background: true}
  - name: shout
    description: Repeat the arguments.
    command: ["./note.sh", "shout"]
    parameters: {type: object, properties: {}}
`

const noteScript = `#!/bin/sh
read -r args
echo "$1" >> runs.log
echo "$1 done"
`

// `agent run --model test` calls each offered tool once, background ones
// included, and answers once their follow-ups came (issue 22: it called a
// background tool again after every follow-up, up to the request limit).
func TestTestModelCallsBackgroundCommandToolsOnce(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "note.sh"), noteScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), onceYAML, 0o644)
	startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "bg-once")

	for _, tc := range []struct{ tools, want string }{
		{"research", "I called 1 tool.\n- research returned research done"},
		// Remote tools are offered sorted by name.
		{"research,crawl,shout", "I called 3 tools.\n- crawl returned crawl done\n- research returned research done\n- shout returned shout done"},
	} {
		_ = os.Remove(filepath.Join(dir, "runs.log"))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, agentBin, "run", "--nats", srv.URL(), "--model", "test", "--tools", tc.tools, "look into it")
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("--tools %s: agent: %v\nstderr: %s", tc.tools, err, stderr.String())
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("--tools %s: output %q, want %q", tc.tools, got, tc.want)
		}
		b, err := os.ReadFile(filepath.Join(dir, "runs.log"))
		if err != nil {
			t.Fatal(err)
		}
		ran := strings.Fields(string(b))
		slices.Sort(ran)
		want := strings.Split(tc.tools, ",")
		slices.Sort(want)
		if !slices.Equal(ran, want) {
			t.Errorf("--tools %s: the tools ran %v, want each once", tc.tools, ran)
		}
	}
}

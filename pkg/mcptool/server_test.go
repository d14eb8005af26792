package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/pkg/mcptool"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// startEverything starts a stdio server-everything with cfg's other keys.
func startEverything(t *testing.T, cfg mcptool.ServerConfig, opts mcptool.Options) *mcptool.Server {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "everything"
	}
	cfg.Command = mcptest.EverythingStdio(t)
	if opts.Logger == nil && testing.Verbose() {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := mcptool.Start(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func toolNamed(t *testing.T, s *mcptool.Server, name string) *tool.Tool {
	t.Helper()
	tools, err := s.Tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q among %d", name, len(tools))
	return nil
}

// TestToolsAndCalls: the listed tools become offload tools (schema,
// description, annotations, idempotent from the hints, an override
// winning), and calls map as SPEC §16 says.
func TestToolsAndCalls(t *testing.T) {
	f := false
	s := startEverything(t, mcptool.ServerConfig{
		Prefix:    "ev_",
		Tools:     []string{"echo", "get-sum", "get-structured-content", "get-tiny-image", "trigger-long-running-operation", "simulate-research-query"},
		Overrides: map[string]mcptool.Override{"get-sum": {Idempotent: &f, Description: "adds", Timeout: mcptool.Duration(90 * time.Second)}},
	}, mcptool.Options{})
	echo := toolNamed(t, s, "ev_echo")
	if echo.Metadata[mcptool.MetaServer] != "everything" || echo.Metadata[mcptool.MetaAnnotations] == nil {
		t.Errorf("echo metadata %v", echo.Metadata)
	}
	if !strings.Contains(string(echo.Parameters), `"message"`) {
		t.Errorf("echo schema %s", echo.Parameters)
	}
	if sum := toolNamed(t, s, "ev_get-sum"); sum.Idempotent || sum.Description != "adds" || sum.Timeout != 90*time.Second {
		t.Errorf("get-sum: idempotent %v (override false), description %q, timeout %v (override 90s)", sum.Idempotent, sum.Description, sum.Timeout)
	}
	if echo.Timeout != mcptool.DefaultTimeout {
		t.Errorf("echo's timeout %v, want the default %v: advertised, it bounds a background call (SPEC §20)", echo.Timeout, mcptool.DefaultTimeout)
	}
	if long := toolNamed(t, s, "ev_trigger-long-running-operation"); !long.Idempotent {
		t.Error("trigger-long-running-operation (readOnlyHint) not idempotent")
	}
	if rq := toolNamed(t, s, "ev_simulate-research-query"); rq.Metadata[mcptool.MetaTaskSupport] != "required" {
		t.Errorf("research query metadata %v", rq.Metadata)
	}
	ctx := context.Background()
	v, err := echo.Run(ctx, &tool.RunContext{}, json.RawMessage(`{"message":"hi"}`))
	if err != nil || v != "Echo: hi" {
		t.Errorf("echo: %#v, %v", v, err)
	}
	v, err = toolNamed(t, s, "ev_get-structured-content").Run(ctx, &tool.RunContext{}, json.RawMessage(`{"location":"New York"}`))
	ret, ok := v.(tool.Return)
	if err != nil || !ok || !strings.Contains(string(ret.Value.(json.RawMessage)), "temperature") || len(ret.Content) == 0 || ret.Content[0].Type != "text" {
		t.Errorf("structured: %#v, %v", v, err)
	}
	v, err = toolNamed(t, s, "ev_get-tiny-image").Run(ctx, &tool.RunContext{}, json.RawMessage(`{}`))
	ret, ok = v.(tool.Return)
	var file bool
	for _, c := range ret.Content {
		file = file || (c.Type == "file" && c.MediaType == "image/png" && len(c.Data) > 0)
	}
	if err != nil || !ok || !file {
		t.Errorf("image: %#v, %v", v, err)
	}
	// isError: a retry with the server's text.
	_, err = echo.Run(ctx, &tool.RunContext{}, json.RawMessage(`{"nope":1}`))
	var retry *tool.ModelRetry
	if !errors.As(err, &retry) || !strings.Contains(retry.Message, "Invalid arguments") {
		t.Errorf("invalid arguments: %T %v", err, err)
	}
}

// TestProgress: notifications/progress become offload progress reports.
func TestProgress(t *testing.T) {
	s := startEverything(t, mcptool.ServerConfig{Tools: []string{"trigger-long-running-operation"}}, mcptool.Options{})
	var mu sync.Mutex
	var got []string
	ctx := progress.WithReporter(context.Background(), progress.ReporterFunc(func(msg string, f *float64) {
		mu.Lock()
		defer mu.Unlock()
		if f != nil {
			got = append(got, msg)
		}
	}))
	v, err := toolNamed(t, s, "trigger-long-running-operation").Run(ctx, &tool.RunContext{}, json.RawMessage(`{"duration":0.3,"steps":3}`))
	if err != nil || !strings.Contains(v.(string), "completed") {
		t.Fatalf("%v, %v", v, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, ",") != "1/3,2/3,3/3" {
		t.Errorf("progress %q", got)
	}
}

// TestTaskTool: a tool whose execution.taskSupport is required runs as an
// MCP task: recorded by Checkpoint, polled, its result read.
func TestTaskTool(t *testing.T) {
	s := startEverything(t, mcptool.ServerConfig{Tools: []string{"simulate-research-query"}}, mcptool.Options{})
	var recorded json.RawMessage
	var reports []string
	ctx := progress.WithReporter(context.Background(), progress.ReporterFunc(func(msg string, _ *float64) { reports = append(reports, msg) }))
	rc := &tool.RunContext{Checkpoint: func(_ context.Context, state json.RawMessage) error { recorded = state; return nil }}
	v, err := toolNamed(t, s, "simulate-research-query").Run(ctx, rc, json.RawMessage(`{"topic":"nats"}`))
	if err != nil || !strings.Contains(v.(string), "Research Report: nats") {
		t.Fatalf("%v, %v", v, err)
	}
	var st mcptool.TaskState
	if err := json.Unmarshal(recorded, &st); err != nil || st.Server != "everything" || st.TaskID == "" {
		t.Errorf("checkpoint %s", recorded)
	}
	if len(reports) == 0 {
		t.Error("no status message reported as progress")
	}
}

// TestSamplingIsRefused and the environment: nothing of the worker's
// environment but the minimal one and env: reaches a stdio server.
func TestServerEnvironment(t *testing.T) {
	env := map[string]string{"PATH": os.Getenv("PATH"), "NATS_CREDS": "/secret/creds", "OPENAI_API_KEY": "sk-secret", "PASSED": "yes"}
	s := startEverything(t, mcptool.ServerConfig{Tools: []string{"get-env"}, Env: []string{"PASSED"}}, mcptool.Options{Getenv: func(k string) string { return env[k] }})
	v, err := toolNamed(t, s, "get-env").Run(context.Background(), &tool.RunContext{}, json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	out := v.(string)
	if strings.Contains(out, "secret") || !strings.Contains(out, `"PASSED": "yes"`) {
		t.Errorf("server environment: %s", out)
	}
}

// TestCancel: a call whose context is cancelled ends at once with the
// cancel's cause (notifications/cancelled is sent to the server; that a
// cancel stops the work there is shown for MCP tasks by TestCancelTask,
// which reads the task's status on the server).
func TestCancel(t *testing.T) {
	s := startEverything(t, mcptool.ServerConfig{Tools: []string{"trigger-long-running-operation", "echo"}}, mcptool.Options{})
	started := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(progress.WithReporter(context.Background(), progress.ReporterFunc(func(string, *float64) { started <- struct{}{} })))
	done := make(chan error, 1)
	long := toolNamed(t, s, "trigger-long-running-operation")
	go func() {
		_, err := long.Run(ctx, &tool.RunContext{}, json.RawMessage(`{"duration":30,"steps":300}`))
		done <- err
	}()
	<-started // the server reported progress: the call runs there
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled call did not end")
	}
}

// TestCancelTask: an offload cancel of a call running as an MCP task
// reaches the server as tasks/cancel: the task is cancelled there.
func TestCancelTask(t *testing.T) {
	s := startEverything(t, mcptool.ServerConfig{Tools: []string{"simulate-research-query"}}, mcptool.Options{})
	recorded := make(chan json.RawMessage, 1)
	rc := &tool.RunContext{Checkpoint: func(_ context.Context, state json.RawMessage) error { recorded <- state; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	rq := toolNamed(t, s, "simulate-research-query")
	go func() {
		_, err := rq.Run(ctx, rc, json.RawMessage(`{"topic":"cancel me"}`))
		done <- err
	}()
	var st mcptool.TaskState
	if err := json.Unmarshal(<-recorded, &st); err != nil {
		t.Fatal(err)
	}
	if status, err := s.TaskStatus(context.Background(), st.TaskID); err != nil || status != "working" {
		t.Fatalf("before the cancel: %q, %v", status, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	if status, err := s.TaskStatus(context.Background(), st.TaskID); err != nil || status != "cancelled" {
		t.Errorf("after the cancel: %q, %v", status, err)
	}
}

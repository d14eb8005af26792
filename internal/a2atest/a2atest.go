// Package a2atest runs the A2A JS client (@a2a-js/sdk, installed from
// npm with a pinned version: internal/a2atest/node, package.json and
// package-lock.json; .ci/run runs npm ci there, never vendored) against
// the A2A face, one request a run of node/a2a.mjs.
package a2atest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/nodetest"
)

// Client is the pinned version of @a2a-js/sdk.
const Client = "1.3.0"

// dir is the directory of the npm project.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "node")
}

// Script returns node and the absolute path of the driver script
// (node/a2a.mjs). Without node or the installed client the test is
// skipped, except in CI (CI set) or with OFFLOAD_REQUIRE_A2A=1, where it
// fails.
func Script(tb testing.TB) (node, script string) {
	tb.Helper()
	node = nodetest.Node(tb, nodetest.Peer{Dir: dir(), Package: "@a2a-js/sdk", Require: "OFFLOAD_REQUIRE_A2A"})
	return node, filepath.Join(dir(), "a2a.mjs")
}

// Request is one request the client makes, after it read the agent's
// card at URL + "/.well-known/agent-card.json" (CardPath, when set,
// instead of the well-known path).
type Request struct {
	URL      string `json:"url"`
	CardPath string `json:"cardPath,omitempty"`
	Token    string `json:"token,omitempty"`
	// Op is card, send, stream, subscribe, get, list, cancel, or a push
	// config's push-create, push-get, push-list or push-delete (of TaskID:
	// PushID, PushURL, PushToken; a send's or a stream's PushURL is its
	// configuration.taskPushNotificationConfig).
	Op        string `json:"op"`
	Text      string `json:"text,omitempty"`
	Data      any    `json:"data,omitempty"`
	MessageID string `json:"messageId,omitempty"`
	ContextID string `json:"contextId,omitempty"`
	TaskID    string `json:"taskId,omitempty"`
	// ReturnImmediately sets the send's configuration.returnImmediately.
	ReturnImmediately bool   `json:"returnImmediately,omitempty"`
	PageSize          int    `json:"pageSize,omitempty"`
	PushID            string `json:"pushId,omitempty"`
	PushURL           string `json:"pushUrl,omitempty"`
	PushToken         string `json:"pushToken,omitempty"`
}

// Result is what the client returned, as the protocol's JSON (its
// proto JSON: states as TASK_STATE_…), or its error.
type Result struct {
	Result map[string]any `json:"result"`
	Error  string         `json:"error"`
	Code   any            `json:"code"`
	Name   string         `json:"name"`
}

// Task is the result's task (nil: none).
func (r *Result) Task() map[string]any {
	t, _ := r.Result["task"].(map[string]any)
	return t
}

// Events are a stream's events.
func (r *Result) Events() []map[string]any {
	evs, _ := r.Result["events"].([]any)
	out := make([]map[string]any, 0, len(evs))
	for _, e := range evs {
		m, _ := e.(map[string]any)
		out = append(out, m)
	}
	return out
}

// RequestTimeout bounds one request of [Do] (node's start, the card and
// the call) and a [Start]ed stream: generous, for machines under load.
const RequestTimeout = 2 * time.Minute

// Do makes request in with the client and returns what it got.
func Do(ctx context.Context, tb testing.TB, in Request) *Result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	node, script := Script(tb)
	data, err := json.Marshal(in)
	if err != nil {
		tb.Fatal(err)
	}
	file := filepath.Join(tb.TempDir(), "request.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, script, file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	return lastResult(tb, stdout.Bytes(), stderr.String())
}

// lastResult is the result of the script's output: its last line.
func lastResult(tb testing.TB, stdout []byte, stderr string) *Result {
	tb.Helper()
	lines := bytes.Split(bytes.TrimSpace(stdout), []byte("\n"))
	var out Result
	if err := json.Unmarshal(lines[len(lines)-1], &out); err != nil {
		tb.Fatalf("a2a.mjs: %v: %q\n%s", err, stdout, stderr)
	}
	return &out
}

// Streaming is a stream or subscribe request the client is making
// ([Start]): its events as they arrive, then its result.
type Streaming struct {
	cmd    *exec.Cmd
	lines  *bufio.Scanner
	out    bytes.Buffer // every line read
	stderr bytes.Buffer
}

// Start starts request in (op stream or subscribe) with the client; its
// process is ended when the test ends, if it has not.
func Start(ctx context.Context, tb testing.TB, in Request) *Streaming {
	tb.Helper()
	node, script := Script(tb)
	data, err := json.Marshal(in)
	if err != nil {
		tb.Fatal(err)
	}
	file := filepath.Join(tb.TempDir(), "request.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	tb.Cleanup(cancel)
	s := &Streaming{cmd: exec.CommandContext(ctx, node, script, file)}
	s.cmd.Stderr = &s.stderr
	pipe, err := s.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	s.lines = bufio.NewScanner(pipe)
	s.lines.Buffer(make([]byte, 0, 64*1024), 16<<20)
	return s
}

// Next returns the stream's next event as it arrives; false once the
// stream ended (then [Streaming.Wait] tells how).
func (s *Streaming) Next() (map[string]any, bool) {
	for s.lines.Scan() {
		s.out.Write(s.lines.Bytes())
		s.out.WriteByte('\n')
		var line struct {
			Event map[string]any `json:"event"`
		}
		if json.Unmarshal(s.lines.Bytes(), &line) == nil && line.Event != nil {
			return line.Event, true
		}
	}
	return nil, false
}

// Wait reads the rest of the stream and returns the result.
func (s *Streaming) Wait(tb testing.TB) *Result {
	tb.Helper()
	for {
		if _, ok := s.Next(); !ok {
			break
		}
	}
	if err := s.cmd.Wait(); err != nil {
		tb.Fatalf("a2a.mjs: %v\n%s", err, s.stderr.String())
	}
	return lastResult(tb, s.out.Bytes(), s.stderr.String())
}

// State is task's status state (TASK_STATE_…).
func State(task map[string]any) string {
	st, _ := task["status"].(map[string]any)
	s, _ := st["state"].(string)
	return s
}

// Package aguitest runs the AG-UI JS client (@ag-ui/client, installed
// from npm with a pinned version: internal/aguitest/node, package.json and
// package-lock.json; .ci/run runs npm ci there, never vendored) against
// the AG-UI face, as a frontend drives it.
package aguitest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/offload-dev/offload/internal/nodetest"
)

// Client is the pinned version of @ag-ui/client.
const Client = "1.0.0"

// dir is the directory of the npm project.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "node")
}

// Script returns node and the absolute path of the driver script
// (node/agui.mjs). Without node or the installed client the test is
// skipped, except in CI (CI set) or with OFFLOAD_REQUIRE_AGUI=1, where
// it fails.
func Script(tb testing.TB) (node, script string) {
	tb.Helper()
	node = nodetest.Node(tb, nodetest.Peer{Dir: dir(), Package: "@ag-ui/client", Require: "OFFLOAD_REQUIRE_AGUI"})
	return node, filepath.Join(dir(), "agui.mjs")
}

// Run is one run of the client's HttpAgent on a thread.
type Run struct {
	URL      string           `json:"url"` // the face's POST /agui/{agent}
	Token    string           `json:"token"`
	ThreadID string           `json:"threadId"`
	RunID    string           `json:"runId"`
	Messages []map[string]any `json:"messages,omitempty"` // the agent's messages before the run
	Prompt   string           `json:"prompt,omitempty"`   // a user message added, when set
	Resume   []map[string]any `json:"resume,omitempty"`
	// Tools are the frontend's tools the run's input offers.
	Tools []map[string]any `json:"tools,omitempty"`
	// ToolResult, when set, is a tool message added: the frontend's
	// result of its tool's call.
	ToolResult *ToolResult `json:"toolResult,omitempty"`
}

// ToolResult is a frontend's result of its tool's call.
type ToolResult struct {
	ToolCallID string `json:"toolCallId"`
	Content    string `json:"content"`
}

// Event is an AG-UI event as the client handed it to its subscriber.
type Event map[string]any

// Type is the event's type.
func (e Event) Type() string { s, _ := e["type"].(string); return s }

// Result is what the client received and made of it.
type Result struct {
	Events   []Event          `json:"events"`
	Messages []map[string]any `json:"messages"`
	Result   any              `json:"result"`
	// Error is the client's error of the run (its verification of the
	// stream, a RUN_ERROR, an HTTP error), "" for none.
	Error string `json:"error"`
}

// Types lists the events' types.
func (r *Result) Types() []string {
	var out []string
	for _, e := range r.Events {
		out = append(out, e.Type())
	}
	return out
}

// Last returns the last event of type typ (nil: none).
func (r *Result) Last(typ string) Event {
	for i := len(r.Events) - 1; i >= 0; i-- {
		if r.Events[i].Type() == typ {
			return r.Events[i]
		}
	}
	return nil
}

// Do runs the client once with in and returns what it got.
func Do(ctx context.Context, tb testing.TB, in Run) *Result {
	tb.Helper()
	node, script := Script(tb)
	data, err := json.Marshal(in)
	if err != nil {
		tb.Fatal(err)
	}
	file := filepath.Join(tb.TempDir(), "run.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, script, file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	var out Result
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		tb.Fatalf("the client's output %q: %v\n%s", stdout.String(), err, stderr.String())
	}
	return &out
}

// NodeModules returns the directory of the installed client and its
// dependencies (a page's import map serves them from there), skipping or
// failing as [Script] does without them.
func NodeModules(tb testing.TB) string {
	tb.Helper()
	Script(tb)
	return filepath.Join(dir(), "node_modules")
}

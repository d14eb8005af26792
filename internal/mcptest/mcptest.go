// Package mcptest locates the real MCP servers the tests run against:
// reference servers no one here wrote, installed from npm with pinned
// versions (internal/mcptest/node: package.json and package-lock.json;
// .ci/run runs npm ci there), never vendored.
package mcptest

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/nodetest"
)

// Everything is the pinned version of @modelcontextprotocol/server-everything.
const Everything = "2026.8.31"

// dir is the directory of the npm project.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "node")
}

// EverythingScript returns the absolute path of server-everything's entry
// point (node SCRIPT stdio|streamableHttp) and of node. Without node or
// the installed package the test is skipped, except in CI (CI set) or
// with OFFLOAD_REQUIRE_MCP=1, where it fails.
func EverythingScript(tb testing.TB) (node, script string) {
	tb.Helper()
	p := nodetest.Peer{Dir: dir(), Package: "@modelcontextprotocol/server-everything", File: "dist/index.js", Require: "OFFLOAD_REQUIRE_MCP"}
	return nodetest.Node(tb, p), p.Path()
}

// EverythingStdio returns the command of a stdio server-everything.
func EverythingStdio(tb testing.TB) []string {
	tb.Helper()
	node, script := EverythingScript(tb)
	return []string{node, script, "stdio"}
}

// ChangingToolsStdio returns the command of a stdio MCP server whose tool
// set changes on a call (changing-tools.mjs: the official TypeScript SDK,
// @modelcontextprotocol/sdk, driven by a script), for the tests of
// notifications/tools/list_changed. Skipped or failed as
// [EverythingScript] is.
func ChangingToolsStdio(tb testing.TB) []string {
	tb.Helper()
	node, _ := EverythingScript(tb) // the SDK is installed with it
	return []string{node, filepath.Join(dir(), "changing-tools.mjs")}
}

// Client is the official TypeScript SDK's MCP client
// (@modelcontextprotocol/sdk) in a node process a test drives step by
// step (task-client.mjs: one JSON step a line in, one outcome a line
// out). Its clients connect to servers over streamable HTTP with bearer
// tokens.
type Client struct {
	tb    testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	mu    sync.Mutex
	ended bool
}

// Outcome is a step's outcome: OK its result, or Error why it failed.
type Outcome struct {
	OK    json.RawMessage `json:"ok"`
	Error string          `json:"error"`
	Code  any             `json:"code"`
}

// NewClient starts a driven client, stopped when the test ends. Skipped
// or failed as [EverythingScript] is without node or the SDK.
func NewClient(tb testing.TB) *Client {
	tb.Helper()
	node, _ := EverythingScript(tb) // the SDK is installed with it
	cmd := exec.CommandContext(tb.Context(), node, filepath.Join(dir(), "task-client.mjs"))
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	c := &Client{tb: tb, cmd: cmd, in: in, out: sc}
	tb.Cleanup(c.close)
	return c
}

// close ends the client: its input closed, it exits (killed if it does
// not within a few seconds).
func (c *Client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	_ = c.in.Close()
	done := make(chan struct{})
	go func() {
		_ = c.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// Do runs one step (see task-client.mjs) and returns its outcome; a
// step whose outcome does not come is the test's failure.
func (c *Client) Do(step map[string]any) Outcome {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	line, err := json.Marshal(step)
	if err != nil {
		c.tb.Fatal(err)
	}
	if _, err := c.in.Write(append(line, '\n')); err != nil {
		c.tb.Fatalf("step %s: %v", line, err)
	}
	if !c.out.Scan() {
		c.tb.Fatalf("step %s: no outcome: %v", line, c.out.Err())
	}
	var o Outcome
	if err := json.Unmarshal(c.out.Bytes(), &o); err != nil {
		c.tb.Fatalf("step %s: outcome %s: %v", line, c.out.Bytes(), err)
	}
	return o
}

// OK runs step and returns its result decoded into a T; a step that
// failed is the test's failure.
func OK[T any](c *Client, step map[string]any) T {
	c.tb.Helper()
	o := c.Do(step)
	if o.Error != "" {
		c.tb.Fatalf("step %v: %s", step, o.Error)
	}
	var out T
	if err := json.Unmarshal(o.OK, &out); err != nil {
		c.tb.Fatalf("step %v: result %s: %v", step, o.OK, err)
	}
	return out
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/cmdtool"
	"github.com/offload-dev/offload/pkg/mcptool"
	"github.com/offload-dev/offload/pkg/tool"
)

// The MCP section (SPEC §16): the same trivial tool, echo, served by a
// worker as an MCP tool of a stdio server (the reference
// @modelcontextprotocol/server-everything, one long-lived process, a
// JSON-RPC round trip per call) and as a command tool (a process per call:
// sh reading the arguments on stdin), through the same dispatcher.

// mcpArgs are the echo calls' arguments.
const mcpArgs = `{"message":"hello from the bench"}`

// echoSys serves one echo tool through offload's path.
type echoSys struct {
	s    *offloadSystem
	ep   endpoint
	tool *tool.Tool
}

func (e echoSys) start(ctx context.Context, n, slots int) error {
	return e.s.startWorkersWith(ctx, e.ep, n, slots, workerOpts{served: e.tool})
}
func (e echoSys) stop(ctx context.Context) { e.s.stopWorkers(ctx) }
func (e echoSys) call(ctx context.Context) (time.Duration, error) {
	rc := &tool.RunContext{ConversationID: e.s.conv, RunID: e.s.conv, ToolCallID: "c", ToolName: e.s.tool.Name}
	v, err := e.s.tool.Run(ctx, rc, json.RawMessage(mcpArgs))
	if err != nil {
		return 0, err
	}
	if r, ok := v.(tool.Return); ok {
		v = r.Value
	}
	if raw, ok := v.(json.RawMessage); ok {
		v = string(raw)
	}
	if !strings.Contains(fmt.Sprint(v), "hello from the bench") {
		return 0, fmt.Errorf("unexpected result %v", v)
	}
	return 0, nil
}

// everythingScript finds server-everything as internal/mcptest installs
// it (npm ci --prefix internal/mcptest/node).
func everythingScript() (node, script string, err error) {
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", err
	}
	script, err = filepath.Abs(filepath.Join("internal", "mcptest", "node", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err == nil {
		_, err = os.Stat(script)
	}
	return node, script, err
}

// measureMCP measures the echo tool as an MCP tool against the same as a
// command tool, in the same run: throughput with one replica of c.slots
// slots, latency with one slot and one call in flight, alternating.
func measureMCP(ctx context.Context, ep endpoint, c config, srv *serverProcess, out io.Writer) ([]bool, error) {
	node, script, err := everythingScript()
	if err != nil {
		fmt.Fprintf(out, "MCP tools (SPEC §16): skipped, server-everything not installed (npm ci --prefix internal/mcptest/node): %v\n\n", err)
		return nil, nil
	}
	server, err := mcptool.Start(ctx, mcptool.ServerConfig{Name: "everything", Command: []string{node, script, "stdio"}, Tools: []string{"echo"}}, mcptool.Options{})
	if err != nil {
		return nil, err
	}
	defer server.Stop()
	mtools, err := server.Tools()
	if err != nil || len(mtools) != 1 {
		return nil, errors.Join(err, errors.New("server-everything lists no echo"))
	}
	cfg, err := cmdtool.Parse([]byte(`tools:
  - name: echo
    description: Echoes the message.
    command: ["/bin/sh", "-c", "read -r a; printf 'Echo: %s' \"$a\""]
    parameters: {type: object, properties: {message: {type: string}}, required: [message]}
`))
	if err != nil {
		return nil, err
	}
	ctools, err := cfg.Tools(cmdtool.Options{})
	if err != nil {
		return nil, err
	}
	off, err := newOffloadSystem(ctx, ep)
	if err != nil {
		return nil, err
	}
	defer off.close()
	systems := []system{echoSys{off, ep, mtools[0]}, echoSys{off, ep, ctools[0]}}
	n, rounds := min(c.tn, 2000), min(c.tpRounds, 3)
	tp, err := throughputs(ctx, systems, 1, c.slots, n, c.inflight, rounds, srv)
	if err != nil {
		return nil, err
	}
	const latRounds = 6
	var all [2][]time.Duration
	for r := range latRounds {
		for k := range systems {
			i := (r + k) % len(systems)
			s := systems[i]
			if err := s.start(ctx, 1, 1); err != nil {
				return nil, err
			}
			_, err := samples(ctx, s.call, 20)
			var d []time.Duration
			if err == nil {
				d, err = samples(ctx, s.call, max(min(c.n, 600)/latRounds, 1))
			}
			s.stop(ctx)
			if err != nil {
				return nil, err
			}
			all[i] = append(all[i], d...)
		}
	}
	lats := [2]latency{percentiles(all[0]), percentiles(all[1])}
	fmt.Fprintln(out, "MCP tools (SPEC §16): echo as an MCP tool of a stdio server (@modelcontextprotocol/server-everything, one process, a JSON-RPC round trip per call) against the same tool as a command tool (a process per call), same run")
	fmt.Fprintf(out, "Throughput: 1 replica of %d slots, %d in flight, %d calls, medians over %d rounds; latency: 1 slot, 1 call in flight, alternating turns\n", c.slots, c.inflight, n, rounds)
	fmt.Fprintln(out, "| echo served as | calls/s | p50 | p99 |")
	fmt.Fprintln(out, "| --- | --- | --- | --- |")
	for i, name := range []string{"an MCP tool (stdio)", "a command tool"} {
		fmt.Fprintf(out, "| %s | %.0f | %s | %s |\n", name, tp.rate(i), lats[i].p50.Round(time.Microsecond), lats[i].p99.Round(time.Microsecond))
	}
	fmt.Fprintf(out, "MCP / command: throughput %.2f×, p50 %.2f×\n\n", tp.ratio(0, 1), float64(lats[0].p50)/float64(lats[1].p50))
	return nil, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// followWorld is a toolworker serving the tools of changing-tools.mjs (a
// server of the official TypeScript MCP SDK whose tool set changes on a
// call) and a command tool, shadow; the test calls them with a dispatcher
// and reads the registry.
type followWorld struct {
	p  *proctest.Process
	d  *remote.Dispatcher
	kv jetstream.KeyValue
}

// call calls toolName with args and returns the result's text.
func (f *followWorld) call(ctx context.Context, t *testing.T, toolName, args string) string {
	t.Helper()
	res, err := f.d.Call(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: toolName, Args: json.RawMessage(args), ConversationID: protocol.NewID()})
	if err != nil {
		t.Fatalf("call %s: %v", toolName, err)
	}
	if res.Status != protocol.StatusOK {
		t.Fatalf("call %s: %s %s %s", toolName, res.Status, res.ErrorType, res.Message)
	}
	var s string
	if json.Unmarshal(res.Content, &s) != nil {
		s = string(res.Content)
	}
	return s
}

// entry returns the registry entry of toolName, nil when there is none.
func (f *followWorld) entry(ctx context.Context, t *testing.T, toolName string) *natsjs.RegistryEntry {
	t.Helper()
	e, err := f.kv.Get(ctx, natsjs.RegistryKey(toolName, "follow"))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var entry natsjs.RegistryEntry
	if err := json.Unmarshal(e.Value(), &entry); err != nil {
		t.Fatal(err)
	}
	return &entry
}

// count returns how many lines of the worker's log hold each of substrs.
func (f *followWorld) count(substrs ...string) int {
	n := 0
	for _, l := range f.p.Lines() {
		all := true
		for _, s := range substrs {
			all = all && strings.Contains(l, s)
		}
		if all {
			n++
		}
	}
	return n
}

// waitCount waits until count(substrs...) reaches n.
func (f *followWorld) waitCount(t *testing.T, n int, substrs ...string) {
	t.Helper()
	// Polled: the lines are the signal, but WaitLog finds the first line
	// that holds a text, and these waits count them.
	offloadtest.EventuallyWithin(t, 30*time.Second, fmt.Sprintf("%d log lines with %q", n, substrs), func() bool {
		return f.count(substrs...) >= n
	})
}

// The worker follows a real MCP server's notifications/tools/list_changed
// (SPEC §16): a tool the server registers after initialization is
// advertised (schema, description, annotations, mcp.server, the server's
// limits) and served by its own consumer; a changed schema is advertised; a tool removed has its
// registry entry withdrawn while a call of it in flight finishes with its
// result; a name offload refuses, or one another tool of the worker has,
// is not served; a storm of 200 notifications costs a few listings, not
// 200; a listing over the cap leaves the tools served as they were.
func TestMCPToolsFollowListChanged(t *testing.T) {
	t.Parallel()
	command := mcptest.ChangingToolsStdio(t)
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	config := filepath.Join(dir, "tools.yaml")
	writeFile(t, config, fmt.Sprintf(`tools:
  - name: shadow
    command: ["/bin/echo", "the command tool"]
mcp_servers:
  - name: changing
    command: [%q, %q]
    limits: {max_in_flight: 2}
`, command[0], command[1]), 0o644)
	f := &followWorld{p: proctest.StartProcess(t, bin, "--nats", srv.URL(), "--config", config, "--id", "follow", "-v")}
	f.p.WaitLog(t, `"msg":"toolworker started"`, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if f.d, err = remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(t)}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.d.Stop(context.Background()) })
	js, err := jetstream.New(srv.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	if f.kv, err = js.KeyValue(ctx, "tools_registry"); err != nil {
		t.Fatal(err)
	}
	if e := f.entry(ctx, t, "late"); e != nil {
		t.Fatalf("registry entry of late before the server registered it: %+v", e)
	}

	// Added: advertised and served.
	if got := f.call(ctx, t, "add-late", `{}`); got != "added" {
		t.Fatalf("add-late: %q", got)
	}
	f.waitCount(t, 1, `"msg":"mcp tool added"`, `"tool":"late"`)
	e := f.entry(ctx, t, "late")
	if e == nil || e.Description != "A tool registered after initialization." || !strings.Contains(string(e.Parameters), `"hold"`) ||
		e.Metadata["mcp.server"] != "changing" || !e.Idempotent || e.Limits == nil || e.Limits.MaxInFlight != 2 {
		t.Fatalf("registry entry of late: %+v", e)
	}
	if got := f.call(ctx, t, "late", `{"text":"hi"}`); got != "late: hi" {
		t.Fatalf("late: %q", got)
	}

	// A call in flight, then the schema changed, then the tool removed.
	held := make(chan string, 1)
	go func() {
		res, err := f.d.Call(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "late", Args: json.RawMessage(`{"text":"held","hold":true}`), ConversationID: protocol.NewID()})
		switch {
		case err != nil:
			held <- err.Error()
		case res.Status != protocol.StatusOK:
			held <- string(res.Status) + " " + res.Message
		default:
			var s string
			_ = json.Unmarshal(res.Content, &s)
			held <- s
		}
	}()
	f.waitCount(t, 2, `"msg":"tools/call"`, `"tool":"late"`)
	f.call(ctx, t, "change-late", `{}`)
	f.waitCount(t, 1, `"msg":"mcp tool changed"`, `"tool":"late"`)
	if e := f.entry(ctx, t, "late"); e == nil || e.Description != "A tool changed after registration." || !strings.Contains(string(e.Parameters), `"n"`) {
		t.Fatalf("registry entry of late after its change: %+v", e)
	}
	// The worker checks the arguments against the new schema (n is
	// required now) before the server sees them.
	res, err := f.d.Call(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "late", Args: json.RawMessage(`{"text":"old"}`), ConversationID: protocol.NewID()})
	// (The server would refuse them too, with an MCPError: the worker's
	// own schema check says "missing properties".)
	if err != nil || res.Status != protocol.StatusRetry || !strings.Contains(res.Message, `missing properties: ["n"]`) {
		t.Fatalf("a call of the old schema after the change: %+v %v", res, err)
	}
	if got := f.call(ctx, t, "late", `{"text":"new","n":1}`); got != "late: new" {
		t.Fatalf("a call of the new schema: %q", got)
	}
	f.call(ctx, t, "remove-late", `{}`)
	f.waitCount(t, 1, `"msg":"mcp tool retired"`, `"tool":"late"`)
	if e := f.entry(ctx, t, "late"); e != nil {
		t.Fatalf("registry entry of a removed tool: %+v", e)
	}
	select {
	case got := <-held:
		t.Fatalf("the held call ended before its release: %q", got)
	default:
	}
	f.call(ctx, t, "release", `{}`)
	select {
	case got := <-held:
		if got != "late: held" {
			t.Fatalf("the call in flight of a removed tool: %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the call in flight of a removed tool was lost")
	}
	f.waitCount(t, 1, `"msg":"tool retired"`, `"tool":"late"`) // its part ended after it

	// Names refused: one outside [A-Za-z0-9_-]{1,64}, one the worker's
	// command tool has.
	f.call(ctx, t, "add", `{"name":"bad name!"}`)
	f.waitCount(t, 1, `"msg":"a tool the server lists is not served"`, `"tool":"bad name!"`)
	f.call(ctx, t, "add", `{"name":"shadow"}`)
	f.waitCount(t, 1, `another tool of the worker has its name`, `"tool":"shadow"`)
	if got := f.call(ctx, t, "shadow", `{}`); !strings.Contains(got, "the command tool") {
		t.Fatalf("shadow after the server listed a tool of its name: %q", got)
	}

	// A storm: a few listings, not one per notification.
	before, err := strconv.Atoi(f.call(ctx, t, "lists", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	f.call(ctx, t, "storm", `{"n":200}`)
	f.call(ctx, t, "add-late", `{}`) // a change after the storm, to wait for
	f.waitCount(t, 2, `"msg":"mcp tool added"`, `"tool":"late"`)
	after, err := strconv.Atoi(f.call(ctx, t, "lists", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := after - before; n < 1 || n > 3 {
		t.Fatalf("%d tools/list for 201 notifications, want 1 to 3", n)
	}

	// Over the cap: the tools served stay.
	f.call(ctx, t, "add-many", fmt.Sprintf(`{"n":%d}`, 510))
	f.waitCount(t, 1, `"msg":"tools/list after tools/list_changed failed`, "more than 500")
	if e := f.entry(ctx, t, "many-0"); e != nil {
		t.Fatalf("a tool of a listing over the cap advertised: %+v", e)
	}
	if got := f.call(ctx, t, "late", `{"text":"still"}`); got != "late: still" {
		t.Fatalf("late after a listing over the cap: %q", got)
	}
}

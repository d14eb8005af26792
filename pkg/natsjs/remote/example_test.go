package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// runServer starts an in-process nats-server with JetStream for an example;
// the returned function shuts it down and removes its store.
func runServer() (url string, shutdown func()) {
	dir, err := os.MkdirTemp("", "natsjs-example")
	if err != nil {
		panic(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	return s.ClientURL(), func() {
		s.Shutdown()
		s.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

type greetArgs struct {
	Name string `json:"name"`
}

// A worker serves a Go tool; the agent side finds it in the registry and
// calls it like a local tool.
func Example() {
	url, shutdown := runServer()
	defer shutdown()
	ctx := context.Background()

	// Worker side (the toolworker binary does this).
	wc, _ := nats.Connect(url)
	defer wc.Close()
	greet := tool.Func("greet", "Greet someone.", func(_ context.Context, _ *tool.RunContext, a greetArgs) (string, error) {
		return "Hello, " + a.Name + "!", nil
	})
	w, err := worker.New(worker.Config{Conn: wc, ID: "worker-1", Tools: []*tool.Tool{greet}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	// Agent side.
	ac, _ := nats.Connect(url)
	defer ac.Close()
	d, _ := remote.NewDispatcher(remote.DispatcherConfig{Conn: ac})
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer d.Stop(ctx)
	ts, err := remote.NewToolset(remote.ToolsetConfig{Conn: ac, Dispatcher: d})
	if err != nil {
		panic(err)
	}
	if err := ts.Start(ctx); err != nil {
		panic(err)
	}
	defer ts.Stop(ctx)

	tools, _ := ts.Tools(ctx)
	for _, t := range tools {
		fmt.Printf("%s: %s\n", t.Name, t.Description)
	}
	rc := &tool.RunContext{ConversationID: protocol.NewID(), ToolCallID: "call_1"}
	v, err := tools[0].Run(ctx, rc, json.RawMessage(`{"name":"Ada"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(v.(tool.Return).Value.(json.RawMessage)))
	// Output:
	// greet: Greet someone.
	// "Hello, Ada!"
}

// Dispatcher.Call publishes a task and waits for its result; a task for a
// tool no worker serves can be cancelled.
func ExampleDispatcher_Call() {
	url, shutdown := runServer()
	defer shutdown()
	ctx := context.Background()
	nc, _ := nats.Connect(url)
	defer nc.Close()

	up := tool.Func("upper", "Upper-case a name.", func(_ context.Context, _ *tool.RunContext, a greetArgs) (string, error) {
		return strings.ToUpper(a.Name), nil
	})
	w, _ := worker.New(worker.Config{Conn: nc, ID: "w", Tools: []*tool.Tool{up}})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)
	d, _ := remote.NewDispatcher(remote.DispatcherConfig{Conn: nc})
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer d.Stop(ctx)

	conv := protocol.NewID()
	res, err := d.Call(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "upper", Args: json.RawMessage(`{"name":"ada"}`), ConversationID: conv})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, string(res.Content), res.Worker)

	res, err = d.Call(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "upper", Args: json.RawMessage(`{"name":5}`), ConversationID: conv})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.ErrorType)
	// Output:
	// ok "ADA" w
	// retry InvalidArguments
}

// A Client wires the agent side: the dispatcher, the toolset of what the
// workers advertise and the executor of background calls, started and
// stopped together.
func ExampleClient() {
	url, shutdown := runServer()
	defer shutdown()
	ctx := context.Background()

	wc, _ := nats.Connect(url)
	defer wc.Close()
	greet := tool.Func("greet", "Greet someone.", func(_ context.Context, _ *tool.RunContext, a greetArgs) (string, error) {
		return "Hello, " + a.Name + "!", nil
	})
	w, _ := worker.New(worker.Config{Conn: wc, ID: "worker-1", Tools: []*tool.Tool{greet}})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	ac, _ := nats.Connect(url)
	defer ac.Close()
	client, err := remote.NewClient(remote.ClientConfig{Conn: ac})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)
	// An agent would take client.Toolset() as a toolset and
	// client.Executor() as the executor of its BackgroundTools.
	tools, _ := client.Toolset().Tools(ctx)
	rc := &tool.RunContext{ConversationID: protocol.NewID(), ToolCallID: "call_1"}
	v, err := tools[0].Run(ctx, rc, json.RawMessage(`{"name":"Grace"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(tools[0].Name, string(v.(tool.Return).Value.(json.RawMessage)))
	// Output:
	// greet "Hello, Grace!"
}

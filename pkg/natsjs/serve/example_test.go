package serve_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/tool"
)

// An embedder's service: a conversation started pauses on an approval;
// the decision, published by anyone on its subject, wakes it and the
// service continues it by itself.
func Example() {
	dir, _ := os.MkdirTemp("", "serve-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go ns.Start()
	ns.ReadyForConnections(10 * time.Second)
	defer ns.WaitForShutdown()
	defer ns.Shutdown()
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()

	deployed := make(chan string, 1)
	deploy := tool.Func("deploy", "Deploy.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		deployed <- "deployed"
		return "deployed", nil
	}, tool.NeedsApproval())
	tools, _ := tool.NewSet(deploy)
	a, _ := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{tools}, AllowDeferred: true})

	// The service as agent serve wires it (agentproc): the conversation
	// store on the connection, the core over it.
	p, _ := agentproc.Open(ctx, agentproc.Options{Conn: nc, Conversations: true})
	srv, err := p.Service(ctx, agentproc.ServeOptions{Agents: []serve.Agent{{Name: "ops", Agent: a}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = srv.Stop(ctx) }()

	run, _ := srv.Service.StartConversation(ctx, "ops", "deploy", "")
	<-run.Done()
	f := run.Final()
	fmt.Println(f.Status, f.Pending[0].Tool)

	// A person approves, e.g. nats pub tools.decision.<conv>.<task> '{"approved":true}'.
	_, _ = js.Publish(ctx, "tools.decision."+f.ConversationID+"."+f.Pending[0].TaskID, []byte(`{"approved":true,"by":"ann"}`))
	fmt.Println(<-deployed)
	// Output:
	// paused deploy
	// deployed
}

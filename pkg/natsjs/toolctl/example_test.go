package toolctl_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs/toolctl"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// An operator lists a fleet's tools, pauses one (audited with who did it)
// and resumes it.
func Example() {
	dir, err := os.MkdirTemp("", "toolctl-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()

	// A worker serving a tool of 2 calls at once per tenant.
	research := tool.Func("research", "Research a topic.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "done", nil },
		tool.Limited(&limits.Limits{MaxInFlight: 2, Key: limits.KeyTenant}))
	w, err := worker.New(worker.Config{Conn: nc, ID: "w1", Tools: []*tool.Tool{research}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	ctl, err := toolctl.New(toolctl.Config{Conn: nc})
	if err != nil {
		panic(err)
	}
	if err := ctl.Pause(ctx, "research", time.Time{}, "alice"); err != nil {
		panic(err)
	}
	tools, err := ctl.List(ctx)
	if err != nil {
		panic(err)
	}
	for _, t := range tools {
		fmt.Println(t.Name, t.Workers, t.Limits, "paused by", t.Paused.By)
	}
	if err := ctl.Resume(ctx, "research", "alice"); err != nil {
		panic(err)
	}
	// Output: research [w1] max_in_flight 2 per tenant paused by alice
}

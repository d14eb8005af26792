package session_test

import (
	"context"
	"fmt"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// A run pauses on an approval and is saved; later (in any process) the
// decision is admitted and the conversation resumed.
func Example() {
	ctx := context.Background()
	store := conversation.NewMemory() // convstore.Store in production
	deploy := tool.Func("deploy", "Deploy.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "deployed", nil
	}, tool.NeedsApproval())
	tools, _ := tool.NewSet(deploy)
	a, _ := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{tools}, AllowDeferred: true})

	// agent run: claim, run with a checkpoint at every step, save the pause.
	id := protocol.NewID()
	s, _ := session.Open(ctx, session.Config{Store: store}, id, true)
	res, err := a.Run(ctx, "deploy", &agent.RunOptions{ConversationID: id, Capabilities: []agent.Capability{s.Checkpointer()}})
	_ = s.Finish(ctx, res, err)
	s.Close()
	task := res.PendingRecord().Tasks[0].TaskID
	fmt.Println("paused:", res.Paused())

	// agent resume: claim, collect (here: a decision given by hand),
	// prepare the run's options, run, save.
	s, _ = session.Open(ctx, session.Config{Store: store}, id, false)
	defer s.Close()
	_ = s.Admit(conversation.ArrivalDecision, task, []byte(`{"approved":true,"by":"ann"}`))
	fmt.Println("waiting:", len(s.Unresolved(deferred.KindApproval, deferred.KindExternal)))
	opts, _ := s.Prepare("")
	opts.Capabilities = []agent.Capability{s.Checkpointer()}
	res, err = a.Run(ctx, "", opts)
	_ = s.Finish(ctx, res, err)
	fmt.Println("output:", res.Output)
	// Output:
	// paused: true
	// waiting: 0
	// output: {"deploy":"deployed"}
}

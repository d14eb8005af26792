package background_test

import (
	"context"
	"errors"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/tool"
)

// A non-blocking approval decided by an expiry that fails the run (SPEC
// §12, on_timeout fail): the run ends with the *deferred.ApprovalTimeoutError,
// the model is not called again, the tool does not run.
func TestNonBlockingExpiryFailsTheRun(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{}, 1)
	deploy := tool.Func("deploy", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ran <- struct{}{}
		return "deployed", nil
	}, tool.NeedsApproval())
	d := background.NewDecisions()
	m := model(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("deploy", "c1", "{}"))
		}
		return text("waiting")
	})
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{
		NonBlocking: &background.NonBlockingConfig{Tools: background.SelectAll(), Waiter: d}})}}, deploy)
	out := make(chan error, 1)
	go func() {
		_, err := a.Run(t.Context(), "go", nil)
		out <- err
	}()
	asked, signal := d.Asked()
	for len(asked) == 0 {
		select {
		case <-signal:
		case err := <-out:
			t.Fatalf("the run returned before it waited for the decision: %v", err)
		}
		asked, signal = d.Asked()
	}
	offloadtest.Eventually(t, "the acknowledgement's model request", func() error {
		if len(m.Requests()) < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	if err := d.Decide(asked[0].TaskID, &deferred.ApprovalTimeoutError{Tool: "deploy", TaskID: asked[0].TaskID}); err != nil {
		t.Fatal(err)
	}
	err := offloadtest.WaitOrTimeout(t, out, "the run to return")
	if te, ok := errors.AsType[*deferred.ApprovalTimeoutError](err); !ok || te.TaskID != asked[0].TaskID {
		t.Fatalf("run error %v, want the approval's timeout", err)
	}
	if n := len(m.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the call, the acknowledgement)", n)
	}
	select {
	case <-ran:
		t.Error("the expired call ran")
	default:
	}
}

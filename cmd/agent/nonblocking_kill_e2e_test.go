package main

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The crash window of a non-blocking call: the agent is SIGKILLed after
// the approved call was dispatched to the worker (its
// background_task_started) and before the next save, so the stored state
// still has the call waiting for its decision, and the decision is read
// again by agent resume. The resume dispatches the same task and attempt
// again; the result the worker stored for it answers the call: deploy ran
// once, and its result reached the model once.
func TestNonBlockingKilledAfterApprovedDispatch(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	cmd := d.command("run", "--approve", "background",
		`[{"tool":"deploy","args":{"target":"prod","slow":true}},{"tool":"research","args":{"topic":"tides"}}]`)
	p := startPiped(t, cmd)
	var conv, task string
	var acked, published, killed bool
	p.events(t, func(ev map[string]any) {
		typ, _ := ev["type"].(string)
		conv, _ = ev["conversation_id"].(string)
		switch {
		case typ == "deferred_tool_requests":
			for _, id := range ev["task_ids"].(map[string]any) {
				task = id.(string)
			}
		case typ == "tool_result" && ev["tool"] == "deploy":
			acked = true
		case typ == "model_request_started" && acked && !published:
			// The acknowledgement is saved; research runs on, so no model
			// request (and no save) follows the decision.
			published = true
			d.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
		case typ == "background_task_started" && ev["tool"] == "deploy" && !killed:
			killed = true
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	})
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != -1 || !killed {
		t.Fatalf("killed agent: %v (killed %v)\n%s", err, killed, p.stderr.String())
	}
	// The crash window: the stored state has not seen the dispatch.
	if st := d.state(conv); st.Pending == nil || len(st.Pending.Tasks) != 2 {
		t.Fatalf("stored pending %+v, want deploy's approval and research", st.Pending)
	}
	// deploy finishes on the worker while no agent runs.
	d.tools.open()
	d.waitMessage(natsjs.NamesFor("").Results, protocol.Subjects{}.Result(conv, task, "deploy"))
	r := d.agent("resume", "--conversation", conv)
	want := fmt.Sprintf("Background tool 'deploy' (task %s) completed.\nResult: deployed prod", task)
	if out, _ := r.final["output"].(string); r.code != 0 || !strings.Contains(out, want) {
		t.Fatalf("resume: %v\nwant output with %q", r, want)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want once", got)
	}
	reqs := d.model.Requests()
	body := string(reqs[len(reqs)-1].Body)
	if n := strings.Count(body, fmt.Sprintf("(task %s) completed", task)); n != 1 {
		t.Errorf("deploy's outcome reached the model %d times in the last request", n)
	}
	if st := d.state(conv); st.Pending != nil {
		t.Errorf("still pending: %+v", st.Pending)
	}
}

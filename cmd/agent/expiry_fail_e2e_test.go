package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs/convstore"
)

// expiryFailSpec is a spec whose approvals fail their run after 1 s
// (SPEC §12): the server writes the timeout's decision,
// {"approved":false,"by":"timeout","reason":"expired","on_timeout":"fail"},
// the one a reader admits as the call's timeout.
const expiryFailSpec = "approval: {timeout: 1s, on_timeout: fail}\n"

// An expiry with on_timeout fail, read by agent resume or by a run
// waiting inline (--approve wait): the run fails (exit 1) with an error
// naming the call, the model is not called with the expiry, the tool
// does not run, and the status index says failed.
func TestDurableExpiryFailEndsTheRun(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	failed := func(how string, code int, final map[string]any, conv, task string, requests int) {
		t.Helper()
		want := "approval of tool 'deploy' (task " + task + ") timed out (on_timeout: fail)"
		if e, _ := final["error"].(string); code != exitFailed || final["status"] != "failed" || !strings.Contains(e, want) {
			t.Errorf("%s: exit %d, final %v; want exit %d, failed with %q", how, code, final, exitFailed, want)
		}
		if n := len(d.model.Requests()); n != requests {
			t.Errorf("%s: %d model requests after the expiry, want none", how, n-requests)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		store, err := convstore.New(ctx, convstore.Config{JetStream: d.nats.JetStream(t)})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := store.GetStatus(ctx, conv); err != nil || st == nil || st.Status != "failed" {
			t.Errorf("%s: status index %+v, %v; want failed", how, st, err)
		}
	}

	spec := writeFile(t, d.dir, "spec.yaml", expiryFailSpec)
	conv, pending := d.paused("--spec", spec, deployProd)
	task := only(t, pending, "approval deploy")
	d.decisionsOn(conv, task, 1) // the server's, at the timeout
	requests := len(d.model.Requests())
	r := d.agent("resume", "--conversation", conv)
	failed("resume", r.code, r.final, conv, task, requests)

	var requestsAtDecision int
	w := d.runApproveWait(func(conv, task string) {
		requestsAtDecision = len(d.model.Requests()) // the server writes the expiry a second later
	}, "--spec", spec)
	failed("inline wait", exitCode(t, w.err), w.last, w.conv, w.task, requestsAtDecision)
	if got := d.tools.deployed(); len(got) != 0 {
		t.Errorf("deployed %v after expiries", got)
	}
}

package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
)

// quorumWorld is a serve world whose agent's approvals need two
// approvers, ann and bob holding approver tokens.
func quorumWorld(t *testing.T) *serveWorld {
	t.Helper()
	w := newServeWorld(t)
	if err := os.WriteFile(w.spec, []byte("name: ops\nmodel: openai:fake-model\ntools: [deploy, research]\napproval: {required: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.tokens, []byte(serveOperator+" operator ops\n"+serveViewer+" viewer val\nann-token-0123456789 approver ann\nbob-token-0123456789 approver bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// awaitVotes waits until GET /v1/pending shows the approvals by want of
// the conversation's call (the replica counts them as it reads them: no
// signal outside it, polled).
func awaitVotes(t *testing.T, url string, want ...string) {
	t.Helper()
	offloadtest.Eventually(t, fmt.Sprintf("approvals by %v", want), func() error {
		code, list := api(t, "GET", url+"/v1/pending", serveViewer, "")
		calls, _ := list["pending"].([]any)
		if code != 200 || len(calls) != 1 {
			return fmt.Errorf("%d %v", code, list)
		}
		approvals, _ := calls[0].(map[string]any)["approvals"].([]any)
		var by []string
		for _, a := range approvals {
			by = append(by, a.(map[string]any)["by"].(string))
		}
		if !slices.Equal(by, want) {
			return fmt.Errorf("approvals by %v", by)
		}
		return nil
	})
}

// approval {required: 2} under agent serve (SPEC §12) without
// --trust-nats-by: raw nats pub approvals are not counted, whatever
// their by; the API's (signed by the replica with the service's key) are:
// ann's keeps the call pending, bob's runs it once.
func TestServeE2EQuorum(t *testing.T) {
	w := quorumWorld(t)
	_, url := w.replica(t)
	conv, task := startPaused(t, url, "prod")
	decision := url + "/v1/conversations/" + conv + "/calls/" + task + "/decision"
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"mallory"}`)
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"eve"}`)
	if code, m := api(t, "POST", decision, "ann-token-0123456789", `{"approved":true}`); code != 200 {
		t.Fatalf("ann's approval: %d %v", code, m)
	}
	awaitVotes(t, url, "ann")
	if code, m := api(t, "POST", decision, "ann-token-0123456789", `{"approved":true}`); code != 409 {
		t.Fatalf("ann again: %d %v", code, m)
	}
	if got := w.tools.deployed(); len(got) != 0 {
		t.Fatalf("deployed %v after one approver", got)
	}
	if code, m := api(t, "POST", decision, "bob-token-0123456789", `{"approved":true}`); code != 200 {
		t.Fatalf("bob's approval: %d %v", code, m)
	}
	view := awaitFinished(t, url, conv)
	if out, _ := view["output"].(string); !strings.Contains(out, "deploy:deployed prod") {
		t.Errorf("output %q", out)
	}
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod"}) {
		t.Errorf("deployed %v, want [prod] once", got)
	}
}

// With --trust-nats-by every decision's by counts: two raw nats pub
// approvals by distinct names run the call.
func TestServeE2EQuorumTrustNATSBy(t *testing.T) {
	w := quorumWorld(t)
	_, url := w.replica(t, "--trust-nats-by")
	conv, task := startPaused(t, url, "prod")
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	awaitVotes(t, url, "ann")
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"bob"}`)
	awaitFinished(t, url, conv)
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod"}) {
		t.Errorf("deployed %v, want [prod] once", got)
	}
}

// A spec's approve: background with approval {required: 2} (accepted:
// the live wait counts the quorum too), under agent serve
// --trust-nats-by: the non-blocking deploy waits, paused, with one
// approver's raw approval counted; the second identity's runs it once.
func TestServeE2EQuorumNonBlocking(t *testing.T) {
	w := quorumWorld(t)
	if err := os.WriteFile(w.spec, []byte("name: ops\nmodel: openai:fake-model\ntools: [deploy, research]\napprove: background\napproval: {required: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := w.replica(t, "--trust-nats-by")
	conv, task := startPaused(t, url, "prod")
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	awaitVotes(t, url, "ann")
	if got := w.tools.deployed(); len(got) != 0 {
		t.Fatalf("deployed %v after one approver", got)
	}
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"bob"}`)
	awaitFinished(t, url, conv)
	if got := w.tools.deployed(); !slices.Equal(got, []string{"prod"}) {
		t.Errorf("deployed %v, want [prod] once", got)
	}
}

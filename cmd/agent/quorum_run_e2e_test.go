package main

import (
	"testing"
)

// Quorum under `agent run` and `agent resume` (SPEC §12): a spec's
// approval: {required: 2} is saved with the pending call; an approval
// counts when agent serve signed it or with --trust-nats-by, so raw
// `nats pub` approvals keep the call pending without the flag, and with
// it the call runs once two distinct identities approved it.
const quorumSpec = "approval: {required: 2}\n"

func TestRunQuorumUntrustedApprovalsDoNotCount(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := writeFile(t, d.dir, "spec.yaml", quorumSpec)
	conv, pending := d.paused("--spec", spec, deployProd)
	task := only(t, pending, "approval deploy")
	d.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	d.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"bob"}`)
	r := d.agent("resume", "--spec", spec, "--conversation", conv)
	if r.code != exitPaused {
		t.Errorf("resume with two unsigned approvals: %v, want a pause", r)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Errorf("deployed %v on approvals nobody authenticated", got)
	}
}

func TestRunQuorumTrustNATSBy(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	spec := writeFile(t, d.dir, "spec.yaml", quorumSpec)
	conv, pending := d.paused("--spec", spec, deployProd)
	task := only(t, pending, "approval deploy")
	subject := "tools.decision." + conv + "." + task
	d.pub(subject, `{"approved":true,"by":"ann"}`)
	r := d.agent("resume", "--spec", spec, "--trust-nats-by", "--conversation", conv)
	if r.code != exitPaused {
		t.Errorf("resume with one approval of two: %v, want a pause", r)
	}
	if got := d.tools.deployed(); len(got) != 0 {
		t.Fatalf("deployed %v on one approval of two", got)
	}
	d.pub(subject, `{"approved":true,"by":"bob"}`)
	r = d.agent("resume", "--spec", spec, "--trust-nats-by", "--conversation", conv)
	if r.code != 0 || r.final["output"] != "seen deploy:deployed prod" {
		t.Errorf("resume with two approvals: %v", r)
	}
	if got := d.tools.deployed(); len(got) != 1 {
		t.Errorf("deployed %v, want prod once", got)
	}
}

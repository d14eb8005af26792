package main

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// peopleCmd is what the commands of people share (pending, approve, deny,
// answer): they read the pending records, never a conversation's state
// or history, so that the approver and answerer roles of
// deploy/nats/auth.conf can run them (SPEC §9).
type peopleCmd struct {
	e env
	f *runFlags
}

// openedPending is a connection to the pending records.
type openedPending struct {
	*convstore.Pending
	c *conn
}

// open connects (on the embedded default, to the store's server, started
// when none runs) and opens the pending records.
func (p peopleCmd) open(ctx context.Context) (*openedPending, error) {
	if err := protocol.ValidatePrefix(p.f.prefix); err != nil {
		return nil, usageErr("--prefix: %v", err)
	}
	log := newLogger(p.e.stderr, p.f.verbose)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e := p.e
	if !p.f.verbose {
		e.stderr = io.Discard // the server's URL and CLI options matter to a run, not here
	}
	c, err := connect(ctx, e, p.f, log, nil)
	if err != nil {
		return nil, err
	}
	ctx, stopWatch := c.refusals.Watch(ctx) // a permission lacking ends it at once
	defer stopWatch()
	js, err := jetstream.New(c.nc)
	if err != nil {
		c.close()
		return nil, err
	}
	pend, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: js, Provision: p.f.conn.ProvisionOptions(p.f.prefix), Logger: log})
	if err != nil {
		c.close()
		return nil, &exitError{code: exitFailed, err: err}
	}
	// An approval of a call that needs a quorum is checked as one by its
	// --by; it counts only where the replicas trust by (agent serve
	// --trust-nats-by): the CLI has no key to sign it (SPEC §12).
	pend.Identities = &convstore.Identities{TrustBy: true}
	return &openedPending{Pending: pend, c: c}, nil
}

// liveApprovals returns the approvals a live run of conv waits for (agent
// --approve wait), skipping those of recorded: best effort, and at once
// empty for a role that may not read the approvals stream (only the
// approver, the agent and admin may).
func (o *openedPending) liveApprovals(ctx context.Context, conv string, recorded map[string]bool) []deferred.PendingTask {
	ctx, stop := o.c.refusals.Watch(ctx)
	defer stop()
	return o.Announcer.Waiting(ctx, conv, recorded)
}

// liveConversations returns the conversations with approvals announced:
// best effort, as liveApprovals.
func (o *openedPending) liveConversations(ctx context.Context) []string {
	ctx, stop := o.c.refusals.Watch(ctx)
	defer stop()
	return o.Announcer.Conversations(ctx)
}

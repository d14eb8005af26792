package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// opened is what the commands that read or answer a stored conversation
// without running it opened: the connection and the pending desk (agent
// pending, approve, deny, answer), or the store (agent history).
type opened struct {
	c     *conn
	desk  *pending.Desk
	convs *convstore.Conversations
}

// openQuiet connects (on the embedded default, to the store's server,
// started when none runs; its URL and CLI options said only with
// --verbose: they matter to a run, not here) and calls open, within 30 s,
// a permission lacking ending it at once.
func openQuiet(ctx context.Context, e env, f *runFlags, open func(ctx context.Context, o *opened, log *slog.Logger) error) (*opened, error) {
	if err := protocol.ValidatePrefix(f.prefix); err != nil {
		return nil, usageErr("--prefix: %v", err)
	}
	log := newLogger(e.stderr, f.verbose)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	quiet := e
	if !f.verbose {
		quiet.stderr = io.Discard
	}
	c, err := connect(ctx, quiet, f, log, nil)
	if err != nil {
		return nil, err
	}
	ctx, stopWatch := c.Refusals.Watch(ctx)
	defer stopWatch()
	o := &opened{c: c}
	if err := open(ctx, o, log); err != nil {
		c.close()
		return nil, err
	}
	return o, nil
}

// openPeople opens the pending desk (agentproc.OpenDesk): the pending
// records only, never a conversation's state or history, so that the
// approver and answerer roles of deploy/nats/auth.conf can run the
// people's commands (SPEC §9).
func openPeople(ctx context.Context, e env, f *runFlags) (*opened, error) {
	return openQuiet(ctx, e, f, func(ctx context.Context, o *opened, log *slog.Logger) error {
		d, err := agentproc.OpenDesk(ctx, o.c.NC, f.conn.ProvisionOptions(f.prefix), o.c.Refusals, log, e.tracer)
		if err != nil {
			return &exitError{Code: exitFailed, Err: err}
		}
		o.desk = d
		return nil
	})
}

// openConversation opens the store and loads the conversation of
// --conversation with what arrived for it in the streams (recorded in
// the copy only: nothing is saved); an unknown conversation exits 1. The
// caller closes o.c when done.
func openConversation(ctx context.Context, e env, f *runFlags) (*opened, *conversation.State, error) {
	if err := checkConversationFlag(f.conversation); err != nil {
		return nil, nil, err
	}
	var st *conversation.State
	o, err := openQuiet(ctx, e, f, func(ctx context.Context, o *opened, log *slog.Logger) error {
		p, err := agentproc.Open(ctx, agentproc.Options{Conn: o.c.NC, Provision: f.conn.ProvisionOptions(f.prefix), Logger: log,
			Conversations: true, QuietDuplicates: true})
		if err != nil {
			return err
		}
		o.convs = p.Conversations
		st, err = o.convs.Load(ctx, f.conversation)
		switch {
		case errors.Is(err, conversation.ErrNotFound):
			return &exitError{Code: exitFailed, Err: fmt.Errorf("conversation %s is unknown", f.conversation)}
		case err != nil:
			return &exitError{Code: exitFailed, Err: err}
		}
		return nil
	})
	return o, st, err
}

// newPrinter is the printer of a command that runs the agent: JSON lines
// with --json, else the live view.
func newPrinter(e env, jsonOut bool) *liveview.Printer {
	p := liveview.NewPrinter(e.stdout, e.stderr, jsonOut)
	p.Interrupted = errInterrupted
	return p
}

// commandsOf returns the commands that answer and continue a paused
// conversation of the flags' server (SPEC §6.1).
func commandsOf(f *runFlags, embedded bool) liveview.Commands {
	return liveview.Commands{Embedded: embedded, Store: f.store, Prefix: f.prefix, Server: natsjs.RedactURL(f.conn.URL),
		Context: f.conn.Context, Creds: f.conn.Creds, Nkey: f.conn.Nkey, Spec: f.spec} // its external tools and instructions are not stored
}

// resolveCommands returns the function that lists, for a pending call of
// conversation conv, the commands that resolve it.
func resolveCommands(f *runFlags, embedded bool, conv string) func(deferred.PendingTask) []string {
	c := commandsOf(f, embedded)
	return func(p deferred.PendingTask) []string { return c.Resolve(conv, p) }
}

// resumeHint returns the command that continues conversation conv once its
// pending calls are answered.
func resumeHint(f *runFlags, embedded bool, conv string) string {
	return commandsOf(f, embedded).Resume(conv)
}
